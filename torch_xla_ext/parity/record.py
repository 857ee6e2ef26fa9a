"""The one record of a parity run: what was asked (:class:`Request`, checked before any stage
runs) and what each stage found (:class:`RunRecord`), in the order the stages write it.

A stage reads what earlier stages wrote and writes its own fields; it drops what no later stage
reads (a CPU run's second outputs once compared, the replays' arguments once run), so at real
sizes no copy of a model outlives the stage that needed it. The explanation stage reads the
record last and makes the report.

Example:
    >>> import torch
    >>> r = RunRecord(Request(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2), False, (torch.ones(2),), {}, None))
    >>> r.request.dtype_name, r.done
    ('input dtypes', False)
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

from torch_xla_ext import numerics
from torch_xla_ext.parity.program.replay import LazyArgs
from torch_xla_ext.parity.program.rules import XLA_CPU, Rules
from torch_xla_ext.parity.program.stablehlo import Program
from torch_xla_ext.parity.report import ModuleParity, OutputParity
from torch_xla_ext.parity.user_code import UserFailure

__all__ = ["Early", "ModulePass", "ProgramRun", "Replayed", "Request", "RunRecord", "XlaRun"]


@dataclasses.dataclass
class Request:
    """A run's arguments, checked: ``fn`` and its ``reference`` (``fn`` itself unless
    ``separate_reference``), the inputs, the run's torch ``dtype`` (None: the inputs' own), the
    tolerances (``tol``: numerics.compare's keywords, {} for the dtype's defaults), the seed, and
    which optional stages run (``emulate``: the replays; ``localize``; ``explorer_dir``) under
    which device ``rules``."""

    fn: Any
    reference: Any
    separate_reference: bool
    inputs: tuple
    kwargs: dict
    dtype: Any
    rtol: float | None = None
    atol: float | None = None
    tol: dict[str, float] = dataclasses.field(default_factory=dict)
    seed: int = 0
    emulate: bool = True
    localize: bool = False
    explorer_dir: str | None = None
    rules: Any = "xla-cpu"

    @property
    def dtype_name(self) -> str:
        return str(self.dtype).removeprefix("torch.") if self.dtype is not None else "input dtypes"


@dataclasses.dataclass
class ProgramRun:
    """A program and the arguments it ran on: the HloModuleProto of the outputs (``proto``) and
    ``args`` (main's arguments), or why there is none (``error``). ``capture_proto`` and
    ``capture_args``: the same program with recorded module tensors as extra results after the
    outputs (the rounded replay computes them), or None."""

    proto: bytes | None
    args: LazyArgs | None
    error: str | None = None
    capture_proto: bytes | None = None
    capture_args: LazyArgs | None = None


@dataclasses.dataclass
class XlaRun:
    """The XLA run: its float outputs by path (on the CPU), its program (None unless asked for),
    its seconds, and the HLO instruction -> module path table of its program (None: no op
    metadata, XLA_HLO_DEBUG off)."""

    outputs: list[tuple[str, Any]]
    program: ProgramRun | None
    seconds: float
    module_paths: dict[str, str] | None = None


@dataclasses.dataclass
class Replayed:
    """What the replays give: the program, the rounded and unrounded replays' results (None when
    unavailable), the status ("ok" or "unavailable: <why>"), seconds per step, the float the
    unrounded replay computed in ("f64" or "f32"), the rounded replay's values of the run's module
    tensors (``captured``; None without), the rules it applied (resolved) and how many matmuls
    they changed, and, when those rules changed some, the results of a rounded replay with
    XLA:CPU's own rules (``xla_cpu``) to tell the device's matmul precision from other causes."""

    program: Program | None
    rounded: list | None
    exact: list | None
    status: str
    seconds: dict[str, float]
    precision: str = "f64"
    captured: list | None = None
    rules: Rules = XLA_CPU
    applied: dict[str, int] = dataclasses.field(default_factory=dict)
    xla_cpu: list | None = None


@dataclasses.dataclass
class ModulePass:
    """The localisation: every module call's figures, the first divergent one, the golden's own
    float outputs by path (the fp64 golden of the whole run), the seconds it took, and the floor of
    its rounding levels (units of roundoff of a module output's RMS)."""

    modules: tuple[ModuleParity, ...]
    first: ModuleParity | None
    golden: list[tuple[str, Any]]
    seconds: float
    floor_ulps: float = 1.0


class Early:
    """Work started in a thread as soon as its input exists, while the caller goes on (the
    replays' compile beside torch_xla's own compile and run: both release the GIL). The runner
    owns it and closes it on every path."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._future: Future | None = None

    def start(self, fn: Callable[..., Any], *args: Any) -> None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1)
        self._future = self._pool.submit(fn, *args)

    def take(self) -> Any:
        """The work's result (the taker then owns it, so it can be freed), or None when nothing
        was started. Raises what the work raised."""
        future, self._future = self._future, None
        return future.result() if future is not None else None

    def close(self) -> None:
        self._future = None
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


@dataclasses.dataclass
class RunRecord:
    """What the stages of one run found, in stage order. ``done`` ends the run before its next
    stage (a NONDETERMINISTIC_REFERENCE, outputs of other shapes); ``failure`` is the user's
    exception the runner caught (the EXCEPTION verdict); ``notes`` are sentences the explanation
    appends (a localisation that failed)."""

    request: Request
    early: Early = dataclasses.field(default_factory=Early)
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    device: str | None = None  # the device the run's outputs came from (the XLA run's or the capture's)
    # CPU eager
    cpu: list[tuple[str, Any]] | None = None
    cpu_again: list[tuple[str, Any]] | None = None
    cpu_calls: list | None = None  # CPU eager's module calls (with localize: the CPU shadows it spares)
    nondeterminism: tuple[str, numerics.CompareReport] | None = None
    # golden
    golden: list[tuple[str, Any]] | None = None
    # XLA run (or a capture's)
    xla: XlaRun | None = None
    recorder: Any = None  # capturing.Recorder / BlockValues: what the XLA run's hooks kept
    capture: Any = None  # capturing.Capture: the run's module calls (localize), or a loaded capture
    shapes_differ: list[tuple[str, list[int], list[int]]] | None = None
    # replays
    replayed: Replayed | None = None
    # localisation
    modules: ModulePass | None = None
    # scan_layers: every layer's figures (LayerParity) and the per-layer replays' status
    layers: list | None = None
    layer_replays: str | None = None
    # explanation
    outputs: list[OutputParity] | None = None
    failure: UserFailure | None = None
    done: bool = False
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def run_outputs(self) -> list[tuple[str, Any]]:
        """The outputs under test: the XLA run's, or the capture's."""
        if self.xla is not None:
            return self.xla.outputs
        return list(self.capture.outputs.items())
