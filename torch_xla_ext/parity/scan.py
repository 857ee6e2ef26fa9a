"""scan_layers: torch_xla's scan_layers checked per layer against a Python loop and CPU eager.

A stage list over one run record: verify's stages on the stack (scan_layers on XLA against a
Python loop over the reference layers on CPU eager), then the per-layer stage (the scanned stack
with every layer's output on XLA, the same layers in a Python loop on XLA, CPU eager and the fp64
golden per layer, and the per-layer replays of the scan's program).

Example:
    >>> import torch
    >>> layers = [torch.nn.Linear(16, 16) for _ in range(4)]
    >>> scan_layers(layers, torch.randn(2, 16), dtype="fp32").first_divergent_layer is None
    True
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Sequence

import numpy as np
import torch

from torch_xla_ext import _device, numerics
from torch_xla_ext._compat import hlo_debug as _hlo_debug
from torch_xla_ext._compat.pytree import keystr, tree_flatten_with_path, tree_leaves, tree_map
from torch_xla_ext._compat import scan as _scan
from torch_xla_ext.parity import api, pipeline, wording
from torch_xla_ext.parity.causes import cause, golden_errors, replay_figures, same_math
from torch_xla_ext.parity.casts import move, prepare, to_numpy, torch_dtype
from torch_xla_ext.parity.errors import ParityError, ParityTypeError
from torch_xla_ext.parity.program.replay import LazyArgs
from torch_xla_ext.parity.record import ProgramRun, RunRecord
from torch_xla_ext.parity.report import UNEXPLAINED, LayerParity, ParityReport, Verdict
from torch_xla_ext.parity.stages import explanation, replays
from torch_xla_ext.parity.user_code import UserFailure, call

__all__ = ["scan_layers", "scan_patched_linear_example"]


def _apply(layer: Any, carry: Any) -> Any:
    """One layer on a carry as scan_layers calls it (torch.func.functional_call): a tuple is the
    layer's positional arguments, anything else its one argument."""
    return layer(*carry) if isinstance(carry, tuple) else layer(carry)


def _float_leaves(tree: Any) -> list[Any]:
    return [t for t in tree_leaves(tree) if isinstance(t, torch.Tensor) and t.is_floating_point()]


def _flat(tree: Any) -> Any:
    """A carry's floating-point leaves as one vector (in pytree order): one figure per layer."""
    leaves = _float_leaves(tree)
    return torch.cat([t.reshape(-1) for t in leaves]) if len(leaves) > 1 else leaves[0].reshape(-1)


def _stack_modules():
    class ScannedStack(torch.nn.Module):
        """The stack under test: torch_xla's scan_layers on XLA, a plain loop elsewhere."""

        def __init__(self, layers: Sequence[Any]):
            super().__init__()
            self.layers = torch.nn.ModuleList(layers)

        def forward(self, x: Any) -> Any:
            if _float_leaves(x)[0].device.type == "xla":
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


def _layer_cause(s: Any, rounded: Any, exact: Any, g: Any, xla_err: float, cpu_err: float, narrow: bool,
                 longest_reduction: int) -> str | None:
    """One layer's cause, by the outputs' rule (:func:`~torch_xla_ext.parity.causes.cause`) on its
    slice of the per-layer replays (None: bit-identical to CPU eager is decided by the caller)."""
    if rounded is None:
        return cause(False, None, None, xla_err, cpu_err, None, narrow)
    exact_err = golden_errors(exact, g)[0]
    same = same_math(numerics.compare(exact, g.double().numpy(), equal_nan=True, check_dtype=False), exact_err,
                     xla_err, cpu_err)
    reproduced = replay_figures(s, rounded, exact, longest_reduction)[-1]
    return cause(False, same, reproduced, xla_err, cpu_err, golden_errors(rounded, g)[0], narrow)


def scan_layers(
    layers: Sequence[Any],
    x: Any,
    *,
    dtype: Any = None,
    rtol: float | None = None,
    atol: float | None = None,
    reference_layers: Sequence[Any] | None = None,
    seed: int = 0,
    rules: Any = "xla-cpu",
) -> ParityReport:
    """Checks ``torch_xla.experimental.scan_layers(layers, x)`` against a loop, per layer.

    The final output goes through :func:`verify`'s stages (scan_layers on XLA vs a Python loop over
    ``reference_layers``, default ``layers``, on CPU eager). Then every layer's output is
    compared: the scanned stack on XLA against the same layers in a Python loop on XLA and
    against CPU eager (both with ``rtol``/``atol``), and against the per-layer replays of the
    scan's program (under ``rules``, as verify's). A layer diverges when scan and loop disagree
    beyond the tolerances, or when XLA leaves CPU eager for a reason other than rounding;
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
    layers = list(layers) if isinstance(layers, (list, tuple, torch.nn.ModuleList, torch.nn.Sequential)) else None
    if not layers or not all(isinstance(l, torch.nn.Module) for l in layers):
        raise ParityError("layers: expected a non-empty sequence of nn.Module")
    ref_layers = layers if reference_layers is None else list(reference_layers)
    if len(ref_layers) != len(layers):
        raise ParityError(f"reference_layers: has {len(ref_layers)} layers, layers has {len(layers)}")
    leaves, _ = tree_flatten_with_path(x)
    for path, leaf in leaves:
        if not isinstance(leaf, torch.Tensor):
            raise ParityTypeError(f"x{keystr(path)}: the carry's leaves must be torch.Tensors (scan carries tensors), "
                                  f"got {type(leaf).__name__}")
    if not _float_leaves(x):
        raise ParityTypeError(f"x: expected a tensor or a pytree (tuple, list, dict) of tensors with at least one "
                              f"floating-point tensor, got {type(x).__name__}")
    ScannedStack, LoopStack = _stack_modules()
    r = api.request(ScannedStack(layers), (x,), dtype=dtype, rtol=rtol, atol=atol, reference=LoopStack(ref_layers),
                    seed=seed, rules=rules)
    stages = api.verify_stages(r) + [pipeline.Stage("per layer", lambda record: _per_layer(record, layers,
                                                                                           ref_layers, x))]
    return _report(pipeline.run(r, stages))


def _per_layer(record: RunRecord, layers: list, ref_layers: list, x: Any) -> None:
    """The per-layer stage: every layer on XLA (scanned, and looped), on CPU eager and in fp64,
    and the per-layer replays of the scan's program."""
    r = record.request
    try:
        scanned, looped, run = _xla_layer_outputs(layers, x, r.dtype, r.seed)
        cpu = _cpu_layer_outputs(ref_layers, x, r.dtype, r.seed)
        golden = _cpu_layer_outputs(ref_layers, x, torch.float64, r.seed, via=r.dtype)
    except UserFailure as f:
        raise UserFailure(f"per-layer {f.stage}", f.error) from f.error
    shapes = [(len(layers),) + tuple(t.shape) for t in _float_leaves(scanned[0])]
    replayed = replays.replay_program(run, None, len(shapes), shapes, keep_args=True, rules=r.rules,
                                      device=_device.current())
    rounded, exact = replayed.rounded, replayed.exact
    narrow = bool(replayed.program.rounding_points) if replayed.program is not None else False
    n = replayed.program.longest_reduction if replayed.program is not None else 1
    per_layer = []
    for k, (s, l, c, g) in enumerate(zip(scanned, looped, cpu, golden)):
        s, l, c, g = _flat(s), _flat(l), _flat(c), _flat(g)
        xla_err, cpu_err = golden_errors(s, g)[0], golden_errors(c, g)[0]
        r_k = e_k = None
        if rounded is not None:  # layer k of each stacked result, flattened in the same leaf order
            r_k = np.concatenate([np.asarray(v).reshape(sh)[k].reshape(-1) for v, sh in zip(rounded, shapes)])
            e_k = np.concatenate([np.asarray(v, dtype=np.float64).reshape(sh)[k].reshape(-1)
                                  for v, sh in zip(exact, shapes)])
        cmp = numerics.compare(s, c, equal_nan=True, check_dtype=False, **r.tol)
        layer_cause = None if cmp.ulp_histogram.get("0", 0) == cmp.total else _layer_cause(
            s, r_k, e_k, g, xla_err, cpu_err, narrow, n)
        per_layer.append(LayerParity(k, numerics.compare(s, l, equal_nan=True, check_dtype=False, **r.tol), cmp,
                                     xla_err, cpu_err, layer_cause))
    record.layers, record.layer_replays = per_layer, replayed.status


def _report(record: RunRecord) -> ParityReport:
    """verify's report of the stack, with the layers: the verdict fails when a layer diverges, and
    the explanation leads with the layers."""
    report = explanation.unfinished(record)
    if record.layers is None:
        return explanation.finished(report)
    per_layer = record.layers
    first = next((l.index for l in per_layer if l.diverges), None)
    first_mismatched = next((l.index for l in per_layer if not l.xla_vs_cpu.passed), None)
    verdict = Verdict.FAIL if (report.verdict == Verdict.FAIL or first is not None) else Verdict.PASS
    final = wording.explain(report, subject="the stack's final output")
    head = _layers_head(verdict, per_layer, first, first_mismatched, report.verdict, record.layer_replays)
    return explanation.finished(dataclasses.replace(
        report, verdict=verdict, explanation=head + " " + final, layers=tuple(per_layer),
        first_divergent_layer=first, first_mismatched_layer=first_mismatched))


def _layers_head(verdict: Verdict, per_layer: Sequence[LayerParity], first: int | None, first_mismatched: int | None,
                 final_verdict: Verdict, replay_status: str) -> str:
    n = len(per_layer)
    agree = all(l.scan_vs_loop.passed for l in per_layer)
    bit = all(l.scan_vs_loop.ulp_histogram.get("0", 0) == l.scan_vs_loop.total for l in per_layer)
    loop = ("scan_layers and the Python loop on XLA agree bit for bit in every layer" if bit else
            "scan_layers and the Python loop on XLA agree within tolerances in every layer" if agree else
            "scan_layers and the Python loop on XLA disagree")
    replay = "" if replay_status in ("ok", None) else f" (the per-layer replays were unavailable: {replay_status})"
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
    import torch_xla  # deferred, as in the XLA run's stage: `import torch_xla_ext.parity` does not import it

    from torch_xla_ext._compat import hlo as _hlo  # imports torch_xla

    device = torch_xla.device()
    torch.manual_seed(seed)
    xla_layers = [prepare(l, device, dtype) for l in layers]
    h = move(x, device, dtype)
    with torch.no_grad():
        _final, ys = call("XLA scan", _scan.scan_layers_with_intermediates, (xla_layers, h), {})
        ys_leaves = _float_leaves(ys)
        try:  # the scan's program with every layer's output, for the per-layer replays
            # Without op metadata (XLA_HLO_DEBUG=1): the program's ops keep their HLO instruction names.
            program = ProgramRun(_hlo_debug.split_metadata(_hlo.lowered_hlo_proto(ys_leaves))[0],
                                 LazyArgs([to_numpy(t.cpu()) for t in _hlo.graph_inputs(ys_leaves)]))
        except (RuntimeError, ValueError) as e:
            program = ProgramRun(None, None, f"torch_xla could not give the HLO of the scan: {type(e).__name__}: {e}")
        looped = []
        for layer in xla_layers:
            h = call("XLA loop", _apply, (layer, h), {})
            looped.append(h)
    torch_xla.sync()
    ys = tree_map(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t, ys)
    per_layer = [tree_map(lambda t, k=k: t[k] if isinstance(t, torch.Tensor) else t, ys) for k in range(len(layers))]
    cpu = lambda tree: tree_map(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t, tree)  # noqa: E731
    return per_layer, [cpu(t) for t in looped], program


def _cpu_layer_outputs(layers: Sequence[Any], x: Any, dtype: Any, seed: int, via: Any = None) -> list[Any]:
    torch.manual_seed(seed)
    h = move(move(x, "cpu", via), "cpu", dtype)
    out = []
    with torch.no_grad():
        for layer in layers:
            if via is not None:
                layer = prepare(layer, "cpu", via)
            h = call("CPU eager", _apply, (prepare(layer, "cpu", dtype), h), {})
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
    torch_dtype(dtype)
    torch.manual_seed(seed)
    reference = torch.nn.Sequential(*[torch.nn.Linear(128, 128) for _ in range(4)])
    x = torch.randn(3, 4, 5, 128)
    layers = copy.deepcopy(reference)
    if patch:
        from torch_xla.distributed.spmd.xla_sharding import apply_xla_patch_to_nn_linear  # deferred: torch_xla

        layers = apply_xla_patch_to_nn_linear(layers)
    return list(layers), list(reference), x
