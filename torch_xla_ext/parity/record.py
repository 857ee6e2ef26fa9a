"""The one record of a parity run: what was asked (:class:`Request`, checked before any stage
runs) and what each stage found (:class:`RunRecord`), in the order the stages write it.

Each stage declares the fields it reads and writes (:class:`~torch_xla_ext.parity.pipeline.Stage`),
and the runner checks the declarations: a stage list whose stage reads a field no earlier stage
writes is refused before anything runs, and a stage that writes a field it did not declare fails
the run. A stage drops what no later stage reads (a replay's arguments once run, verify's own
capture once compared), so at real sizes no copy of a model outlives the stage that needed it.
The runner alone writes ``seconds``, ``early`` and ``failure``. The explanation reads the record
last and makes the report.

A frontend (the way the model runs on XLA: torch_xla's lazy tensors, or torchax on JAX's XLA;
``parity/frontends.py``) enters through its run stage, which writes ``xla`` (the outputs, and the
program with its arguments: an HloModuleProto or StableHLO text) and ``device``; a capture's stage
writes the same from a file.

Example:
    >>> import torch
    >>> r = RunRecord(Request(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2), False, (torch.ones(2),), {}, None))
    >>> r.request.dtype_name, r.xla is None
    ('input dtypes', True)
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, Callable

import numpy as np
import torch

from torch_xla_ext import numerics
from torch_xla_ext.parity.capturing import Recorder
from torch_xla_ext.parity.captures import Capture, ModuleCall
from torch_xla_ext.parity.program.replay import LazyArgs, Widening
from torch_xla_ext.parity.program.rules import XLA_CPU, Rules
from torch_xla_ext.parity.program.stablehlo import Program
from torch_xla_ext.parity.report import LayerParity, ModuleParity, Narrowed, OpAudit, OutputParity
from torch_xla_ext.parity.user_code import UserFailure

__all__ = ["Early", "ModulePass", "Narrowed", "Outputs", "PerLayer", "ProgramRun", "Replayed", "Request",
           "RunRecord", "ScanRecord", "WideProgram", "XlaRun"]

# A run's floating-point outputs by pytree path ("" for a lone tensor, ".logits", "[0]").
Outputs = list[tuple[str, torch.Tensor]]


@dataclasses.dataclass
class Request:
    """A run's arguments, checked: ``fn`` and its ``reference`` (``fn`` itself unless
    ``separate_reference``), the inputs, the run's torch ``dtype`` (None: the inputs' own), the
    tolerances (``tol``: numerics.compare's keywords, {} for the dtype's defaults), the seed, and
    which optional stages run (``emulate``: the replays; ``localize``; ``explorer_dir``) under
    which device ``rules`` (a name of ``parity.RULES``, "auto" by default, or resolved rules), and
    the ``frontend`` the model reaches XLA through (``_frontend.FRONTENDS``)."""

    fn: Callable[..., Any]
    reference: Callable[..., Any]
    separate_reference: bool
    inputs: tuple
    kwargs: dict[str, Any]
    dtype: torch.dtype | None
    rtol: float | None = None
    atol: float | None = None
    tol: dict[str, float] = dataclasses.field(default_factory=dict)
    seed: int = 0
    emulate: bool = True
    localize: bool = False
    explorer_dir: str | None = None
    rules: str | Rules = "auto"
    frontend: str = "torch_xla"

    @property
    def dtype_name(self) -> str:
        return str(self.dtype).removeprefix("torch.") if self.dtype is not None else "input dtypes"


@dataclasses.dataclass
class ProgramRun:
    """A program and the arguments it ran on: ``proto``, the outputs' program (a serialized
    HloModuleProto, as torch_xla gives it, or StableHLO text, as a JAX lowering gives it) and
    ``args`` (main's arguments), or why there is none (``error``). ``capture_proto`` and
    ``capture_args``: the same program with recorded module tensors as extra results after the
    outputs (the rounded replay computes them), or None. ``excess_precision``: whether the device
    kept an elementwise result unrounded where a convert reads it (XLA's compiled programs), or
    rounded every op's result to its type (an eager run: every op its own computation).
    ``rounded_by_run``: the run is its own rounded replay: it compiled this program with the
    replays' compiler (jaxlib's XLA:CPU, in this process) and the rules are XLA:CPU's own, so the
    replays do not compile it again and its outputs are that replay's results. ``widening``: the
    float64 copies of ``args`` the exact replay takes, made since before the program was traced
    (None: it widens them itself). ``labels``: what each of main's arguments is, ("parameter",
    name), ("buffer", name) or ("input", k), where the frontend says (torchax's lowering)."""

    proto: bytes | str | None
    args: LazyArgs | list[np.ndarray] | None
    error: str | None = None
    capture_proto: bytes | str | None = None
    capture_args: LazyArgs | None = None
    excess_precision: bool = True
    rounded_by_run: bool = False
    widening: Widening | None = None
    labels: list[tuple[str, Any]] | None = None

    def widened_parameters(self) -> dict[str, np.ndarray]:
        """{parameter name: its float64 copy} of the float32 parameters whose copies the exact replay
        was handed and its Widening kept (``Widening.handed``); {} otherwise. The Widening lets go
        of them either way."""
        if self.widening is None or self.labels is None:
            return {}
        out = {}
        for k, (source, copy) in self.widening.handed().items():
            kind, key = self.labels[k] if k < len(self.labels) else ("", None)
            if kind == "parameter" and source == np.float32:
                out[key] = copy
        return out

    def programs(self) -> tuple[Program, Program | None]:
        """(the outputs' program, the program with the module tensors or None), parsed."""
        return (_program(self.proto, self.excess_precision),
                _program(self.capture_proto, self.excess_precision) if self.capture_proto is not None else None)


def _program(source: bytes | str | None, excess_precision: bool = True) -> Program:
    if isinstance(source, str):
        return Program(source, excess_precision=excess_precision)
    return Program.from_hlo_proto(source, excess_precision=excess_precision)


@dataclasses.dataclass
class WideProgram:
    """The run's program as torch's own dtypes ask for it (``program``: traced with JAX's x64 mode
    on, float64 and int64 kept, with its arguments in those dtypes; None when no float64 tensor was
    narrowed, so there is nothing to replay), and the tensors the run computed narrower
    (``narrowed``, in the order the model made them)."""

    program: ProgramRun | None
    narrowed: tuple[Narrowed, ...]

    @property
    def floats(self) -> tuple[Narrowed, ...]:
        """The narrowed float64 tensors (an int64 tensor computed as int32 is exact while its values
        fit)."""
        return tuple(n for n in self.narrowed if n.dtype == "float64")


@dataclasses.dataclass
class XlaRun:
    """The XLA run (or a capture's): its float outputs by path (on the CPU), its program (None
    unless asked for), and the HLO instruction -> module path table of its program (None: no op
    metadata, XLA_HLO_DEBUG off, or a capture). ``how``: what ran, when the frontend says more
    than its name (torchax's eager run where ``torchax.compile`` failed, and why). ``wide``: the
    program with torch's 64-bit dtypes, when the run computed some 64-bit tensors in 32 bits."""

    outputs: Outputs
    program: ProgramRun | None
    module_paths: dict[str, str] | None = None
    how: str | None = None
    wide: WideProgram | None = None


@dataclasses.dataclass
class Replayed:
    """What the replays give: the program, the rounded and unrounded replays' results (None when
    unavailable), the status ("ok" or "unavailable: <why>"), seconds per step (converting,
    compiling and running each replay: the report lists them after the replays' stage), the float
    the unrounded replay computed in ("f64" or "f32"), the rounded replay's values of the run's
    module tensors (``captured``; None without), the rules it applied (resolved) and how many
    matmuls they changed, and, when those rules changed some, the results of a rounded replay with
    XLA:CPU's own rules (``xla_cpu``) to tell the device's matmul precision from other causes."""

    program: Program | None
    rounded: list[np.ndarray] | None
    exact: list[np.ndarray] | None
    status: str
    seconds: dict[str, float]
    precision: str = "f64"
    captured: list[np.ndarray] | None = None
    rules: Rules = XLA_CPU
    applied: dict[str, int] = dataclasses.field(default_factory=dict)
    xla_cpu: list[np.ndarray] | None = None
    # The rounded replay of the run's wide program (XlaRun.wide: torch's 64-bit dtypes), under the
    # same rules, when the run computed float64 tensors in float32; or why it is unavailable.
    wide: list[np.ndarray] | None = None
    wide_status: str | None = None


@dataclasses.dataclass
class ModulePass:
    """The localisation: every module call's figures, the first divergent one, the golden's own
    float outputs by path (the fp64 golden of the whole run), and the floor of its rounding levels
    (units of roundoff of a module output's RMS)."""

    modules: tuple[ModuleParity, ...]
    first: ModuleParity | None
    golden: Outputs
    floor_ulps: float = 1.0


@dataclasses.dataclass
class PerLayer:
    """scan_layers' per-layer figures (every layer's :class:`LayerParity`) and the status of the
    per-layer replays of the scan's program."""

    layers: tuple[LayerParity, ...]
    replays: str


class Early:
    """Work started in a thread as soon as its input exists, while the caller goes on (the
    replays' compile beside torch_xla's own compile and run: both release the GIL). The runner
    owns it and closes it on every path.

    Work started with ``settle`` is waited for when the stage that started it ends (the runner
    calls :meth:`settle`): work that executes a program on XLA's CPU threads, which must not run
    beside torch's CPU stages. Torch's OpenMP threads meet at a barrier in every op, and each op
    then waits for the core XLA holds: GPT-2 124M's CPU eager run took 1.8 s beside the replay's
    run against 0.16 s alone. A compile (one thread) may go on beside them."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._future: Future | None = None
        self._settle = False

    def start(self, fn: Callable[..., Any], *args: Any, settle: bool = False, **kwargs: Any) -> None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1)
        self._future = self._pool.submit(fn, *args, **kwargs)
        self._settle = settle

    def settle(self) -> None:
        """Waits for work started with ``settle`` (its result, or what it raised, stays for
        :meth:`take`)."""
        if self._settle and self._future is not None:
            wait([self._future])
        self._settle = False

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
    """What the stages of one run found, in stage order (each field's writer and readers are the
    stages' declarations, :mod:`~torch_xla_ext.parity.pipeline`). The runner writes ``early``
    (the work a stage started for a later one), ``seconds`` (each stage's) and ``failure`` (the
    user's exception that ended the run: the EXCEPTION verdict)."""

    request: Request
    early: Early = dataclasses.field(default_factory=Early)
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    failure: UserFailure | None = None
    # The device the run's outputs came from (the XLA run's, or the capture's device type).
    device: str | None = None
    # CPU eager: its outputs, its module calls (localize: the CPU shadows they spare), and the
    # first output on which a second run differed (NONDETERMINISTIC_REFERENCE).
    cpu: Outputs | None = None
    cpu_calls: list[ModuleCall] | None = None
    nondeterminism: tuple[str, numerics.CompareReport] | None = None
    golden: Outputs | None = None
    # The XLA run (or a capture's outputs and program); outputs of other shapes than CPU eager's.
    xla: XlaRun | None = None
    shapes_differ: list[tuple[str, list[int], list[int]]] | None = None
    # localize: the XLA run's recorder of module calls (until the replays compute them), then the
    # run's per-module capture (or a loaded capture's).
    recorder: Recorder | None = None
    capture: Capture | None = None
    replayed: Replayed | None = None
    modules: ModulePass | None = None
    outputs: list[OutputParity] | None = None
    # A frontend's op audit (torchax): when the program is not the reference's math, which op the
    # frontend lowers to other math, from the first divergent module's forward op by op.
    op_audit: OpAudit | None = None
    # Sentences the explanation appends (a localisation that failed).
    notes: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class ScanRecord(RunRecord):
    """scan_layers' record: verify's, and the per-layer stage's figures."""

    per_layer: PerLayer | None = None
