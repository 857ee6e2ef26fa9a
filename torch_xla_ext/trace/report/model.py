"""``report.json`` as typed objects: what ``build.py`` makes from the records, and what ``render.py``,
``html.py`` and the CLI read (by attribute); ``report.json`` is :class:`Report` written by the one
JSON writer (``_json``), its schema in docs/trace.md. A change (``CompileRow.changed``,
``Divergence.details[].differences``) stays a JSON object whose ``what`` names it, the vocabulary
docs/trace.md lists.

:class:`CompileRow` is the one notion of a compile the sections share, whatever made it (a lazy
sync, the openxla bridge, another frontend's compile through ``build.COMPILE_SOURCES``): ``kind``
names the frontend, ``trigger.site`` is the user's line and ``trigger.function`` their function.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from torch_xla_ext.trace.report.load import StartupError
from torch_xla_ext.trace.schema import ExceptionInfo, Trigger

__all__ = ["CompileRow", "Divergence", "DynamoSection", "RankRow", "Report", "SiteRow", "SyncPoint"]


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

    def compiles_of(self, rank: Any) -> list[CompileRow]:
        return [c for c in self.compiles if c.rank == rank]
