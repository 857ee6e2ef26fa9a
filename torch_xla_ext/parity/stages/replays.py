"""Stage 4, the replays: the XLA run's own program (or a capture's) compiled by XLA through JAX's
CPU client and run twice, rounded (as the rules' device rounds: XLA:CPU's by default) and
without rounding (:mod:`..program.replay`).

Both compile in a thread from the moment the XLA run's program exists (:func:`start_early`),
while torch_xla compiles and executes it: at real sizes the rounded replay's compile costs about
what torch_xla's own does. Where the run's arguments are host arrays already (a JAX run's buffers)
and their widened copies fit in a quarter of the free memory, the unrounded replay also runs there,
beside the run, and the XLA run's stage ends when it has (not beside the CPU eager runs, whose
OpenMP threads would wait on XLA's at every op: ``Early.settle``). Where the run is its own rounded replay
(``ProgramRun.rounded_by_run``: torchax's compiled run of a float32 program on JAX's CPU under
XLA:CPU's rules), only the unrounded replay is compiled and the run's outputs are the rounded
replay's results. The rounded replay runs the program with the run's recorded module tensors as
extra results, cut at the blocks' boundaries so repeated blocks compile once
(:mod:`..program.segments`); where it reproduces the run within the bound evaluation order allows
(:func:`~torch_xla_ext.parity.causes.replay_bound`), its module tensors are the localisation's
capture (otherwise a second, hooked XLA run computes them: :data:`.capture.SECOND_RUN`). Under
another device's rules that change f32 matmuls, a third replay with XLA:CPU's own rules tells the device's matmul precision
from other causes.

An unrounded replay in f32 (a program that rounds to bf16/f16) that finds an output off the
golden is confirmed in f64 before anything is called a real difference (:data:`COMPARE`, after the
golden exists).

Example:
    >>> import ml_dtypes, numpy as np
    >>> text = '''func.func @main(%x: tensor<2xbf16>) -> tensor<2xbf16> {
    ...   %0 = stablehlo.multiply %x, %x : tensor<2xbf16>
    ...   return %0 : tensor<2xbf16>
    ... }'''
    >>> compiled = compile_replays(Program(text))
    >>> compiled.rounded([np.array([1.0078125, 3.0], ml_dtypes.bfloat16)])[0].tolist()
    [1.015625, 9.0]
"""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

import numpy as np

from torch_xla_ext import _device
from torch_xla_ext.errors import InternalError
from torch_xla_ext.parity import memory
from torch_xla_ext.parity.casts import to_numpy
from torch_xla_ext.parity.causes import output_parity, replay_figures
from torch_xla_ext.parity.errors import CaptureError, ReplayError
from torch_xla_ext.parity.pipeline import Stage
from torch_xla_ext.parity.program import host_dots
from torch_xla_ext.parity.program.replay import Replay, unrounded_precision
from torch_xla_ext.parity.program.rules import Rules, resolve
from torch_xla_ext.parity.program.stablehlo import Program
from torch_xla_ext.parity.record import Outputs, ProgramRun, Replayed, RunRecord, WideProgram

__all__ = ["COMPARE", "STAGE", "Compiled", "compare_outputs", "compile_replays", "replay_program", "reproduces",
           "start_early"]


@dataclasses.dataclass
class Compiled:
    """A program's replays, compiled: the rounded one (under the rules; None where the run is its
    own rounded replay, :attr:`ProgramRun.rounded_by_run`), the unrounded one, the rounded one
    under XLA:CPU's own rules when the rules changed a matmul (else None), and the seconds
    converting and compiling took. ``exact_results``: the unrounded replay's results when it ran
    early (:func:`start_early`)."""

    program: Program
    rounded: Replay | None
    exact: Replay
    xla_cpu: Replay | None
    seconds: dict[str, float]
    exact_results: list[np.ndarray] | None = None


def compile_replays(program: Program, unrounded: str = "auto", capture_program: Program | None = None,
                    cuts: Sequence[int] = (), rules: str | Rules = "xla-cpu", device: str | None = None, *,
                    rounded: bool = True) -> Compiled:
    """The replays of ``program``, compiled. ``unrounded``: the unrounded replay's float, "f64", "f32", or "auto"
    (:func:`~torch_xla_ext.parity.program.replay.unrounded_precision`). ``capture_program``: the
    program's outputs followed by the run's module tensors, which the rounded replay then runs
    instead, cut at the module tensors ``cuts`` (indices among them). ``rules`` (resolved against
    ``program`` and ``device``) apply to the rounded replay; when they change any f32 matmul, a
    rounded replay of ``program`` with XLA:CPU's rules comes too. Without ``rounded``, the
    unrounded replay alone (the run is its own rounded replay). ReplayError when a replay cannot
    be built."""
    seconds: dict[str, float] = {}
    precision = unrounded_precision(program) if unrounded == "auto" else unrounded
    rules = resolve(rules, program, device)
    offset = len(program.main.returned)  # the module tensors follow the outputs
    # Two compiles; XLA releases the GIL while compiling, so they overlap on two cores.
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(Replay, program, rounded=False, precision=precision)]
        if rounded:
            futures.append(pool.submit(Replay, capture_program or program, rounded=True, rules=rules,
                                       cuts=[offset + c for c in cuts] if capture_program is not None else ()))
        exact, rounded_replay = futures[0].result(), futures[1].result() if rounded else None
    xla_cpu = Replay(program, rounded=True) if rounded_replay is not None and rounded_replay.applied else None
    if rounded_replay is not None:
        seconds["compile rounded replay"] = rounded_replay.seconds["compile"]
    seconds["compile exact replay"] = exact.seconds["compile"]
    if xla_cpu is not None:
        seconds["compile XLA:CPU rounded replay"] = xla_cpu.seconds["compile"]
    return Compiled(program, rounded_replay, exact, xla_cpu, seconds)


def _compile(run: ProgramRun, cuts: Sequence[int], rules: str | Rules, device: str | None, *,
             run_exact: bool = False) -> Compiled:
    t0 = time.perf_counter()
    program, capture = run.programs()
    convert = time.perf_counter() - t0
    compiled = compile_replays(program, "auto", capture, cuts, rules, device, rounded=not run.rounded_by_run)
    compiled.seconds["program"] = convert
    if run_exact:
        with host_dots.one_blas_thread():  # beside the XLA run, which keeps the cores busy
            compiled.exact_results = compiled.exact(run.args, widening=run.widening)
        compiled.seconds["run exact replay"] = compiled.exact.seconds["run"]
    return compiled


def _runs_early(run: ProgramRun) -> bool:
    """Whether the unrounded replay runs as soon as it is compiled, beside the XLA run: when its
    arguments are already host arrays (the run's own buffers, as JAX's CPU client holds them, not
    copies made on demand) and their widened copies fit ahead of their turn (``memory.fits_ahead``;
    in its turn, the replay may consume the arguments as it widens them)."""
    if not isinstance(run.args, list):
        return False
    return memory.fits_ahead(sum(np.asarray(a).size for a in run.args) * 8)


def start_early(record: RunRecord, run: ProgramRun, cuts: Sequence[int]) -> None:
    """The XLA run stage's ``early``: the replays' compile, started on the run's program before
    torch_xla compiles and executes it (both release the GIL), and where it can (:func:`_runs_early`)
    the unrounded replay's run, which the stage waits for as it ends (``Early.settle``)."""
    now = _runs_early(run)
    record.early.start(_compile, run, list(cuts), record.request.rules, record.device or _device.current(),
                       run_exact=now, settle=now)


def replay_program(run: ProgramRun | None, compiled: Compiled | None, n_outputs: int,
                   shapes: Sequence[tuple[int, ...]], keep_args: bool, rules: str | Rules, device: str | None,
                   outputs: Outputs | None = None) -> Replayed:
    """The program of ``run`` replayed rounded and unrounded (``compiled``: already compiled by
    :func:`start_early`, else compiled here). Without ``keep_args``, the run's arguments are
    released during an f64 replay (its copies of them replace them): at real sizes these are the
    weights; an f32 replay keeps them, so :data:`COMPARE` can confirm in f64. With a
    ``capture_proto``, the rounded replay runs that program and its results after the outputs
    are ``captured``. Inside, the rounded replay's executable is freed (and the heap trimmed) before
    the unrounded replay makes its copies of the arguments: one stage, two replays in turn. Where
    the run is its own rounded replay (``run.rounded_by_run``), its ``outputs`` are that replay's
    results."""
    seconds: dict[str, float] = {}
    if run is None or run.proto is None:
        return Replayed(None, None, None, f"unavailable: {run.error if run is not None else 'no program'}", seconds)
    if run.rounded_by_run and outputs is None:
        raise InternalError("replay_program: a run that is its own rounded replay needs its outputs")
    try:
        compiled = compiled or _compile(run, (), rules, device)
        program, rounded_replay, exact_replay, xla_cpu_replay = (compiled.program, compiled.rounded, compiled.exact,
                                                                 compiled.xla_cpu)
        exact = compiled.exact_results
        seconds.update(compiled.seconds)
        del compiled
        precision = exact_replay.precision
        with_capture = run.capture_proto is not None
        if rounded_replay is None:  # the run is its own rounded replay
            resolved, applied = resolve(rules, program, device), {}
            rounded = [to_numpy(t) for _, t in outputs]
        else:
            resolved, applied = rounded_replay.rules, rounded_replay.applied
            rounded = rounded_replay(run.capture_args if with_capture else run.args, consume=with_capture)
            seconds["run rounded replay"] = rounded_replay.seconds["run"]
        del rounded_replay  # its executable keeps its temporaries (the weights in f32) until freed
        memory.release("trim")  # the run itself collected its cycle
        captured = rounded[n_outputs:] if with_capture else None
        rounded = rounded[:n_outputs] if with_capture else rounded
        xla_cpu = None
        if xla_cpu_replay is not None:
            xla_cpu = xla_cpu_replay(run.args)
            seconds["run XLA:CPU rounded replay"] = xla_cpu_replay.seconds["run"]
            del xla_cpu_replay
        if exact is None:
            exact = exact_replay(run.args, consume=not keep_args and precision == "f64", widening=run.widening)
            seconds["run exact replay"] = exact_replay.seconds["run"]
        elif not keep_args and precision == "f64" and isinstance(run.args, list):
            run.args.clear()  # it ran early; as it would have consumed them, nothing reads them after
        del exact_replay
    except ReplayError as e:
        return Replayed(None, None, None, f"unavailable: {e}", seconds)
    if len(rounded) != n_outputs:
        return Replayed(program, None, None, f"unavailable: the program has {len(rounded)} results, fn returned "
                                             f"{n_outputs} floating-point outputs", seconds, precision)
    for k, (r, s) in enumerate(zip(rounded, shapes)):
        if int(np.prod(r.shape)) != int(np.prod(s)):
            return Replayed(program, None, None, f"unavailable: the program's result {k} is {list(r.shape)}, fn's "
                                                 f"output is {list(s)}", seconds, precision)
    return Replayed(program, rounded, exact, "ok", seconds, precision, captured, resolved, applied, xla_cpu)


def reproduces(outputs: Outputs, replayed: Replayed) -> bool:
    """Whether the rounded replay reproduces the run's ``outputs`` within the bound on every one
    (then its values of the run's module tensors are the run's own, up to that bound)."""
    if replayed.rounded is None or len(replayed.rounded) != len(outputs):
        return False
    n = replayed.program.longest_reduction
    return all(np.asarray(r).size == x.numel() and replay_figures(x, r, e, n)[-1]
               for (_, x), r, e in zip(outputs, replayed.rounded, replayed.exact))


def _replays(record: RunRecord) -> None:
    """The replays stage: the run's program (the XLA run's, compiling since the run began, or a
    capture's) replayed; with localize, the run's module tensors taken from the rounded replay
    when it reproduces the run."""
    r = record.request
    outputs = record.xla.outputs
    replayed = replay_program(record.xla.program, record.early.take(), len(outputs),
                              [tuple(t.shape) for _, t in outputs], keep_args=r.explorer_dir is not None,
                              rules=r.rules, device=record.device, outputs=outputs)
    record.replayed = replayed
    wide = record.xla.wide
    if wide is not None and wide.program is not None and wide.floats and replayed.rounded is not None:
        replayed.wide, replayed.wide_status = _wide_replay(wide, replayed)
    if record.recorder is not None:  # localize: the module tensors, when the replay reproduces the run
        captured, replayed.captured = replayed.captured, None
        record.capture = record.recorder.replayed(captured if reproduces(outputs, replayed) else None, outputs,
                                                  r.dtype)
        del captured
        record.recorder = None
        if record.capture is not None:
            record.capture.info["source"] = "the rounded replay (it reproduces the run's outputs within the bound)"


def _wide_replay(wide: WideProgram, replayed: Replayed) -> tuple[list[np.ndarray] | None, str]:
    """The rounded replay (under the rules the run's replay applied) of the run's program traced with
    JAX's x64 mode on: what the run would give with float64 kept; or why it is unavailable."""
    try:
        program, _ = wide.program.programs()
        replay = Replay(program, rounded=True, rules=replayed.rules)
        values = replay(wide.program.args)
        replayed.seconds["x64 replay"] = replay.seconds["compile"] + replay.seconds["run"]
    except ReplayError as e:
        return None, f"unavailable: {e}"
    if len(values) != len(replayed.rounded):
        return None, f"unavailable: the x64 program has {len(values)} results, the run {len(replayed.rounded)}"
    return values, "ok"


def compare_outputs(record: RunRecord) -> None:
    """Every output's figures (:func:`~torch_xla_ext.parity.causes.output_parity`), in the CPU
    eager run's order; an unrounded f32 replay that finds an output off the golden is confirmed
    by the exact f64 replay first."""
    record.outputs = _compared(record)
    replayed = record.replayed
    if replayed is None or replayed.precision != "f32" or all(o.same_math is not False for o in record.outputs):
        return
    try:
        exact = Replay(replayed.program, rounded=False, precision="f64")
        replayed.seconds["compile exact f64 replay"] = exact.seconds["compile"]
        replayed.exact = exact(record.xla.program.args, consume=record.request.explorer_dir is None)
        replayed.seconds["run exact f64 replay"] = exact.seconds["run"]
        replayed.precision = "f64"
    except ReplayError as e:
        replayed.status, replayed.rounded, replayed.exact = f"unavailable: {e}", None, None
    record.outputs = _compared(record)


def _compared(record: RunRecord) -> list:
    replayed, tol = record.replayed, record.request.tol
    ran = replayed is not None and replayed.rounded is not None
    run = dict(record.xla.outputs)
    index = {p: i for i, (p, _) in enumerate(record.xla.outputs)}  # the program's results' order
    golden = dict(record.golden)
    n = replayed.program.longest_reduction if ran else 1
    out = []
    for path, c in record.cpu:
        if path not in run:
            raise CaptureError(f"the capture has no output {path or '<root>'} (it has {sorted(run)})")
        x, i = run[path], index[path]
        out.append(output_parity(path, x, c, golden[path], tol, replayed.rounded[i] if ran else None,
                                 replayed.exact[i] if ran else None, n,
                                 replayed.xla_cpu[i] if ran and replayed.xla_cpu is not None else None,
                                 replayed.wide[i] if ran and replayed.wide is not None else None))
    return out


STAGE = Stage("replays", _replays, reads=("request", "xla", "device"), optional=("recorder",),
              writes=("replayed", "capture"), drops=("recorder",), seconds="replays", release="collect")
COMPARE = Stage("outputs compared", compare_outputs, reads=("request", "cpu", "golden", "xla"), optional=("replayed",),
                writes=("outputs", "replayed"))
