"""``report.json`` as typed objects: what ``build.py`` makes from the records, and what ``render.py``,
``html.py`` and the CLI read (by attribute); ``report.json`` is :class:`Report` written by the one
JSON writer (``_json``), its schema in docs/trace.md. A change (``CompileRow.changed``,
``Divergence.details[].differences``) stays a JSON object whose ``what`` names it, the vocabulary
docs/trace.md lists.

:class:`CompileRow` is the one notion of a compile the sections share, whatever made it (a lazy
sync, the openxla bridge, a JAX compile of torchax's, through ``build.COMPILE_SOURCES``): ``kind``
names the frontend, ``trigger.site`` is the user's line and ``trigger.function`` their function;
``eager`` marks a computation compiled for one op run outside any compiled function (op by op),
which the totals count and the sites table leaves to its own section (:class:`OpGroup`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from torch_xla_ext.trace.schema import ExceptionInfo, Trigger

__all__ = ["CompileRow", "Divergence", "DynamoSection", "Finding", "FunctionRow", "OpGroup", "RankRow", "Report",
           "SiteRow", "StartupError", "SyncPoint"]


@dataclasses.dataclass
class CompileRow:
    """One compile of the user's program, on one rank."""

    rank: Optional[int]
    k: int
    step: int
    kind: str  # lazy, dynamo (the openxla bridge's), or another frontend's
    graph_hash: str
    trigger: Trigger
    ms: Optional[float] = None
    inputs: Optional[int] = None
    outputs: Optional[int] = None
    compile_id: Optional[str] = None
    changed: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    previous_step: Optional[int] = None
    previous_hash: Optional[str] = None
    advice: str = ""
    captured: bool = False
    recovered: bool = False
    replica: int = 0
    bridge_hash: Optional[str] = None
    name: str = ""  # the compiler's name of the program (JAX's jit(call_torch)); "" for torch_xla's graphs
    eager: bool = False  # op by op: compiled for an op outside any compiled function
    call: Optional[int] = None  # which call of its function compiled it
    t: Optional[float] = None  # when it ended (ms on its rank file's clock)


@dataclasses.dataclass
class SiteRow:
    """A site (a line of the user's code, by trigger kind) that compiled, on one rank."""

    rank: Optional[int]
    kind: str
    site: str
    op: str
    function: str
    code: str
    compiles: int
    graphs: int
    steps_run: int
    first_step: int
    last_step: int
    every_step: bool
    advice: str = ""
    most_steps: bool = False  # compiled on more than half the steps (calls) it ran, at least 3 times


@dataclasses.dataclass
class OpGroup:
    """Computations compiled for one op run op by op at one line of the user's (outside any
    compiled function), on one rank: how many compiles and how long, how often the op ran there,
    and the programs' names."""

    rank: Optional[int]
    site: str
    op: str
    code: str
    compiles: int
    compile_ms: float
    executions: Optional[int]  # None: not counted (not a torch op torchax dispatched, or the process was killed)
    names: list[str]
    entry: str = ""  # the line of the user's script, when ``site`` is in a library of theirs
    first_step: int = 0
    last_step: int = 0


@dataclasses.dataclass
class FunctionRow:
    """A function compiled through a frontend's jit (torchax's), on one rank: its calls and
    compiles, and whether it stopped compiling."""

    rank: Optional[int]
    name: str
    defined: str
    jitted_at: str
    calls: Optional[int]  # None when the process ended without its counts (killed)
    compiles: int
    last_compile_call: Optional[int]
    steady: str


@dataclasses.dataclass
class Finding:
    """Something in the user's code the run hit, named at its line: ``kind`` ``concretization``
    (a traced value read as a Python value inside a compiled function: ``op`` is how, ``function``
    and ``call`` where it was traced, ``call_site`` where it was called)."""

    rank: Optional[int]
    kind: str
    site: str
    code: str
    op: str
    function: str
    call: int
    call_site: str
    exception: ExceptionInfo
    advice: str
    aten_op: str = ""


@dataclasses.dataclass
class SyncPoint:
    """A step marker or host read that made torch_xla run graphs, on one rank."""

    rank: Optional[int]
    kind: str
    site: str
    code: str
    op: str
    executions: int = 0
    steps: int = 0
    markers: int = 0


@dataclasses.dataclass
class RankRow:
    """One traced process: how it ended, its compiles, what the recorder noted."""

    rank: Optional[int]
    label: str
    file: str
    host: str
    pid: int
    world_size: Optional[int]
    steps: int
    ended: bool
    exception: Optional[ExceptionInfo]
    damage: Optional[str]
    stopped: str
    compiles: int
    compile_ms: float
    torch_xla_compile_count: Optional[int]
    compile_analysis: str
    capture: str
    notes: list[str]
    problems: list[str]
    steady: str
    last_compile_step: int
    unrecorded_compiles: int
    unit: str = "step"  # what its steps count: torch_xla's step markers, or calls of its most-called function
    op_by_op: int = 0  # of its compiles, computations compiled for ops run op by op


@dataclasses.dataclass
class DynamoSection:
    """One process's Dynamo record: its figures (``_dynamo_events.DYNAMO_FIGURES``' names), per
    compile id, and its breaks."""

    rank: Optional[int]
    figures: dict[str, Any]
    compile_ids: list[dict[str, Any]]
    breaks: list[dict[str, Any]]


@dataclasses.dataclass
class Divergence:
    """The ranks that diverge: the first step where their graphs differ, and what differs."""

    ranks: list[Any]
    world_size: Optional[int]
    missing_ranks: list[int]
    stopped_early: list[dict[str, Any]]
    first_step: Optional[int]
    ranks_that_differ: list[Any]
    details: list[dict[str, Any]]
    no_majority: bool = False


@dataclasses.dataclass
class StartupError:
    """A process whose recorder did not start (``startup-error-<pid>.txt``): what it said."""

    pid: int
    file: str
    text: str


@dataclasses.dataclass
class Report:
    """``report.json``."""

    schema: str
    version: int
    directory: str
    command: Optional[list[str]]
    exit: Optional[dict[str, Any]]
    ranks: list[RankRow]
    compiles: list[CompileRow]
    sites: list[SiteRow]
    sync_points: list[SyncPoint]
    dynamo: list[DynamoSection]
    divergence: Divergence
    oracles: dict[str, str]
    dynamo_figures: list[dict[str, str]]
    startup_errors: list[StartupError]
    problems: list[str]
    summary: list[str] = dataclasses.field(default_factory=list)
    functions: list[FunctionRow] = dataclasses.field(default_factory=list)
    op_by_op: list[OpGroup] = dataclasses.field(default_factory=list)
    findings: list[Finding] = dataclasses.field(default_factory=list)

    def compiles_of(self, rank: Any) -> list[CompileRow]:
        return [c for c in self.compiles if c.rank == rank]
