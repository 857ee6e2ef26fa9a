"""verify, scan_layers and assert_parity: the public entry points of parity."""

from __future__ import annotations

import copy
import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

import numpy as np

from torch_xla_ext import numerics
from torch_xla_ext.parity import explain as _explain
from torch_xla_ext.parity import runners
from torch_xla_ext.parity.errors import ParityError, ParityTypeError, ReplayError
from torch_xla_ext.parity.replays import Replay
from torch_xla_ext.parity.report import (
    REAL_DIFFERENCE,
    REASSOCIATION,
    ROUNDING_PLACEMENT,
    UNEXPLAINED,
    LayerParity,
    OutputParity,
    ParityReport,
    Verdict,
)
from torch_xla_ext.parity.stablehlo import Program

__all__ = ["assert_parity", "scan_layers", "scan_patched_linear_example", "verify"]


def _check_inputs(inputs: Any, kwargs: Any) -> tuple[tuple, dict]:
    import torch

    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    if isinstance(inputs, list):
        inputs = tuple(inputs)
    if not isinstance(inputs, tuple):
        raise ParityTypeError(f"inputs: expected a tuple of positional inputs (or one tensor), got "
                              f"{type(inputs).__name__}")
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise ParityTypeError(f"kwargs: expected a dict of keyword inputs with str keys, got {type(kwargs).__name__}")
    return inputs, dict(kwargs)


def _tolerances(rtol: Any, atol: Any) -> dict[str, float]:
    if (rtol is None) != (atol is None):
        raise ParityError("rtol and atol go together: pass both or neither")
    if rtol is None:
        return {}
    for name, v in (("rtol", rtol), ("atol", atol)):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
            raise ParityError(f"{name}: expected a non-negative number, got {v!r}")
    return {"rtol": float(rtol), "atol": float(atol)}


def golden_errors(y: Any, golden: Any) -> tuple[float, float]:
    """Greatest and mean |y - golden|, in float64 (NaN where either is NaN)."""
    import torch

    y = torch.from_numpy(np.array(y, dtype=np.float64)) if isinstance(y, np.ndarray) else y.double()
    if y.numel() == 0:
        return 0.0, 0.0
    e = (y.reshape(golden.shape) - golden.double()).abs()
    return float(e.max()), float(e.mean())


def _closer(xla: tuple[float, float], cpu: tuple[float, float]) -> str:
    if xla == cpu:
        return "tie"
    return "xla" if xla < cpu else "cpu"  # greatest error first, mean breaks ties


def output_parity(path: str, x: Any, c: Any, g: Any, tol: dict, rounded: Any = None, exact: Any = None) -> OutputParity:
    """Compares one output: XLA ``x`` vs CPU eager ``c`` (tolerances), both vs the fp64 golden
    ``g``, and, when given, XLA vs the rounded replay (exactly) and the exact replay vs ``g``."""
    cmp = numerics.compare(x, c, equal_nan=True, check_dtype=False, **tol)
    xe, ce = golden_errors(x, g), golden_errors(c, g)
    gd = g.double()
    scale = float(gd.abs().max()) if gd.numel() else 0.0
    magnitude = float(gd[cmp.max_ulp_index].abs()) if cmp.max_ulp_index is not None else 0.0
    significant = None
    if scale > 0:
        mask = (gd.abs() >= _explain.SIGNIFICANT_FRACTION * scale)
        if bool(mask.any()) and not bool(mask.all()):
            significant = numerics.compare(x[mask], c[mask], equal_nan=True, check_dtype=False, **tol)
    emu = emu_err = unr = unr_err = same = None
    if rounded is not None:
        rounded = np.asarray(rounded).reshape(tuple(x.shape))
        exact = np.asarray(exact, dtype=np.float64).reshape(tuple(x.shape))
        emu = numerics.compare(x, rounded.astype(np.float64), rtol=0.0, atol=0.0, equal_nan=True, check_dtype=False)
        emu_err = golden_errors(rounded, g)[0]
        unr = numerics.compare(exact, gd.numpy(), equal_nan=True, check_dtype=False)
        unr_err = golden_errors(exact, g)[0]
        same = _explain.same_math(unr, unr_err, xe[0], ce[0])
    return OutputParity(
        path, cmp, xe[0], ce[0], xe[1], ce[1], _closer(xe, ce), scale,
        (cmp.max_abs_diff / scale) if scale > 0 else 0.0, magnitude, significant, emu, emu_err, unr, unr_err, same)


def _with_causes(outputs: Sequence[OutputParity], narrow: bool) -> list[OutputParity]:
    return [dataclasses.replace(o, cause=_explain.output_cause(o, narrow)) for o in outputs]


def _replays(run: runners.XlaRun, n_outputs: int, shapes: Sequence[tuple[int, ...]]):
    """(program, rounded outputs, exact outputs, status, seconds) of the XLA run's program."""
    seconds: dict[str, float] = {}
    if run.proto is None:
        return None, None, None, f"unavailable: {run.hlo_error}", seconds
    try:
        t0 = time.perf_counter()
        program = Program.from_hlo_proto(run.proto)
        seconds["program"] = time.perf_counter() - t0
        # Two compiles; XLA releases the GIL while compiling, so they overlap on two cores.
        with ThreadPoolExecutor(2) as pool:
            futures = [pool.submit(Replay, program, rounded=r) for r in (True, False)]
            rounded_replay, exact_replay = (f.result() for f in futures)
        seconds["compile rounded replay"] = rounded_replay.seconds["compile"]
        seconds["compile exact replay"] = exact_replay.seconds["compile"]
        rounded = rounded_replay(run.graph_args)
        exact = exact_replay(run.graph_args)
    except ReplayError as e:
        return None, None, None, f"unavailable: {e}", seconds
    if len(rounded) != n_outputs:
        return program, None, None, (f"unavailable: the program has {len(rounded)} results, fn returned "
                                     f"{n_outputs} floating-point outputs"), seconds
    for k, (r, s) in enumerate(zip(rounded, shapes)):
        if int(np.prod(r.shape)) != int(np.prod(s)):
            return program, None, None, f"unavailable: the program's result {k} is {list(r.shape)}, fn's output is {list(s)}", seconds
    return program, rounded, exact, "ok", seconds


def verify(
    fn: Any,
    inputs: Any = (),
    kwargs: dict | None = None,
    *,
    dtype: Any = None,
    rtol: float | None = None,
    atol: float | None = None,
    reference: Any = None,
    seed: int = 0,
    emulate: bool = True,
    localize: bool = False,
    explorer_dir: str | None = None,
) -> ParityReport:
    """Runs ``fn(*inputs, **kwargs)`` on XLA and its reference on CPU eager (twice) and in fp64,
    compares every floating-point output (any pytree: HF ModelOutputs, dicts, dataclasses,
    caches; named by pytree path) and says which cause explains each difference.

    ``fn`` and ``reference`` (default: ``fn``) are callables or ``nn.Module``s; a module is
    copied and moved to each device (and cast to ``dtype``, "bf16"/"fp32"/... or a torch.dtype;
    None keeps the inputs' dtypes; integer inputs such as token ids are never cast). The RNG is
    reset to ``seed`` before every run. XLA vs CPU uses ``torch_xla_ext.numerics.compare`` with
    ``rtol``/``atol`` (default torch.testing's for the dtype). With ``emulate``, the XLA run's own
    program is replayed twice by XLA on the CPU: with XLA:CPU's roundings and exactly in fp64
    (:mod:`torch_xla_ext.parity.replays`). With ``localize``, every submodule's own error is
    separated from what it inherited (:func:`localize`). With ``explorer_dir``, the program and
    its per-op error go there for Model Explorer (:func:`write_model_explorer`).

    Bad arguments raise :class:`ParityError`; the verdict is EXCEPTION only when ``fn`` or the
    reference raises on a backend.

    Example:
        >>> r = verify(torch.nn.Linear(4, 4), (torch.randn(2, 4),), dtype="fp32")  # doctest: +SKIP
        >>> r.verdict  # doctest: +SKIP
        <Verdict.PASS: 'PASS'>
    """
    import torch

    t_start = time.perf_counter()
    if not callable(fn):
        raise ParityTypeError(f"fn: expected a callable or an nn.Module, got {type(fn).__name__}")
    if reference is not None and not callable(reference):
        raise ParityTypeError(f"reference: expected a callable or an nn.Module, got {type(reference).__name__}")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ParityTypeError(f"seed: expected an int, got {type(seed).__name__}")
    if explorer_dir is not None and not isinstance(explorer_dir, str):
        raise ParityTypeError(f"explorer_dir: expected a directory path (str), got {type(explorer_dir).__name__}")
    inputs, kwargs = _check_inputs(inputs, kwargs)
    tol = _tolerances(rtol, atol)
    tdtype = runners.torch_dtype(dtype)
    ref = fn if reference is None else reference
    dtype_name = str(tdtype).removeprefix("torch.") if tdtype is not None else "input dtypes"
    seconds: dict[str, float] = {}

    try:
        with runners.user_rng_preserved():
            cpu, seconds["cpu"] = runners.run_cpu(ref, inputs, kwargs, tdtype, seed)
            cpu2, _ = runners.run_cpu(ref, inputs, kwargs, tdtype, seed, stage="second CPU eager")
            # The golden starts from the inputs both sides received (rounded to dtype), so its
            # error measures each side's arithmetic, not the shared input quantisation.
            golden, seconds["golden"] = runners.run_cpu(ref, inputs, kwargs, torch.float64, seed, via=tdtype,
                                                        stage="fp64 golden")
            xla = runners.run_xla(fn, inputs, kwargs, tdtype, seed, emulate or explorer_dir is not None)
            seconds["xla"] = xla.seconds
    except runners.UserFailure as f:
        text = f"{type(f.error).__name__}: {f.error}"
        explanation = (f"EXCEPTION: the {f.stage} run raised {text.splitlines()[0]}; nothing was compared. Fix the "
                       f"exception (report.exception has it) and rerun.")
        return ParityReport(Verdict.EXCEPTION, explanation, dtype_name, rtol, atol, exception=text, stage=f.stage,
                            seconds={"total": time.perf_counter() - t_start})
    paths = [p for p, _ in xla.outputs]
    if paths != [p for p, _ in cpu]:
        raise ParityError(f"fn and the reference return different floating-point outputs: {paths} vs "
                          f"{[p for p, _ in cpu]}")
    for (path, a), (_, b) in zip(xla.outputs, cpu):
        if tuple(a.shape) != tuple(b.shape):
            raise ParityError(f"output {path or '<root>'}: fn returns shape {list(a.shape)} on XLA, the reference "
                              f"{list(b.shape)} on the CPU")

    for (path, a), (_, b) in zip(cpu, cpu2):
        r = numerics.compare(a, b, rtol=0.0, atol=0.0, equal_nan=True)
        if not r.passed:
            explanation = (
                f"NONDETERMINISTIC_REFERENCE: two CPU eager runs of the reference, with the RNG reset to seed {seed} "
                f"before each, differ on {r.mismatched}/{r.total} elements of output {path or '<root>'} (greatest "
                f"difference {r.max_abs_diff:.3g}), so a CPU comparison cannot tell an XLA bug from reference noise. "
                f"Make the reference deterministic (seed every generator it uses, no state that changes between "
                f"calls, torch.use_deterministic_algorithms(True)) and rerun.")
            return ParityReport(Verdict.NONDETERMINISTIC_REFERENCE, explanation, dtype_name, rtol, atol,
                                nondeterminism=(path, r), stage="CPU eager",
                                seconds={**seconds, "total": time.perf_counter() - t_start})

    program = rounded = exact = None
    if emulate:
        t0 = time.perf_counter()
        program, rounded, exact, status, replay_seconds = _replays(
            xla, len(xla.outputs), [tuple(t.shape) for _, t in xla.outputs])
        seconds.update(replay_seconds)
        seconds["replays"] = time.perf_counter() - t0
    else:
        status = "unavailable: emulate=False"
    outputs = [
        output_parity(path, x, c, g, tol, rounded[i] if rounded is not None else None,
                      exact[i] if exact is not None else None)
        for i, ((path, x), (_, c), (_, g)) in enumerate(zip(xla.outputs, cpu, golden))
    ]
    points = program.rounding_points if program is not None else ()
    outputs = _with_causes(outputs, narrow=bool(points))
    hlo_math = "unavailable"
    if status == "ok":
        status = "matches" if all(o.emulated.mismatched == 0 for o in outputs) else "differs"
        hlo_math = "same" if all(o.same_math for o in outputs) else "differs"
    verdict = Verdict.PASS if all(o.xla_vs_cpu.passed for o in outputs) else Verdict.FAIL
    explanation = _explain.explain(verdict, outputs, status, points, dtype_name)
    report = ParityReport(verdict, explanation, dtype_name, rtol, atol, outputs=tuple(outputs), emulation=status,
                          hlo_math=hlo_math, rounding_points=tuple(points), seconds=seconds,
                          hlo_text=program.text if program is not None else None)
    if localize:
        from torch_xla_ext.parity import localization as _localize

        t0 = time.perf_counter()
        report = _localize.attach(report, fn, ref, inputs, kwargs, tdtype, seed)
        seconds.update(report.seconds)
        seconds["localize"] = time.perf_counter() - t0
    if explorer_dir is not None:
        from torch_xla_ext.parity import explorer as _explorer

        if program is None and xla.proto is not None and not emulate:
            program = Program.from_hlo_proto(xla.proto)
        if program is None:
            raise ReplayError(f"explorer_dir: no program to write ({status.removeprefix('unavailable: ')})")
        t0 = time.perf_counter()
        _explorer.write_model_explorer(program, xla.graph_args, explorer_dir)
        seconds["model explorer"] = time.perf_counter() - t0
    seconds["total"] = time.perf_counter() - t_start
    return dataclasses.replace(report, seconds=seconds)


# ---------------------------------------------------------------------------------------------
# Layer stacks run with torch_xla's scan_layers
# ---------------------------------------------------------------------------------------------


def _stack_modules():
    import torch

    class ScannedStack(torch.nn.Module):
        """The stack under test: torch_xla's scan_layers on XLA, a plain loop elsewhere."""

        def __init__(self, layers: Sequence[Any]):
            super().__init__()
            self.layers = torch.nn.ModuleList(layers)

        def forward(self, x: Any) -> Any:
            if x.device.type == "xla":
                from torch_xla_ext._compat import scan as _scan

                return _scan.scan_layers(list(self.layers), x)
            for layer in self.layers:
                x = layer(x)
            return x

    class LoopStack(ScannedStack):
        def forward(self, x: Any) -> Any:
            for layer in self.layers:
                x = layer(x)
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
        >>> layers = [torch.nn.Linear(16, 16) for _ in range(4)]
        >>> r = scan_layers(layers, torch.randn(2, 16), dtype="fp32")  # doctest: +SKIP
        >>> r.first_divergent_layer is None  # doctest: +SKIP
        True
    """
    import torch

    layers = list(layers) if isinstance(layers, (list, tuple, torch.nn.ModuleList, torch.nn.Sequential)) else None
    if not layers or not all(isinstance(l, torch.nn.Module) for l in layers):
        raise ParityError("layers: expected a non-empty sequence of nn.Module")
    ref_layers = layers if reference_layers is None else list(reference_layers)
    if len(ref_layers) != len(layers):
        raise ParityError(f"reference_layers: has {len(ref_layers)} layers, layers has {len(layers)}")
    if not isinstance(x, torch.Tensor):
        raise ParityTypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
    ScannedStack, LoopStack = _stack_modules()
    report = verify(ScannedStack(layers), (x,), dtype=dtype, rtol=rtol, atol=atol, reference=LoopStack(ref_layers),
                    seed=seed)
    if report.verdict in (Verdict.EXCEPTION, Verdict.NONDETERMINISTIC_REFERENCE):
        return report
    tdtype = runners.torch_dtype(dtype)
    tol = _tolerances(rtol, atol)
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
    program, rounded, exact, status, _ = _replays(run, 1, [(len(layers),) + tuple(scanned[0].shape)])
    narrow = bool(program.rounding_points) if program is not None else False
    per_layer = []
    for k, (s, l, c, g) in enumerate(zip(scanned, looped, cpu, golden)):
        xla_err, cpu_err = golden_errors(s, g)[0], golden_errors(c, g)[0]
        r_k = e_k = None
        if rounded is not None:
            r_k = np.asarray(rounded[0]).reshape((len(layers),) + tuple(s.shape))[k]
            e_k = np.asarray(exact[0], dtype=np.float64).reshape((len(layers),) + tuple(s.shape))[k]
        cmp = numerics.compare(s, c, equal_nan=True, check_dtype=False, **tol)
        cause = None if cmp.ulp_histogram.get("0", 0) == cmp.total else _layer_cause(
            s, r_k, e_k, g, xla_err, cpu_err, narrow)
        per_layer.append(LayerParity(k, numerics.compare(s, l, equal_nan=True, check_dtype=False, **tol), cmp,
                                     xla_err, cpu_err, cause))
    first = next((l.index for l in per_layer if l.diverges), None)
    first_mismatched = next((l.index for l in per_layer if not l.xla_vs_cpu.passed), None)
    verdict = Verdict.FAIL if (report.verdict == Verdict.FAIL or first is not None) else Verdict.PASS
    final = _explain.explain(report.verdict, report.outputs, report.emulation, report.rounding_points,
                             report.dtype, subject="the stack's final output")
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

    from torch_xla_ext._compat import hlo as _hlo
    from torch_xla_ext._compat import scan as _scan

    device = torch_xla.device()
    torch.manual_seed(seed)
    xla_layers = [runners.prepare(l, device, dtype) for l in layers]
    h = runners.move(x, device, dtype)
    t0 = time.perf_counter()
    with torch.no_grad():
        try:
            _final, ys = _scan.scan_layers_with_intermediates(xla_layers, h)
        except Exception as e:  # the user's layers failed under scan
            raise runners.UserFailure("XLA scan", e) from e
        proto = args = err = None
        try:  # the scan's program with every layer's output, for the per-layer replays
            proto = _hlo.lowered_hlo_proto([ys])
            args = [runners.to_numpy(t.cpu()) for t in _hlo.graph_inputs([ys])]
        except (RuntimeError, ValueError) as e:
            err = f"torch_xla could not give the HLO of the scan: {type(e).__name__}: {e}"
        looped = []
        for layer in xla_layers:
            h = runners.call("XLA loop", layer, (h,), {})
            looped.append(h)
    torch_xla.sync()
    ys = ys.cpu()
    run = runners.XlaRun([("", ys)], proto, args, err, time.perf_counter() - t0)
    return [ys[k] for k in range(len(layers))], [t.cpu() for t in looped], run


def _cpu_layer_outputs(layers: Sequence[Any], x: Any, dtype: Any, seed: int, via: Any = None) -> list[Any]:
    import torch

    torch.manual_seed(seed)
    h = runners.move(runners.move(x, "cpu", via), "cpu", dtype)
    out = []
    with torch.no_grad():
        for layer in layers:
            if via is not None:
                layer = runners.prepare(layer, "cpu", via)
            h = runners.call("CPU eager", runners.prepare(layer, "cpu", dtype), (h,), {})
            out.append(h.clone())
    return out


def assert_parity(fn: Any, inputs: Any = (), kwargs: dict | None = None, **options: Any) -> ParityReport:
    """:func:`verify` for pytest: raises AssertionError carrying the report unless it passes.

    Example:
        >>> assert_parity(torch.nn.Linear(4, 4), (torch.randn(2, 4),), dtype="fp32")  # doctest: +SKIP
    """
    report = verify(fn, inputs, kwargs, **options)
    if not report.passed:
        raise AssertionError(str(report))
    return report


def scan_patched_linear_example(dtype: Any = "bf16", *, seed: int = 42, patch: bool = True):
    """The pytorch/xla#8747 configuration: 4 x nn.Linear(128, 128) run with scan_layers on XLA
    after ``apply_xla_patch_to_nn_linear`` (einsum lowering), input (3, 4, 5, 128).

    Returns ``(layers, reference_layers, x)`` for :func:`scan_layers`: the patched layers under
    test and plain ``nn.Linear`` layers with the same weights for CPU eager, as the upstream test
    compares them. ``dtype`` is only checked here; pass it to scan_layers.

    Example:
        >>> layers, reference, x = scan_patched_linear_example()  # doctest: +SKIP
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
