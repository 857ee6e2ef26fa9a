"""verify and assert_parity: one function against its reference, every output explained."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from torch_xla_ext import _versions, numerics
from torch_xla_ext.parity import explain as _explain
from torch_xla_ext.parity import capturing, localization, runners
from torch_xla_ext.parity._checks import check_inputs, tolerances
from torch_xla_ext.parity._outputs import (EarlyCompile, exact_outputs, golden_errors, output_parity, replay_outputs,
                                           reproduces, with_causes)
from torch_xla_ext.parity.errors import ParityError, ParityTypeError, ReplayError
from torch_xla_ext.parity.report import ParityReport, Verdict
from torch_xla_ext.parity.stablehlo import Program

__all__ = ["assert_parity", "golden_errors", "localize", "output_parity", "verify"]


@runners.collector_skips_existing_objects()  # its collections scan what verify makes, not the process
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
        >>> import torch
        >>> r = verify(torch.nn.Linear(4, 4), (torch.randn(2, 4),), dtype="fp32")
        >>> r.verdict
        <Verdict.PASS: 'PASS'>
    """
    _versions.require("parity.xla")  # before anything here imports torch_xla or JAX
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
    inputs, kwargs = check_inputs(inputs, kwargs)
    tol = tolerances(rtol, atol)
    tdtype = runners.torch_dtype(dtype)
    ref = fn if reference is None else reference
    dtype_name = str(tdtype).removeprefix("torch.") if tdtype is not None else "input dtypes"
    if localize and not (isinstance(fn, torch.nn.Module) and isinstance(ref, torch.nn.Module)):
        raise ParityTypeError("localize: per-module localisation needs fn (and the reference) to be nn.Modules")
    seconds: dict[str, float] = {}
    early = EarlyCompile(unrounded="auto")
    # With localize, the XLA run is also the localisation's capture (capturing.Recorder): every
    # module call's tensors are traced with it. With emulate, the rounded replay computes them
    # (it reproduces the run; as outputs of torch_xla's program they made its compile about 1.5x
    # longer); without, the run's one execution does.
    recorder = capturing.Recorder() if localize else None
    # Without localize, the values between the model's repeated blocks alone: the rounded
    # replay's program is cut there either way, so a transformer's blocks compile once.
    replayed = (recorder or capturing.BlockValues()) if emulate else None

    def plain_golden() -> tuple[list, float]:
        # The golden starts from the inputs both sides received (rounded to dtype), so its
        # error measures each side's arithmetic, not the shared input quantisation.
        return runners.run_cpu(ref, inputs, kwargs, torch.float64, seed, via=tdtype, stage="fp64 golden")

    try:
        with runners.user_rng_preserved():
            # Each CPU run's model copy is freed by reference counting when the run returns (no
            # cycle holds it: a collection there found nothing), so a trim returns its pages.
            # With localize, CPU eager's own module calls are kept: where XLA gave a module what
            # CPU eager gave it, they are its CPU shadow (localization.module_pass).
            eager = capturing.Recorder() if localize else None
            cpu, seconds["cpu"] = runners.run_cpu(ref, inputs, kwargs, tdtype, seed, run=eager or runners.call)
            runners.release_freed_memory(collect=False)
            cpu2, _ = runners.run_cpu(ref, inputs, kwargs, tdtype, seed, stage="second CPU eager")
            runners.release_freed_memory(collect=False)
            # With localize, the localisation's golden run (after the XLA run) is the golden.
            golden = None
            if not localize:
                golden, seconds["golden"] = plain_golden()
                runners.release_freed_memory(collect=False)
            xla = runners.run_xla(fn, inputs, kwargs, tdtype, seed, emulate or explorer_dir is not None,
                                  on_program=(lambda proto, capture_proto: early.start(
                                      proto, capture_proto, replayed.cuts)) if emulate else None,
                                  run=recorder or replayed or runners.call,
                                  replayed=replayed)
            runners.release_freed_memory()
            seconds["xla"] = xla.seconds
    except runners.UserFailure as f:
        early.close()
        return _exception_report(f, dtype_name, rtol, atol, t_start)
    cap = recorder.capture(xla.outputs, tdtype) if recorder is not None and not emulate else None
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

    del cpu2
    program = rounded = exact = None
    precision = "f64"
    if emulate:
        t0 = time.perf_counter()
        program, rounded, exact, status, replay_seconds, precision, captured = replay_outputs(
            xla, len(xla.outputs), [tuple(t.shape) for _, t in xla.outputs], keep_args=explorer_dir is not None,
            early=early, unrounded="auto")
        seconds.update(replay_seconds)
        seconds["replays"] = time.perf_counter() - t0
        if recorder is not None:
            # The rounded replay's module tensors are the run's own where it reproduces the run's
            # outputs bit for bit; otherwise (another device, a rounding it does not model) a
            # second XLA run computes them.
            cap = recorder.replayed(captured if reproduces(xla.outputs, rounded) else None, xla.outputs, tdtype)
            del captured
            if cap is None:
                t0 = time.perf_counter()
                try:
                    cap = capturing.capture(fn, inputs, kwargs, dtype=tdtype, seed=seed)
                except runners.UserFailure as f:
                    return _exception_report(f, dtype_name, rtol, atol, t_start)
                seconds["XLA capture"] = time.perf_counter() - t0
                cap.info["source"] = "a second XLA run (the rounded replay does not reproduce the run)"
            else:
                cap.info["source"] = "the rounded replay (it reproduces the run's outputs bit for bit)"
    else:
        status = "unavailable: emulate=False"
    early.close()

    found = None
    if localize:
        runners.release_freed_memory()  # what the replays freed, before the golden's model comes
        try:
            found = localization.module_pass(cap, ref, inputs, kwargs, seed, consume=True, eager=eager.calls)
            golden = found.golden
            seconds["compare modules"] = found.seconds
        except runners.UserFailure as f:
            if f.stage == "fp64 golden":
                return _exception_report(f, dtype_name, rtol, atol, t_start)
            with runners.user_rng_preserved():  # a shadow failed: the golden alone, no localisation
                golden, seconds["golden"] = plain_golden()
            localize_failure = f" The per-module localisation failed ({f}); no localisation."
        del cap, eager

    def compared(exact: list | None) -> list:
        return [output_parity(path, x, c, g, tol, rounded[i] if rounded is not None else None,
                              exact[i] if exact is not None else None)
                for i, ((path, x), (_, c), (_, g)) in enumerate(zip(xla.outputs, cpu, golden))]

    outputs = compared(exact)
    if precision == "f32" and any(o.same_math is False for o in outputs):
        # The unrounded f32 replay leaves the golden: only the exact f64 one may call that a
        # difference in the program's math.
        t0 = time.perf_counter()
        exact, f64_status, f64_seconds = exact_outputs(program, xla, keep_args=explorer_dir is not None)
        seconds.update(f64_seconds)
        seconds["replays"] += time.perf_counter() - t0
        if exact is not None:
            precision = "f64"
            outputs = compared(exact)
        else:
            status = f64_status
            rounded = None
            outputs = compared(None)
    points = program.rounding_points if program is not None else ()
    outputs = with_causes(outputs, narrow=bool(points))
    hlo_math = "unavailable"
    if status == "ok":
        status = "matches" if all(o.emulated.mismatched == 0 for o in outputs) else "differs"
        hlo_math = "same" if all(o.same_math for o in outputs) else "differs"
    verdict = Verdict.PASS if all(o.xla_vs_cpu.passed for o in outputs) else Verdict.FAIL
    explanation = _explain.explain(verdict, outputs, status, points, dtype_name, unrounded=precision)
    report = ParityReport(verdict, explanation, dtype_name, rtol, atol, outputs=tuple(outputs), emulation=status,
                          hlo_math=hlo_math, rounding_points=tuple(points), seconds=seconds,
                          hlo_text=program.text if program is not None else None,
                          unrounded_replay=precision if status in ("matches", "differs") else None)
    if found is not None:
        report = localization.with_modules(report, found)
    elif localize:
        report = dataclasses.replace(report, explanation=report.explanation + localize_failure)
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


def _exception_report(f: runners.UserFailure, dtype_name: str, rtol: float | None, atol: float | None,
                      t_start: float) -> ParityReport:
    """The EXCEPTION verdict: the user's function (or reference) raised on a backend."""
    text = f"{type(f.error).__name__}: {f.error}"
    explanation = (f"EXCEPTION: the {f.stage} run raised {text.splitlines()[0]}; nothing was compared. Fix the "
                   f"exception (report.exception has it) and rerun.")
    return ParityReport(Verdict.EXCEPTION, explanation, dtype_name, rtol, atol, exception=text, stage=f.stage,
                        seconds={"total": time.perf_counter() - t_start})


def assert_parity(fn: Any, inputs: Any = (), kwargs: dict | None = None, **options: Any) -> ParityReport:
    """:func:`verify` for pytest: raises AssertionError carrying the report unless it passes.

    Example:
        >>> import torch
        >>> report = assert_parity(torch.nn.Linear(4, 4), (torch.randn(2, 4),), dtype="fp32")
    """
    report = verify(fn, inputs, kwargs, **options)
    if not report.passed:
        raise AssertionError(str(report))
    return report


def localize(fn: Any, inputs: Any = (), kwargs: dict | None = None, **options: Any) -> ParityReport:
    """:func:`~torch_xla_ext.parity.verify` with the per-module localisation (``localize=True``).

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16))
        >>> x = torch.randn(2, 16)
        >>> r = localize(model, (x,), dtype="bf16")
        >>> r.first_divergent_module is None
        True
    """
    if "localize" in options:
        raise ParityError("localize: takes verify's options except localize")
    return verify(fn, inputs, kwargs, localize=True, **options)
