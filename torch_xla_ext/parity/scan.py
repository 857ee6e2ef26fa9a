"""scan_layers: torch_xla's scan_layers checked per layer against a Python loop and CPU eager."""

from __future__ import annotations

import copy
import dataclasses
import time
from typing import Any, Sequence

import numpy as np

from torch_xla_ext import numerics
from torch_xla_ext.parity import explain as _explain
from torch_xla_ext.parity import runners
from torch_xla_ext.parity._checks import tolerances
from torch_xla_ext.parity._outputs import golden_errors, replay_outputs
from torch_xla_ext.parity.api import verify
from torch_xla_ext.parity.errors import ParityError, ParityTypeError
from torch_xla_ext.parity.report import (
    REAL_DIFFERENCE,
    REASSOCIATION,
    ROUNDING_PLACEMENT,
    UNEXPLAINED,
    LayerParity,
    ParityReport,
    Verdict,
)

__all__ = ["scan_layers", "scan_patched_linear_example"]




def _apply(layer: Any, carry: Any) -> Any:
    """One layer on a carry as scan_layers calls it (torch.func.functional_call): a tuple is the
    layer's positional arguments, anything else its one argument."""
    return layer(*carry) if isinstance(carry, tuple) else layer(carry)


def _float_leaves(tree: Any) -> list[Any]:
    import torch
    from torch_xla_ext._compat.pytree import tree_leaves

    return [t for t in tree_leaves(tree) if isinstance(t, torch.Tensor) and t.is_floating_point()]


def _flat(tree: Any) -> Any:
    """A carry's floating-point leaves as one vector (in pytree order): one figure per layer."""
    import torch

    leaves = _float_leaves(tree)
    return torch.cat([t.reshape(-1) for t in leaves]) if len(leaves) > 1 else leaves[0].reshape(-1)


def _stack_modules():
    import torch

    class ScannedStack(torch.nn.Module):
        """The stack under test: torch_xla's scan_layers on XLA, a plain loop elsewhere."""

        def __init__(self, layers: Sequence[Any]):
            super().__init__()
            self.layers = torch.nn.ModuleList(layers)

        def forward(self, x: Any) -> Any:
            if _float_leaves(x)[0].device.type == "xla":
                from torch_xla_ext._compat import scan as _scan

                return _scan.scan_layers(list(self.layers), x)
            for layer in self.layers:
                x = _apply(layer, x)
            return x

    class LoopStack(ScannedStack):
        def forward(self, x: Any) -> Any:
            for layer in self.layers:
                x = _apply(layer, x)
            return x

    return ScannedStack, LoopStack


def _layer_cause(s: Any, rounded: Any, exact: Any, g: Any, xla_err: float, cpu_err: float, narrow: bool) -> str:
    if rounded is None:
        return UNEXPLAINED
    exact_err = golden_errors(exact, g)[0]
    if not _explain.same_math(numerics.compare(exact, g.double().numpy(), equal_nan=True, check_dtype=False),
                              exact_err, xla_err, cpu_err):
        return REAL_DIFFERENCE
    if numerics.compare(s, rounded.astype(np.float64), rtol=0.0, atol=0.0, equal_nan=True, check_dtype=False).passed:
        return ROUNDING_PLACEMENT if narrow else REASSOCIATION
    if xla_err <= _explain.REASSOCIATION_FACTOR * max(cpu_err, golden_errors(rounded, g)[0]):
        return REASSOCIATION
    return REAL_DIFFERENCE


def scan_layers(
    layers: Sequence[Any],
    x: Any,
    *,
    dtype: Any = None,
    rtol: float | None = None,
    atol: float | None = None,
    reference_layers: Sequence[Any] | None = None,
    seed: int = 0,
) -> ParityReport:
    """Checks ``torch_xla.experimental.scan_layers(layers, x)`` against a loop, per layer.

    The final output goes through :func:`verify` (scan_layers on XLA vs a Python loop over
    ``reference_layers``, default ``layers``, on CPU eager). Then every layer's output is
    compared: the scanned stack on XLA against the same layers in a Python loop on XLA and
    against CPU eager (both with ``rtol``/``atol``), and against the per-layer replays of the
    scan's program. A layer diverges when scan and loop disagree beyond the tolerances, or when
    XLA leaves CPU eager for a reason other than rounding placement or reassociation;
    ``first_divergent_layer`` is the first such layer (None when there is none), and the verdict
    is FAIL if the final output fails or a layer diverges. ``first_mismatched_layer`` is the
    first layer failing the comparator, whatever the cause.

    Example:
        >>> import torch
        >>> layers = [torch.nn.Linear(16, 16) for _ in range(4)]
        >>> r = scan_layers(layers, torch.randn(2, 16), dtype="fp32")
        >>> r.first_divergent_layer is None
        True
    """
    import torch

    layers = list(layers) if isinstance(layers, (list, tuple, torch.nn.ModuleList, torch.nn.Sequential)) else None
    if not layers or not all(isinstance(l, torch.nn.Module) for l in layers):
        raise ParityError("layers: expected a non-empty sequence of nn.Module")
    ref_layers = layers if reference_layers is None else list(reference_layers)
    if len(ref_layers) != len(layers):
        raise ParityError(f"reference_layers: has {len(ref_layers)} layers, layers has {len(layers)}")
    from torch_xla_ext._compat.pytree import tree_flatten_with_path, keystr

    leaves, _ = tree_flatten_with_path(x)
    for path, leaf in leaves:
        if not isinstance(leaf, torch.Tensor):
            raise ParityTypeError(f"x{keystr(path)}: the carry's leaves must be torch.Tensors (scan carries tensors), "
                                  f"got {type(leaf).__name__}")
    if not _float_leaves(x):
        raise ParityTypeError(f"x: expected a tensor or a pytree (tuple, list, dict) of tensors with at least one "
                              f"floating-point tensor, got {type(x).__name__}")
    ScannedStack, LoopStack = _stack_modules()
    report = verify(ScannedStack(layers), (x,), dtype=dtype, rtol=rtol, atol=atol, reference=LoopStack(ref_layers),
                    seed=seed)
    if report.verdict in (Verdict.EXCEPTION, Verdict.NONDETERMINISTIC_REFERENCE):
        return report
    tdtype = runners.torch_dtype(dtype)
    tol = tolerances(rtol, atol)
    try:
        with runners.user_rng_preserved():
            scanned, looped, run = _xla_layer_outputs(layers, x, tdtype, seed)
            cpu = _cpu_layer_outputs(ref_layers, x, tdtype, seed)
            golden = _cpu_layer_outputs(ref_layers, x, torch.float64, seed, via=tdtype)
    except runners.UserFailure as f:
        text = f"{type(f.error).__name__}: {f.error}"
        return dataclasses.replace(
            report, verdict=Verdict.EXCEPTION, exception=text, stage=f"per-layer {f.stage}",
            explanation=f"EXCEPTION: the per-layer {f.stage} run raised {text.splitlines()[0]}; the layers were "
                        f"not compared.")
    shapes = [(len(layers),) + tuple(t.shape) for t in _float_leaves(scanned[0])]
    program, rounded, exact, status, *_ = replay_outputs(run, len(shapes), shapes)
    narrow = bool(program.rounding_points) if program is not None else False
    per_layer = []
    for k, (s, l, c, g) in enumerate(zip(scanned, looped, cpu, golden)):
        s, l, c, g = _flat(s), _flat(l), _flat(c), _flat(g)
        xla_err, cpu_err = golden_errors(s, g)[0], golden_errors(c, g)[0]
        r_k = e_k = None
        if rounded is not None:  # layer k of each stacked result, flattened in the same leaf order
            r_k = np.concatenate([np.asarray(r).reshape(sh)[k].reshape(-1) for r, sh in zip(rounded, shapes)])
            e_k = np.concatenate([np.asarray(e, dtype=np.float64).reshape(sh)[k].reshape(-1)
                                  for e, sh in zip(exact, shapes)])
        cmp = numerics.compare(s, c, equal_nan=True, check_dtype=False, **tol)
        cause = None if cmp.ulp_histogram.get("0", 0) == cmp.total else _layer_cause(
            s, r_k, e_k, g, xla_err, cpu_err, narrow)
        per_layer.append(LayerParity(k, numerics.compare(s, l, equal_nan=True, check_dtype=False, **tol), cmp,
                                     xla_err, cpu_err, cause))
    first = next((l.index for l in per_layer if l.diverges), None)
    first_mismatched = next((l.index for l in per_layer if not l.xla_vs_cpu.passed), None)
    verdict = Verdict.FAIL if (report.verdict == Verdict.FAIL or first is not None) else Verdict.PASS
    final = _explain.explain(report.verdict, report.outputs, report.emulation, report.rounding_points,
                             report.dtype, subject="the stack's final output",
                             unrounded=report.unrounded_replay or "f64")
    head = _layers_head(verdict, per_layer, first, first_mismatched, report.verdict, status)
    return dataclasses.replace(report, verdict=verdict, explanation=head + " " + final, layers=tuple(per_layer),
                               first_divergent_layer=first, first_mismatched_layer=first_mismatched)


def _layers_head(verdict: Verdict, per_layer: Sequence[LayerParity], first: int | None, first_mismatched: int | None,
                 final_verdict: Verdict, replay_status: str) -> str:
    n = len(per_layer)
    agree = all(l.scan_vs_loop.passed for l in per_layer)
    bit = all(l.scan_vs_loop.ulp_histogram.get("0", 0) == l.scan_vs_loop.total for l in per_layer)
    loop = ("scan_layers and the Python loop on XLA agree bit for bit in every layer" if bit else
            "scan_layers and the Python loop on XLA agree within tolerances in every layer" if agree else
            "scan_layers and the Python loop on XLA disagree")
    replay = "" if replay_status == "ok" else f" (the per-layer replays were unavailable: {replay_status})"
    if first is not None:
        l = per_layer[first]
        if not l.scan_vs_loop.passed:
            why = (f"scan_layers and the Python loop on XLA differ there beyond tolerances "
                   f"({l.scan_vs_loop.mismatched}/{l.scan_vs_loop.total} elements): the scan lowering changes that "
                   f"layer")
        else:
            why = (f"it mismatches CPU eager on {l.xla_vs_cpu.mismatched}/{l.xla_vs_cpu.total} elements (error vs fp64: "
                   f"XLA {l.xla_error:.3g}, CPU {l.cpu_error:.3g}) and the cause is "
                   + ("not established" + replay if l.cause == UNEXPLAINED else "a real difference")
                   + "; start looking there")
        return f"FAIL: layer {first} of {n} is the first divergent layer: {why}."
    if verdict == Verdict.FAIL:  # only the final output fails, and every layer is explained
        return (f"FAIL: the stack's final output mismatches CPU eager; per layer, {loop}, and no layer diverges "
                f"beyond rounding (first_divergent_layer is None).")
    if first_mismatched is None:
        return f"PASS: per layer, {loop}, and every layer matches CPU eager within tolerances."
    causes = sorted({l.cause for l in per_layer if not l.xla_vs_cpu.passed})
    return (f"PASS: per layer, {loop}; {sum(not l.xla_vs_cpu.passed for l in per_layer)} of {n} layers mismatch CPU "
            f"eager (from layer {first_mismatched}), all explained by {' and '.join(causes)}, so no layer diverges "
            f"beyond rounding.")


def _xla_layer_outputs(layers: Sequence[Any], x: Any, dtype: Any, seed: int):
    import torch
    import torch_xla

    from torch_xla_ext._compat.pytree import tree_map

    from torch_xla_ext._compat import hlo as _hlo
    from torch_xla_ext._compat import hlo_debug as _hlo_debug
    from torch_xla_ext._compat import scan as _scan

    device = torch_xla.device()
    torch.manual_seed(seed)
    xla_layers = [runners.prepare(l, device, dtype) for l in layers]
    h = runners.move(x, device, dtype)
    t0 = time.perf_counter()
    with torch.no_grad():
        _final, ys = runners.call("XLA scan", _scan.scan_layers_with_intermediates, (xla_layers, h), {})
        ys_leaves = _float_leaves(ys)
        proto = args = err = None
        try:  # the scan's program with every layer's output, for the per-layer replays
            # Without op metadata (XLA_HLO_DEBUG=1): the program's ops keep their HLO instruction names.
            proto = _hlo_debug.split_metadata(_hlo.lowered_hlo_proto(ys_leaves))[0]
            args = [runners.to_numpy(t.cpu()) for t in _hlo.graph_inputs(ys_leaves)]
        except (RuntimeError, ValueError) as e:
            err = f"torch_xla could not give the HLO of the scan: {type(e).__name__}: {e}"
        looped = []
        for layer in xla_layers:
            h = runners.call("XLA loop", _apply, (layer, h), {})
            looped.append(h)
    torch_xla.sync()
    ys = tree_map(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t, ys)
    run = runners.XlaRun([(str(i), t) for i, t in enumerate(_float_leaves(ys))], proto, args, err,
                         time.perf_counter() - t0)
    per_layer = [tree_map(lambda t, k=k: t[k] if isinstance(t, torch.Tensor) else t, ys) for k in range(len(layers))]
    cpu = lambda tree: tree_map(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t, tree)  # noqa: E731
    return per_layer, [cpu(t) for t in looped], run


def _cpu_layer_outputs(layers: Sequence[Any], x: Any, dtype: Any, seed: int, via: Any = None) -> list[Any]:
    import torch
    from torch_xla_ext._compat.pytree import tree_map

    torch.manual_seed(seed)
    h = runners.move(runners.move(x, "cpu", via), "cpu", dtype)
    out = []
    with torch.no_grad():
        for layer in layers:
            if via is not None:
                layer = runners.prepare(layer, "cpu", via)
            h = runners.call("CPU eager", _apply, (runners.prepare(layer, "cpu", dtype), h), {})
            out.append(tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, h))
    return out


def scan_patched_linear_example(dtype: Any = "bf16", *, seed: int = 42, patch: bool = True):
    """The pytorch/xla#8747 configuration: 4 x nn.Linear(128, 128) run with scan_layers on XLA
    after ``apply_xla_patch_to_nn_linear`` (einsum lowering), input (3, 4, 5, 128).

    Returns ``(layers, reference_layers, x)`` for :func:`scan_layers`: the patched layers under
    test and plain ``nn.Linear`` layers with the same weights for CPU eager, as the upstream test
    compares them. ``dtype`` is only checked here; pass it to scan_layers.

    Example:
        >>> layers, reference, x = scan_patched_linear_example()
        >>> len(layers), len(reference), tuple(x.shape)
        (4, 4, (3, 4, 5, 128))
    """
    import torch

    runners.torch_dtype(dtype)
    torch.manual_seed(seed)
    reference = torch.nn.Sequential(*[torch.nn.Linear(128, 128) for _ in range(4)])
    x = torch.randn(3, 4, 5, 128)
    layers = copy.deepcopy(reference)
    if patch:
        from torch_xla.distributed.spmd.xla_sharding import apply_xla_patch_to_nn_linear

        layers = apply_xla_patch_to_nn_linear(layers)
    return list(layers), list(reference), x
