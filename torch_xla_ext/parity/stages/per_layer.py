"""scan_layers' per-layer stage: the scanned stack with every layer's output on XLA, the same
layers in a Python loop on XLA, CPU eager and the fp64 golden per layer, and the per-layer replays
of the scan's program; each layer's cause by the outputs' rule.

Example:
    >>> import torch
    >>> layers = [torch.nn.Linear(8, 8) for _ in range(2)]
    >>> s = stage(layers, layers, torch.randn(2, 8))    # after verify's stages (the device: the XLA run's)
    >>> s.reads, s.writes
    (('request', 'device'), ('per_layer',))
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from torch_xla_ext import numerics
from torch_xla_ext._compat import scan as _scan
from torch_xla_ext._compat.pytree import tree_leaves, tree_map
from torch_xla_ext.parity.casts import move, prepare
from torch_xla_ext.parity.causes import cause, golden_errors, replay_figures, same_math
from torch_xla_ext.parity.pipeline import Stage
from torch_xla_ext.parity.record import PerLayer, ProgramRun, ScanRecord
from torch_xla_ext.parity.report import LayerParity
from torch_xla_ext.parity.stages import replays, xla_run
from torch_xla_ext.parity.user_code import UserFailure, call

__all__ = ["apply_layer", "flat", "float_leaves", "stage"]


def apply_layer(layer: Any, carry: Any) -> Any:
    """One layer on a carry as scan_layers calls it (torch.func.functional_call): a tuple is the
    layer's positional arguments, anything else its one argument."""
    return layer(*carry) if isinstance(carry, tuple) else layer(carry)


def float_leaves(tree: Any) -> list[Any]:
    """A carry's floating-point tensors, in pytree order."""
    return [t for t in tree_leaves(tree) if isinstance(t, torch.Tensor) and t.is_floating_point()]


def flat(tree: Any) -> Any:
    """A carry's floating-point leaves as one vector (in pytree order): one figure per layer."""
    leaves = float_leaves(tree)
    return torch.cat([t.reshape(-1) for t in leaves]) if len(leaves) > 1 else leaves[0].reshape(-1)


def _layer_cause(s: Any, rounded: np.ndarray | None, exact: np.ndarray | None, g: Any, xla_err: float,
                 cpu_err: float, narrow: bool, longest_reduction: int) -> str | None:
    """One layer's cause, by the outputs' rule (:func:`~torch_xla_ext.parity.causes.cause`) on its
    slice of the per-layer replays (None: bit-identical to CPU eager is decided by the caller)."""
    if rounded is None:
        return cause(False, None, None, xla_err, cpu_err, None, narrow)
    exact_err = golden_errors(exact, g)[0]
    same = same_math(numerics.compare(exact, g.double().numpy(), equal_nan=True, check_dtype=False), exact_err,
                     xla_err, cpu_err)
    reproduced = replay_figures(s, rounded, exact, longest_reduction)[-1]
    return cause(False, same, reproduced, xla_err, cpu_err, golden_errors(rounded, g)[0], narrow)


def _per_layer(record: ScanRecord, layers: list, ref_layers: list, x: Any) -> None:
    r = record.request
    try:
        scanned, looped, run = _xla_layer_outputs(layers, x, r.dtype, r.seed)
        cpu = _cpu_layer_outputs(ref_layers, x, r.dtype, r.seed)
        golden = _cpu_layer_outputs(ref_layers, x, torch.float64, r.seed, via=r.dtype)
    except UserFailure as f:
        raise UserFailure(f"per-layer {f.stage}", f.error) from f.error
    shapes = [(len(layers),) + tuple(t.shape) for t in float_leaves(scanned[0])]
    replayed = replays.replay_program(run, None, len(shapes), shapes, keep_args=True, rules=r.rules,
                                      device=record.device)
    rounded, exact = replayed.rounded, replayed.exact
    narrow = bool(replayed.program.rounding_points) if replayed.program is not None else False
    n = replayed.program.longest_reduction if replayed.program is not None else 1
    per_layer = []
    for k, (s, l, c, g) in enumerate(zip(scanned, looped, cpu, golden)):
        s, l, c, g = flat(s), flat(l), flat(c), flat(g)
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
    record.per_layer = PerLayer(tuple(per_layer), replayed.status)


def stage(layers: list, ref_layers: list, x: Any) -> Stage:
    """The per-layer stage of ``layers`` (on XLA) and ``ref_layers`` (on the CPU) on the carry ``x``."""
    return Stage("per layer", lambda record: _per_layer(record, layers, ref_layers, x), reads=("request", "device"),
                 writes=("per_layer",), seconds="per layer", release="collect")


def _xla_layer_outputs(layers: Sequence[Any], x: Any, dtype: Any, seed: int):
    import torch_xla  # torch_xla: only where the run is on XLA (xla_run's reason)

    device = torch_xla.device()
    torch.manual_seed(seed)
    xla_layers = [prepare(l, device, dtype) for l in layers]
    h = move(x, device, dtype)
    with torch.no_grad():
        _final, ys = call("XLA scan", _scan.scan_layers_with_intermediates, (xla_layers, h), {})
        try:  # the scan's program with every layer's output (its arguments copied), for the per-layer replays
            program, _ = xla_run.program_of(float_leaves(ys), [], dtype)
        except (RuntimeError, ValueError) as e:  # torch_xla's own error types
            program = ProgramRun(None, None, f"torch_xla could not give the HLO of the scan: {type(e).__name__}: {e}")
        looped = []
        for layer in xla_layers:
            h = call("XLA loop", apply_layer, (layer, h), {})
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
            h = call("CPU eager", apply_layer, (prepare(layer, "cpu", dtype), h), {})
            out.append(tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, h))
    return out
