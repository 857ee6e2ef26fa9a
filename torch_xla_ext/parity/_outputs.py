"""Per-output comparison and the XLA run's replays, shared by verify and scan_layers."""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple, Sequence

import numpy as np

from torch_xla_ext import numerics
from torch_xla_ext.parity import explain as _explain
from torch_xla_ext.parity import runners
from torch_xla_ext.parity.errors import ReplayError
from torch_xla_ext.parity.replays import Replay, unrounded_precision
from torch_xla_ext.parity.report import OutputParity
from torch_xla_ext.parity.stablehlo import Program

__all__ = ["Replayed", "closer", "exact_outputs", "golden_errors", "output_parity", "replay_outputs", "reproduces",
           "with_causes"]


def golden_errors(y: Any, golden: Any) -> tuple[float, float]:
    """Greatest and mean |y - golden|, in float64 (NaN where either is NaN)."""
    import torch

    y = torch.from_numpy(np.array(y, dtype=np.float64)) if isinstance(y, np.ndarray) else y.double()
    if y.numel() == 0:
        return 0.0, 0.0
    e = (y.reshape(golden.shape) - golden.double()).abs()
    return float(e.max()), float(e.mean())


def closer(xla: tuple[float, float], cpu: tuple[float, float]) -> str:
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
        emu = _emulated(x, rounded)
        emu_err = golden_errors(rounded, g)[0]
        unr = numerics.compare(exact, gd.numpy(), equal_nan=True, check_dtype=False)
        unr_err = golden_errors(exact, g)[0]
        same = _explain.same_math(unr, unr_err, xe[0], ce[0])
    return OutputParity(
        path, cmp, xe[0], ce[0], xe[1], ce[1], closer(xe, ce), scale,
        (cmp.max_abs_diff / scale) if scale > 0 else 0.0, magnitude, significant, emu, emu_err, unr, unr_err, same)


def with_causes(outputs: Sequence[OutputParity], narrow: bool) -> list[OutputParity]:
    return [dataclasses.replace(o, cause=_explain.output_cause(o, narrow)) for o in outputs]


def compile_replays(proto: bytes, unrounded: str = "f64", capture_proto: bytes | None = None,
                    cuts: Sequence[int] = ()) -> tuple[Program, Replay, Replay, dict[str, float]]:
    """(program, rounded replay, unrounded replay, seconds) of an HloModuleProto; ReplayError
    when either cannot be built. ``unrounded``: the unrounded replay's float, "f64", "f32", or
    "auto" (:func:`~torch_xla_ext.parity.replays.unrounded_precision` of the program).
    ``capture_proto``: the program's outputs followed by a capture's module tensors
    (``runners.run_xla``'s ``replayed``), which the rounded replay then runs instead, cut at
    the module tensors ``cuts`` (indices among them: the ``cuts`` of ``capturing.Recorder`` or
    ``capturing.BlockValues``)."""
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    program = Program.from_hlo_proto(proto)
    rounded_program = Program.from_hlo_proto(capture_proto) if capture_proto is not None else program
    seconds["program"] = time.perf_counter() - t0
    precision = unrounded_precision(program) if unrounded == "auto" else unrounded
    # Two compiles; XLA releases the GIL while compiling, so they overlap on two cores.
    with ThreadPoolExecutor(2) as pool:
        offset = len(program.main.returned)  # the module tensors follow the outputs
        futures = [pool.submit(Replay, rounded_program, rounded=True,
                               cuts=[offset + c for c in cuts] if capture_proto is not None else ()),
                   pool.submit(Replay, program, rounded=False, precision=precision)]
        rounded_replay, exact_replay = (f.result() for f in futures)
    seconds["compile rounded replay"] = rounded_replay.seconds["compile"]
    seconds["compile exact replay"] = exact_replay.seconds["compile"]
    return program, rounded_replay, exact_replay, seconds


class EarlyCompile:
    """The replays compiled in a thread from the moment the XLA run's program exists, while
    torch_xla compiles and executes it (both release the GIL): at real sizes the rounded replay's
    compile costs about what torch_xla's own does, and would otherwise come after it."""

    def __init__(self, unrounded: str = "f64"):
        self._pool = ThreadPoolExecutor(1)
        self._future = None
        self._unrounded = unrounded

    def start(self, proto: bytes, capture_proto: bytes | None = None, cuts: Sequence[int] = ()) -> None:
        self._future = self._pool.submit(compile_replays, proto, self._unrounded, capture_proto, cuts)

    def take(self) -> tuple[Program, Replay, Replay, dict[str, float]] | None:
        """The compiled replays (the caller then owns them, so they can be freed), or None when
        nothing was started."""
        future, self._future = self._future, None
        return future.result() if future is not None else None

    def close(self) -> None:
        self._future = None
        self._pool.shutdown(wait=True)


class Replayed(NamedTuple):
    """What :func:`replay_outputs` gives: the program, the replays' outputs (None when
    unavailable), the status ("ok" or "unavailable: <why>"), seconds per step, the float the
    unrounded replay computed in ("f64" or "f32"), and the rounded replay's values of the run's
    module tensors (``run.capture_proto``; None without)."""

    program: Program | None
    rounded: list | None
    exact: list | None
    status: str
    seconds: dict[str, float]
    precision: str = "f64"
    captured: list | None = None


def replay_outputs(run: runners.XlaRun, n_outputs: int, shapes: Sequence[tuple[int, ...]], keep_args: bool = True,
                   early: EarlyCompile | None = None, unrounded: str = "f64") -> Replayed:
    """The XLA run's program replayed rounded and unrounded (``unrounded``: see
    :func:`compile_replays`; ``early``: the replays' compile, already started with its own).
    Without ``keep_args``, the run's graph arguments are released during an f64 replay (its
    copies of them replace them): at real sizes these are the weights; an f32 replay keeps them,
    so :func:`exact_outputs` can confirm in f64. With ``run.capture_proto``, the rounded replay
    runs that program and its results after the outputs are ``captured``."""
    seconds: dict[str, float] = {}
    if run.proto is None:
        return Replayed(None, None, None, f"unavailable: {run.hlo_error}", seconds)
    try:
        compiled = early.take() if early is not None else None
        program, rounded_replay, exact_replay, compile_seconds = compiled or compile_replays(
            run.proto, unrounded, run.capture_proto)
        del compiled
        seconds.update(compile_seconds)
        precision = exact_replay.precision
        with_capture = run.capture_proto is not None
        rounded = rounded_replay(run.capture_args if with_capture else run.graph_args, consume=with_capture)
        seconds["run rounded replay"] = rounded_replay.seconds["run"]
        del rounded_replay  # its executable keeps its temporaries (the weights in f32) until freed
        runners.release_freed_memory(collect=False)  # the run itself collected its cycle
        captured = rounded[n_outputs:] if with_capture else None
        rounded = rounded[:n_outputs] if with_capture else rounded
        exact = exact_replay(run.graph_args, consume=not keep_args and precision == "f64")
        seconds["run exact replay"] = exact_replay.seconds["run"]
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
    return Replayed(program, rounded, exact, "ok", seconds, precision, captured)


def _emulated(x: Any, rounded: np.ndarray) -> Any:
    """XLA's output ``x`` vs the rounded replay's result (its shape), exactly: the emulation figure."""
    return numerics.compare(x, rounded.astype(np.float64), rtol=0.0, atol=0.0, equal_nan=True, check_dtype=False)


def reproduces(outputs: Sequence[tuple[str, Any]], rounded: Sequence[Any] | None) -> bool:
    """Whether the rounded replay's results are the XLA run's outputs exactly (the emulation
    figure's rule, NaN where NaN): then its values of the run's module tensors are the run's own."""
    if rounded is None or len(rounded) != len(outputs):
        return False
    for (_, x), r in zip(outputs, rounded):
        r = np.asarray(r)
        if r.size != x.numel() or _emulated(x, r.reshape(tuple(x.shape))).mismatched:
            return False
    return True


def exact_outputs(program: Program, run: runners.XlaRun,
                  keep_args: bool = True) -> tuple[list | None, str, dict[str, float]]:
    """(outputs, status, seconds) of the exact f64 replay of ``program`` on the run's arguments:
    the confirmation verify asks for when the unrounded f32 replay leaves the golden."""
    seconds: dict[str, float] = {}
    try:
        replay = Replay(program, rounded=False, precision="f64")
        seconds["compile exact f64 replay"] = replay.seconds["compile"]
        exact = replay(run.graph_args, consume=not keep_args)
        seconds["run exact f64 replay"] = replay.seconds["run"]
    except ReplayError as e:
        return None, f"unavailable: {e}", seconds
    return exact, "ok", seconds
