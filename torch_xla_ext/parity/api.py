"""verify and assert_parity: one function against its reference, every output explained."""

from __future__ import annotations

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
from torch_xla_ext.parity.report import OutputParity, ParityReport, Verdict
from torch_xla_ext.parity.stablehlo import Program

__all__ = ["assert_parity", "golden_errors", "output_parity", "verify"]


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


def _compile_replays(proto: bytes) -> tuple[Program, Replay, Replay, dict[str, float]]:
    """(program, rounded replay, exact replay, seconds) of an HloModuleProto; ReplayError when
    either cannot be built."""
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    program = Program.from_hlo_proto(proto)
    seconds["program"] = time.perf_counter() - t0
    # Two compiles; XLA releases the GIL while compiling, so they overlap on two cores.
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(Replay, program, rounded=r) for r in (True, False)]
        rounded_replay, exact_replay = (f.result() for f in futures)
    seconds["compile rounded replay"] = rounded_replay.seconds["compile"]
    seconds["compile exact replay"] = exact_replay.seconds["compile"]
    return program, rounded_replay, exact_replay, seconds


class _EarlyCompile:
    """The replays compiled in a thread from the moment the XLA run's program exists, while
    torch_xla compiles and executes it (both release the GIL): at real sizes the rounded replay's
    compile costs about what torch_xla's own does, and would otherwise come after it."""

    def __init__(self):
        self._pool = ThreadPoolExecutor(1)
        self._future = None

    def start(self, proto: bytes) -> None:
        self._future = self._pool.submit(_compile_replays, proto)

    def take(self) -> tuple[Program, Replay, Replay, dict[str, float]] | None:
        """The compiled replays (the caller then owns them, so they can be freed), or None when
        nothing was started."""
        future, self._future = self._future, None
        return future.result() if future is not None else None

    def close(self) -> None:
        self._future = None
        self._pool.shutdown(wait=True)


def _replays(run: runners.XlaRun, n_outputs: int, shapes: Sequence[tuple[int, ...]], keep_args: bool = True,
             early: _EarlyCompile | None = None):
    """(program, rounded outputs, exact outputs, status, seconds) of the XLA run's program.
    Without ``keep_args``, the run's graph arguments are released during the exact replay (its
    f64 copies of them replace them): at real sizes these are the weights. ``early``: the
    replays' compile, already started."""
    seconds: dict[str, float] = {}
    if run.proto is None:
        return None, None, None, f"unavailable: {run.hlo_error}", seconds
    try:
        compiled = early.take() if early is not None else None
        program, rounded_replay, exact_replay, compile_seconds = compiled or _compile_replays(run.proto)
        del compiled
        seconds.update(compile_seconds)
        rounded = rounded_replay(run.graph_args)
        seconds["run rounded replay"] = rounded_replay.seconds["run"]
        del rounded_replay  # its executable keeps its temporaries (the weights in f32) until freed
        runners.release_freed_memory()
        exact = exact_replay(run.graph_args, consume=not keep_args)
        seconds["run exact replay"] = exact_replay.seconds["run"]
        del exact_replay
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
    early = _EarlyCompile()

    try:
        with runners.user_rng_preserved():
            cpu, seconds["cpu"] = runners.run_cpu(ref, inputs, kwargs, tdtype, seed)
            runners.release_freed_memory()  # each run's model copy, before the next one
            cpu2, _ = runners.run_cpu(ref, inputs, kwargs, tdtype, seed, stage="second CPU eager")
            runners.release_freed_memory()
            # The golden starts from the inputs both sides received (rounded to dtype), so its
            # error measures each side's arithmetic, not the shared input quantisation.
            golden, seconds["golden"] = runners.run_cpu(ref, inputs, kwargs, torch.float64, seed, via=tdtype,
                                                        stage="fp64 golden")
            runners.release_freed_memory()
            xla = runners.run_xla(fn, inputs, kwargs, tdtype, seed, emulate or explorer_dir is not None,
                                  on_program=early.start if emulate else None)
            runners.release_freed_memory()
            seconds["xla"] = xla.seconds
    except runners.UserFailure as f:
        early.close()
        text = f"{type(f.error).__name__}: {f.error}"
        explanation = (f"EXCEPTION: the {f.stage} run raised {text.splitlines()[0]}; nothing was compared. Fix the "
                       f"exception (report.exception has it) and rerun.")
        return ParityReport(Verdict.EXCEPTION, explanation, dtype_name, rtol, atol, exception=text, stage=f.stage,
                            seconds={"total": time.perf_counter() - t_start})
    paths = [p for p, _ in xla.outputs]
    if paths != [p for p, _ in cpu]:
        early.close()
        raise ParityError(f"fn and the reference return different floating-point outputs: {paths} vs "
                          f"{[p for p, _ in cpu]}")
    shapes = [(path or "<root>", list(a.shape), list(b.shape)) for (path, a), (_, b) in zip(xla.outputs, cpu)
              if tuple(a.shape) != tuple(b.shape)]
    if shapes:  # nothing to replay
        early.close()
    if shapes and reference is not None:
        path, on_xla, on_cpu = shapes[0]
        raise ParityError(f"output {path}: fn returns shape {on_xla} on XLA, the reference {on_cpu} on the CPU")
    if shapes:  # the same function: XLA computed something else, no tolerance can say otherwise
        listed = "; ".join(f"output {p}: XLA {x}, CPU eager {c}" for p, x, c in shapes)
        explanation = (f"FAIL: a real difference: XLA returns outputs of other shapes than CPU eager ({listed}), so "
                       f"torch_xla lowers an op of the program to something else (torch_xla 2.9 lowers sum, mean, "
                       f"amax, amin, var and std over dim=[] as no reduction at all, where PyTorch reduces every "
                       f"dimension). Nothing else was compared.")
        return ParityReport(Verdict.FAIL, explanation, dtype_name, rtol, atol, stage="XLA",
                            seconds={**seconds, "total": time.perf_counter() - t_start})

    for (path, a), (_, b) in zip(cpu, cpu2):
        r = numerics.compare(a, b, rtol=0.0, atol=0.0, equal_nan=True)
        if not r.passed:
            early.close()
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
            xla, len(xla.outputs), [tuple(t.shape) for _, t in xla.outputs], keep_args=explorer_dir is not None,
            early=early)
        seconds.update(replay_seconds)
        seconds["replays"] = time.perf_counter() - t0
    else:
        status = "unavailable: emulate=False"
    early.close()
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
        _explorer.write_model_explorer(program, xla.graph_args, explorer_dir, xla.module_paths)
        seconds["model explorer"] = time.perf_counter() - t0
    seconds["total"] = time.perf_counter() - t_start
    return dataclasses.replace(report, seconds=seconds)


def assert_parity(fn: Any, inputs: Any = (), kwargs: dict | None = None, **options: Any) -> ParityReport:
    """:func:`verify` for pytest: raises AssertionError carrying the report unless it passes.

    Example:
        >>> assert_parity(torch.nn.Linear(4, 4), (torch.randn(2, 4),), dtype="fp32")  # doctest: +SKIP
    """
    report = verify(fn, inputs, kwargs, **options)
    if not report.passed:
        raise AssertionError(str(report))
    return report


