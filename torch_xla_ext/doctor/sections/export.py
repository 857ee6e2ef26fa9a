"""The doctor's export section: ``export.export`` through the doctor's frontend, saved, loaded back
and run on PJRT CPU devices (no torch), against the frontend's own run (:class:`Reference`: torch_xla's
execution of the same export, or torchax's run of the model) and eager CPU PyTorch."""

from __future__ import annotations

import copy
import dataclasses
import os
import traceback
from typing import Any, Callable

import numpy as np
import torch

from torch_xla_ext import _frontend
from torch_xla_ext._compat import pytree
from torch_xla_ext.doctor.report import SectionFailed
from torch_xla_ext.errors import first_line

__all__ = ["REFERENCES", "Reference", "export_section"]


@dataclasses.dataclass(frozen=True)
class Reference:
    """The run the JAX run of the bundle is held against: its name in the report ("torch_xla",
    "torchax") and ``run(bundle, model, inputs, kwargs)``, its outputs as arrays in the bundle's order."""

    name: str
    run: Callable[[Any, Any, tuple, dict], list]
    why_not_bit_equal: str  # the report's words on why the two runs may differ in the last bits


def _torch_xla_reference(bundle: Any, model: Any, inputs: tuple, kwargs: dict) -> list[np.ndarray]:
    """torch_xla's execution of the exported program (the same export)."""
    from torch_xla_ext._compat import stablehlo as _shlo  # imports torch_xla: not for a torchax doctor

    return _shlo.run_with_torch_xla(bundle.torch_xla_export.graph_module,
                                    *pytree.tree_leaves((tuple(inputs), dict(kwargs))))


def _torchax_reference(bundle: Any, model: Any, inputs: tuple, kwargs: dict) -> list[np.ndarray]:
    """torchax's own run of the model: a copy moved to torchax's device, compiled as
    ``torchax.compile`` compiles it (its public API), its tensor outputs read back in pytree order."""
    import torchax  # the frontend's own stack; the gate checked it (doctor.torchax)

    module = copy.deepcopy(model)  # outside torchax's environment: a copy of CPU storage
    env = torchax.default_env()
    with env, torch.no_grad():
        module = module.to("jax")
        a, k = env.to_xla((tuple(inputs), dict(kwargs)))
        out = torchax.compile(module)(*a, **k)
        return [t.torch().numpy() for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


_TORCH_XLA = Reference(
    "torch_xla", _torch_xla_reference,
    "JAX's XLA and torch_xla's are two builds whose Eigen contraction kernels sum large dots\n"
    "and convolutions in different orders: the comparison reports ULPs and passes within\n"
    "float32 tolerance (docs/export.md, \"Bit-equality\").")
_TORCHAX = Reference(
    "torchax", _torchax_reference,
    "Both run on JAX's XLA, from two lowerings of torchax's (torch.export's graph for the bundle,\n"
    "the module's own ops for `torchax.compile`), so they may differ in the last bits: the comparison\n"
    "reports ULPs and passes within float32 tolerance.")

# The frontend's own run of what it exported, by frontend (one entry per _frontend.FRONTENDS).
REFERENCES: dict[str, Reference] = {"torch_xla": _TORCH_XLA, "torchax": _TORCHAX}


def export_section(model, inputs, kwargs, out_dir, *, frontend: str = _frontend.DEFAULT) -> tuple[str, str, dict]:
    # each section imports its components: one this stack refuses is that section's finding
    from torch_xla_ext import export, numerics

    reference = REFERENCES[_frontend.check(frontend)]
    bundle = export.export(model, inputs, kwargs, frontend=frontend)
    bundle_dir = os.path.join(out_dir, "bundle")
    bundle.save(bundle_dir)
    m = bundle.manifest
    kinds: dict[str, int] = {}
    for i in m.inputs:
        kinds[i.kind] = kinds.get(i.kind, 0) + 1
    tokens = [c.token_input for c in m.collectives if c.token_input is not None]
    head = (f"{len(m.inputs)} arguments ({', '.join(f'{v} {k}' for k, v in kinds.items())}), "
            f"{len(m.collectives)} collective(s), {len(m.outputs)} output(s)")
    ref = reference.name
    md = [f"Exported with `torch_xla_ext.export.export(frontend={frontend!r})`, saved to `bundle/`, loaded back",
          f"and run on PJRT CPU devices (`export.run`, no torch) against {ref}'s own run,",
          "and against eager CPU PyTorch (a different compiler, so close rather than bit-equal).",
          reference.why_not_bit_equal, "",
          "```", m.table(), "```", "",
          f"Collective tokens (recognised from the program's structure): arguments {tokens}."]
    data: dict[str, Any] = {"bundle_dir": "bundle", "manifest": m.to_dict()}
    try:
        loaded = export.load(bundle_dir)
        leaves = pytree.tree_leaves((tuple(inputs), dict(kwargs)))
        ran = export.run(loaded, *[t.numpy() if isinstance(t, torch.Tensor) else t for t in leaves])
        theirs = [np.asarray(t) for t in reference.run(bundle, model, inputs, kwargs)]
        with torch.no_grad():
            eager = [t for t in pytree.tree_leaves(model(*inputs, **kwargs)) if isinstance(t, torch.Tensor)]
        stripped = export.strip_tokens(loaded)
    except Exception as e:  # the bundle exists: keep the manifest and its path in the report
        summary = f"{head}; {first_line(e, with_type=True)}"
        raise SectionFailed(summary, "\n".join(md + ["", "```", traceback.format_exc(), "```"]),
                            {**data, "error": summary}) from e
    rows, failed = [], []
    for k, (r, t) in enumerate(zip(ran, theirs)):
        name = m.outputs[k].get("name") or f"output {k}"
        e = eager[k] if k < len(eager) else None
        if r.dtype.kind in "fc" and r.dtype == t.dtype:
            # complex: compared as its (real, imaginary) float pairs
            r2, t2 = (np.ascontiguousarray(a).view(a.real.dtype) if a.dtype.kind == "c" else a for a in (r, t))
            exact = numerics.compare(r2, t2, rtol=0, atol=0)
            close = numerics.compare(r2, t2)
            row = {"name": name, "vs_reference": exact.to_dict(), "within_tolerance": bool(close.passed)}
            if not close.passed:
                failed.append(f"{name}: {exact.mismatched}/{exact.total} differ, max {exact.max_ulp} ulp")
        else:  # integers and bools: equal or not
            same = r.shape == t.shape and r.dtype == t.dtype
            differ = int(np.count_nonzero(r != t)) if same else r.size
            row = {"name": name, "within_tolerance": differ == 0,
                   "vs_reference": {"total": int(r.size), "mismatched": differ, "max_ulp": 0 if differ == 0 else None}}
            if differ:
                failed.append(f"{name}: {differ}/{r.size} {r.dtype} values differ")
        if e is not None and e.is_floating_point() and np.asarray(r).dtype.kind == "f":
            row["vs_eager_cpu"] = numerics.compare(np.asarray(r), e.numpy(), check_dtype=False).to_dict()
        rows.append(row)
    if len(ran) != len(theirs):
        failed.append(f"{len(ran)} outputs, {ref}'s run has {len(theirs)}")
    exact_rows = [r["vs_reference"] for r in rows]
    if all(x["mismatched"] == 0 for x in exact_rows):
        verdict = "bit-equal"
    else:
        ulps = [x["max_ulp"] for x in exact_rows if x["max_ulp"] is not None]
        verdict = (f"max {max(ulps, default=0)} ulp, {sum(x['mismatched'] for x in exact_rows)}/"
                   f"{sum(x['total'] for x in exact_rows)} elements differ")
    summary = f"{head}; JAX run vs {ref}: {verdict}"
    md += [f"`strip_tokens` gives a `main` with {len(stripped.manifest.inputs)} arguments instead of {len(m.inputs)}.",
           "", f"| output | vs {ref}: mismatched | max ULP | vs eager CPU: mismatched | max ULP |",
           "|---|---|---|---|---|"]
    for r in rows:
        x, e = r["vs_reference"], r.get("vs_eager_cpu", {})
        md.append(f"| `{r['name']}` | {x['mismatched']}/{x['total']} | {x['max_ulp']} "
                  f"| {e.get('mismatched', '-')}/{e.get('total', '-')} | {e.get('max_ulp', '-')} |")
    data.update({"outputs": [{"name": r["name"], "within_tolerance": r["within_tolerance"]} for r in rows],
                 f"run_vs_{ref}": exact_rows, "reference": ref, "run_vs_eager_cpu": [r.get("vs_eager_cpu") for r in rows],
                 "verdict": verdict, "stripped_inputs": len(stripped.manifest.inputs)})
    if failed:
        raise SectionFailed(f"{head}; JAX run vs {ref} beyond float32 tolerance: {'; '.join(failed)}",
                            "\n".join(md), data)
    return summary, "\n".join(md), data
