"""scan_layers: torch_xla's scan_layers checked per layer against a Python loop and CPU eager.

A stage list over one run record: verify's stages on the stack (scan_layers on XLA against a
Python loop over the reference layers on CPU eager), then the per-layer stage
(:mod:`.stages.per_layer`: every layer on XLA, scanned and looped, on CPU eager and in fp64, and
the per-layer replays of the scan's program); the report leads with the layers.

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

import torch

from torch_xla_ext._compat import scan as _scan
from torch_xla_ext._compat.pytree import keystr, tree_flatten_with_path
from torch_xla_ext.parity import api, frontends, pipeline, wording
from torch_xla_ext.parity.casts import torch_dtype
from torch_xla_ext.parity.errors import ParityError, ParityTypeError
from torch_xla_ext.parity.record import ScanRecord
from torch_xla_ext.parity.report import UNEXPLAINED, LayerParity, ParityReport, Verdict
from torch_xla_ext.parity.stages import explanation, per_layer
from torch_xla_ext.parity.stages.per_layer import apply_layer, float_leaves

__all__ = ["scan_layers", "scan_patched_linear_example"]


def _stack_modules():
    class ScannedStack(torch.nn.Module):
        """The stack under test: torch_xla's scan_layers on XLA, a plain loop elsewhere."""

        def __init__(self, layers: Sequence[Any]):
            super().__init__()
            self.layers = torch.nn.ModuleList(layers)

        def forward(self, x: Any) -> Any:
            if float_leaves(x)[0].device.type == "xla":
                return _scan.scan_layers(list(self.layers), x)
            for layer in self.layers:
                x = apply_layer(layer, x)
            return x

    class LoopStack(ScannedStack):
        def forward(self, x: Any) -> Any:
            for layer in self.layers:
                x = apply_layer(layer, x)
            return x

    return ScannedStack, LoopStack


def scan_layers(
    layers: Sequence[Any],
    x: Any,
    *,
    dtype: Any = None,
    rtol: float | None = None,
    atol: float | None = None,
    reference_layers: Sequence[Any] | None = None,
    seed: int = 0,
    rules: str = "auto",
    frontend: str = "torch_xla",
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
    first layer failing the comparator, whatever the cause. ``frontend``: only "torch_xla" has a
    scan of layers to check; "torchax" raises ParityError saying what to run instead (an unknown
    one, UnknownFrontendError).

    Example:
        >>> import torch
        >>> layers = [torch.nn.Linear(16, 16) for _ in range(4)]
        >>> r = scan_layers(layers, torch.randn(2, 16), dtype="fp32")
        >>> r.first_divergent_layer is None
        True
    """
    if not frontends.of(frontend).scans:
        raise ParityError(f"frontend: scan_layers checks torch_xla's scan_layers, which {frontend} does not have; "
                          f"check the stack with verify(torch.nn.Sequential(*layers), (x,), frontend={frontend!r}, "
                          f"localize=True) for each layer's own error")
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
    if not float_leaves(x):
        raise ParityTypeError(f"x: expected a tensor or a pytree (tuple, list, dict) of tensors with at least one "
                              f"floating-point tensor, got {type(x).__name__}")
    ScannedStack, LoopStack = _stack_modules()
    r = api.request(ScannedStack(layers), (x,), dtype=dtype, rtol=rtol, atol=atol, reference=LoopStack(ref_layers),
                    seed=seed, rules=rules, frontend=frontend)
    stages = api.verify_stages(r) + [per_layer.stage(layers, ref_layers, x)]
    return _report(pipeline.run(r, stages, record=ScanRecord(r)))


def _report(record: ScanRecord) -> ParityReport:
    """verify's report of the stack, with the layers: the verdict fails when a layer diverges, and
    the explanation leads with the layers."""
    report = explanation.unfinished(record)
    if record.per_layer is None:
        return explanation.finished(report)
    layers = record.per_layer.layers
    first = next((l.index for l in layers if l.diverges), None)
    first_mismatched = next((l.index for l in layers if not l.xla_vs_cpu.passed), None)
    verdict = Verdict.FAIL if (report.verdict == Verdict.FAIL or first is not None) else Verdict.PASS
    final = wording.explain(report, subject="the stack's final output")
    head = _layers_head(verdict, layers, first, first_mismatched, report.verdict, record.per_layer.replays)
    return explanation.finished(dataclasses.replace(
        report, verdict=verdict, explanation=head + " " + final, layers=layers,
        first_divergent_layer=first, first_mismatched_layer=first_mismatched))


def _layers_head(verdict: Verdict, layers: Sequence[LayerParity], first: int | None, first_mismatched: int | None,
                 final_verdict: Verdict, replay_status: str) -> str:
    n = len(layers)
    agree = all(l.scan_vs_loop.passed for l in layers)
    bit = all(l.scan_vs_loop.ulp_histogram.get("0", 0) == l.scan_vs_loop.total for l in layers)
    loop = ("scan_layers and the Python loop on XLA agree bit for bit in every layer" if bit else
            "scan_layers and the Python loop on XLA agree within tolerances in every layer" if agree else
            "scan_layers and the Python loop on XLA disagree")
    replay = "" if replay_status in ("ok", None) else f" (the per-layer replays were unavailable: {replay_status})"
    if first is not None:
        l = layers[first]
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
    causes = sorted({l.cause for l in layers if not l.xla_vs_cpu.passed})
    return (f"PASS: per layer, {loop}; {sum(not l.xla_vs_cpu.passed for l in layers)} of {n} layers mismatch CPU "
            f"eager (from layer {first_mismatched}), all explained by {' and '.join(causes)}, so no layer diverges "
            f"beyond rounding.")


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
