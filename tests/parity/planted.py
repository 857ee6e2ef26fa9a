"""Planted bugs for localisation: one weight scaled, or one activation swapped for a close one,
on the XLA side only (the reference stays untouched), chosen from any model's own structure.

Shared by the localisation tests and ``bench/localize_matrix.py`` (the full matrix). A plan is
``(kind, path, amount)``: ``("weight", "model.layers.0.mlp.up_proj", 0.02)`` multiplies that
module's ``weight`` by 1.02; ``("activation", "model.layers.0.mlp.act_fn", "gelu_tanh")`` replaces
that module. ``expected(...)`` says which module calls may rightly be flagged: the planted module
and the modules containing it; any other flag is a false positive.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from torch_xla_ext import parity

EPSILONS = (0.02, 0.05, 0.25)

_LINEAR_LIKE = ("Linear", "Conv1d", "Conv2d", "Conv1D")  # Conv1D: transformers' GPT-2 projection
_NORM_LIKE = ("Norm",)  # LayerNorm, BatchNorm2d, LlamaRMSNorm, T5LayerNorm, ...


def _close_activation(module: torch.nn.Module) -> tuple[str, torch.nn.Module] | None:
    """A close-but-wrong replacement for an activation module (what a wrong config name does)."""
    name = type(module).__name__
    if name in ("GELU", "GELUActivation"):
        approximate = getattr(module, "approximate", "none")
        if approximate == "tanh":
            return "gelu_erf", torch.nn.GELU()
        return "gelu_tanh", torch.nn.GELU(approximate="tanh")
    if name in ("NewGELUActivation", "GELUTanh", "FastGELUActivation", "GELUPytorchTanh"):
        return "gelu_erf", torch.nn.GELU()
    if name == "QuickGELUActivation":
        return "gelu_erf", torch.nn.GELU()
    if name in ("SiLU", "SiLUActivation"):
        return "gelu_tanh", torch.nn.GELU(approximate="tanh")
    if name == "Hardswish":
        return "silu", torch.nn.SiLU()
    if name in ("ReLU", "ReLU6"):
        return "leaky_relu_0.01", torch.nn.LeakyReLU(0.01)
    return None


def weight_paths(model: torch.nn.Module) -> list[str]:
    """A spread of weights: the first embedding, the first and middle linear/conv, the first norm
    with a weight (paths of the modules owning them, deduplicated, in model order)."""
    linear, norm, emb = [], [], []
    for path, m in model.named_modules():
        w = getattr(m, "weight", None)
        if not path or not isinstance(w, torch.nn.Parameter) or not w.is_floating_point():
            continue
        kind = type(m).__name__
        if kind == "Embedding":
            emb.append(path)
        elif kind in _LINEAR_LIKE:
            linear.append(path)
        elif any(k in kind for k in _NORM_LIKE):
            norm.append(path)
    chosen = emb[:1] + ([linear[0], linear[len(linear) // 2]] if linear else []) + norm[:1]
    return list(dict.fromkeys(chosen))


def middle_weight(model: torch.nn.Module) -> str:
    """The middle linear/conv weight: the one case every model gets in CI."""
    linear = [p for p, m in model.named_modules()
              if p and type(m).__name__ in _LINEAR_LIKE and isinstance(getattr(m, "weight", None), torch.nn.Parameter)]
    return linear[len(linear) // 2]


def activation_path(model: torch.nn.Module) -> str | None:
    for path, m in model.named_modules():
        if path and _close_activation(m) is not None:
            return path
    return None


def plans(model: torch.nn.Module, epsilons=EPSILONS) -> list[tuple[str, str, Any]]:
    out: list[tuple[str, str, Any]] = [("weight", p, e) for p in weight_paths(model) for e in epsilons]
    act = activation_path(model)
    if act is not None:
        out.append(("activation", act, _close_activation(dict(model.named_modules())[act])[0]))
    return out


def plant(model: torch.nn.Module, plan: tuple[str, str, Any]) -> torch.nn.Module:
    """A copy of ``model`` with the planted bug; ``model`` is left alone."""
    kind, path, amount = plan
    broken = copy.deepcopy(model)
    modules = dict(broken.named_modules())
    if kind == "weight":
        with torch.no_grad():
            modules[path].weight.mul_(1.0 + amount)
        return broken
    if kind == "activation":
        parent, _, leaf = path.rpartition(".")
        name, replacement = _close_activation(modules[path])
        if name != amount:
            raise ValueError(f"plan {plan}: {path} would be swapped for {name}")
        setattr(modules[parent] if parent else broken, leaf, replacement)
        return broken
    raise ValueError(f"plan kind: expected 'weight' or 'activation', got {kind!r}")


def owners(model: torch.nn.Module, plan: tuple[str, str, Any] | None) -> tuple[str, ...]:
    """The module paths that may rightly be flagged for ``plan``: the planted module; for a weight,
    every module holding the same Parameter (GPT-2's lm_head is tied to its token embedding); and
    every module containing one of those, by object (T5's encoder and decoder call the ``shared``
    embedding, which named_modules lists once, as ``shared``)."""
    if plan is None:
        return ()
    kind, path, _ = plan
    modules = dict(model.named_modules())
    if kind == "weight":
        w = modules[path].weight
        holders = [m for m in modules.values() if any(q is w for q in m.parameters(recurse=False))]
    else:
        holders = [modules[path]]
    return tuple(p for p, m in modules.items() if any(h is s for s in m.modules() for h in holders))


def allowed(path: str, planted_paths: tuple[str, ...]) -> bool:
    """May module ``path`` rightly be flagged when the bug sits in ``planted_paths`` (from owners)?"""
    return path in planted_paths


def planted_effect(model: torch.nn.Module, broken: torch.nn.Module, capture: Any, path: str) -> float:
    """How far (RMS) the planted bug moves its module's first call's output on the inputs XLA gave
    it, in fp64. Over that call's rounding level it says whether any rule reading rounding could
    see it: below the threshold the bug is smaller than rounding."""
    from torch_xla_ext.parity.leaves import tensor_leaves
    from torch_xla_ext.parity.stages import localization
    from torch_xla_ext.parity.widening import default_dtype

    call = next(c for c in capture.calls if c.path == path and c.call == 0)
    a = dict(model.named_modules())[path]
    b = dict(broken.named_modules())[path]
    # Leaf modules (linear, norm, embedding, activation) take their tensors positionally.
    pos = [t.to(torch.float64) if t.is_floating_point() else t for k, t in call.inputs.items() if k.startswith("[0][")]
    if not pos:
        return float("nan")
    outs = []
    for mod in (a, b):
        m64 = copy.deepcopy(mod).to(torch.float64)
        with torch.no_grad(), default_dtype(torch.float64):
            outs.append(dict(tensor_leaves(m64(*[t.clone() for t in pos]))))  # in-place modules
    limit = float(torch.finfo(torch.float64).max)
    return localization.rms_error(outs[0], outs[1], limit)


def check_found_on_a_device(model: torch.nn.Module, args: tuple, kwargs: dict, device_capture: Any,
                            **compare: Any) -> Any:
    """A 2% bug in the middle weight of a made device's run (``device_capture(model, args, kwargs)``
    makes its capture) is found at its module by ``parity.compare_capture(..., **compare)``
    against the untouched ``model``, and nothing but it and its owners is flagged; the report."""
    path = middle_weight(model)
    plan = ("weight", path, 0.02)
    r = parity.compare_capture(device_capture(plant(model, plan), args, kwargs), model, args, kwargs, **compare)
    assert r.first_divergent_module == path, r.module_table()
    bugged = owners(model, plan)
    assert all(allowed(m.path, bugged) for m in r.modules if m.diverges), r.module_table()
    return r
