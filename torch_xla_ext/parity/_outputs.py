"""Per-output comparison and the XLA run's replays, shared by verify and scan_layers."""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

import numpy as np

from torch_xla_ext import numerics
from torch_xla_ext.parity import explain as _explain
from torch_xla_ext.parity import runners
from torch_xla_ext.parity.errors import ReplayError
from torch_xla_ext.parity.replays import Replay
from torch_xla_ext.parity.report import OutputParity
from torch_xla_ext.parity.stablehlo import Program

__all__ = ["closer", "golden_errors", "output_parity", "replay_outputs", "with_causes"]


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
        emu = numerics.compare(x, rounded.astype(np.float64), rtol=0.0, atol=0.0, equal_nan=True, check_dtype=False)
        emu_err = golden_errors(rounded, g)[0]
        unr = numerics.compare(exact, gd.numpy(), equal_nan=True, check_dtype=False)
        unr_err = golden_errors(exact, g)[0]
        same = _explain.same_math(unr, unr_err, xe[0], ce[0])
    return OutputParity(
        path, cmp, xe[0], ce[0], xe[1], ce[1], closer(xe, ce), scale,
        (cmp.max_abs_diff / scale) if scale > 0 else 0.0, magnitude, significant, emu, emu_err, unr, unr_err, same)


def with_causes(outputs: Sequence[OutputParity], narrow: bool) -> list[OutputParity]:
    return [dataclasses.replace(o, cause=_explain.output_cause(o, narrow)) for o in outputs]


def compile_replays(proto: bytes) -> tuple[Program, Replay, Replay, dict[str, float]]:
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


class EarlyCompile:
    """The replays compiled in a thread from the moment the XLA run's program exists, while
    torch_xla compiles and executes it (both release the GIL): at real sizes the rounded replay's
    compile costs about what torch_xla's own does, and would otherwise come after it."""

    def __init__(self):
        self._pool = ThreadPoolExecutor(1)
        self._future = None

    def start(self, proto: bytes) -> None:
        self._future = self._pool.submit(compile_replays, proto)

    def take(self) -> tuple[Program, Replay, Replay, dict[str, float]] | None:
        """The compiled replays (the caller then owns them, so they can be freed), or None when
        nothing was started."""
        future, self._future = self._future, None
        return future.result() if future is not None else None

    def close(self) -> None:
        self._future = None
        self._pool.shutdown(wait=True)


def replay_outputs(run: runners.XlaRun, n_outputs: int, shapes: Sequence[tuple[int, ...]], keep_args: bool = True,
                   early: EarlyCompile | None = None):
    """(program, rounded outputs, exact outputs, status, seconds) of the XLA run's program.
    Without ``keep_args``, the run's graph arguments are released during the exact replay (its
    f64 copies of them replace them): at real sizes these are the weights. ``early``: the
    replays' compile, already started."""
    seconds: dict[str, float] = {}
    if run.proto is None:
        return None, None, None, f"unavailable: {run.hlo_error}", seconds
    try:
        compiled = early.take() if early is not None else None
        program, rounded_replay, exact_replay, compile_seconds = compiled or compile_replays(run.proto)
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
