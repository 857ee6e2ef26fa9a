"""The records of a rank file and the error of the trace, one copy each.

A rank file (``rank-<r>.jsonl`` / ``proc-<pid>.jsonl``, :mod:`~torch_xla_ext.trace.stream`) is one
JSON object per line; ``ev`` names the record. The readers validate every line against the
dataclass of its ``ev`` (:data:`RECORDS`) through ``torch_xla_ext._validation`` (pydantic): a file
is untrusted input (gathered from a job's hosts, cut short by a kill). Keys a record does not
declare are ignored, so a newer writer's extra fields read back.

``SCHEMA_VERSION`` is the version of the rank files and of ``report.json`` (documented in
docs/trace.md); a reader refuses another major version, naming the file.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from typing_extensions import TypedDict

from torch_xla_ext.errors import InvalidArgumentError

__all__ = ["RANK_FILE_GLOB", "RECORDS", "SCHEMA_VERSION", "TraceError"]

SCHEMA_VERSION = 1
RANK_FILE_GLOB = "rank-*.jsonl proc-*.jsonl"


class TraceError(InvalidArgumentError):
    """Bad input to the trace: an unusable ``--out``, an old trace without ``--overwrite``, a
    directory without rank files, a rank file of another schema. Names the path or argument."""


@dataclasses.dataclass
class Header:
    schema_version: int
    pid: int
    host: str
    wall: float
    rank: Optional[int] = None
    world_size: Optional[int] = None
    local_rank: Optional[int] = None
    source: Optional[str] = None
    argv: list[str] = dataclasses.field(default_factory=list)
    executable: str = ""
    forked_from: Optional[int] = None


@dataclasses.dataclass
class Runtime:
    """What the recorder could observe in this process (written when torch_xla or Dynamo loads)."""

    t: float
    torch: str = ""
    torch_xla: str = ""
    compile_analysis: str = ""  # "file" or why torch_xla's analysis is not read
    capture: str = ""  # the graph-capture policy: auto, all, off
    debug_file: str = ""  # torch_xla's analysis file of this process
    device: str = ""
    notes: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Site:
    """A code location, interned: later records name it by ``id``."""

    id: int
    file: str
    line: int
    function: str = ""
    code: str = ""


@dataclasses.dataclass
class Step:
    """A step marker from the user's code (torch_xla.sync, xm.mark_step, MpDeviceLoader, ...)."""

    n: int
    t: float
    site: int
    kind: str
    ms: float = 0.0  # time inside the step marker
    graphs: int = 0  # graphs it launched
    replica: int = 0
    # The executions of the step in order, each [trigger kind, site id or -1, graph hash].
    executions: list[list[Any]] = dataclasses.field(default_factory=list)
    debug_offset: Optional[int] = None  # how far torch_xla's analysis file was read


class _TriggerKind(TypedDict):
    kind: str  # sync, host_read, data_loader, dynamo, dynamo_inputs, dynamo_run, torch_xla.compile, optimizer_step, other


class Trigger(_TriggerKind, total=False):
    """What made torch_xla compile a graph (a JSON object inside a compile record)."""

    site: str  # "file:line" of the user's code ("" when unknown)
    op: str  # for a host read: item, tolist, cpu, numpy, print, bool, ...
    function: str
    code: str
    cause: str  # torch_xla's own words, when it wrote them
    frames: list[str]


@dataclasses.dataclass
class Compile:
    """One XLA compile."""

    k: int  # 1-based, in this process
    step: int
    t: float
    graph_hash: str
    trigger: Trigger
    ordinal: Optional[int] = None  # its sample of torch_xla's CompileTime metric (1-based, in this process)
    ms: Optional[float] = None
    inputs: Optional[int] = None
    outputs: Optional[int] = None
    compile_id: Optional[str] = None  # the Dynamo compile that led to it
    captured: bool = False
    changed: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    previous: Optional[int] = None  # k of the earlier compile at this site it was compared with
    advice: str = ""
    replica: int = 0
    sizes: dict[str, float] = dataclasses.field(default_factory=dict)
    # The XLA tensors in scope that are not parameters, gradients or optimizer state (name -> [role,
    # dtype, shape]), and how many of each role there were.
    tensors: dict[str, list[Any]] = dataclasses.field(default_factory=dict)
    roles: dict[str, int] = dataclasses.field(default_factory=dict)
    debug_offset: Optional[int] = None


@dataclasses.dataclass
class Graph:
    """A captured pending graph (``_compat.lazy.graph_signature``), for the compile ``k``."""

    k: int
    graph_hash: str
    args: list[str]
    results: list[str]
    ops: list[list[Any]]
    frames: list[list[list[Any]]]
    constants: list[list[Any]]


@dataclasses.dataclass
class Dynamo:
    """A Dynamo, AOTAutograd or bridge event (``what``), joined by compile id."""

    what: str
    t: float
    compile_id: Optional[str] = None
    data: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class End:
    """The process ended through Python's exit path (not killed)."""

    t: float
    steps: int
    compile_time_count: Optional[int] = None  # torch_xla's CompileTime samples, its own record
    exception: Optional[dict[str, Any]] = None  # type, message, site of an uncaught exception
    debug_offset: Optional[int] = None


@dataclasses.dataclass
class Problem:
    """Something the recorder could not do; the run went on."""

    t: float
    where: str
    message: str


@dataclasses.dataclass
class DebugRead:
    """How far torch_xla's analysis file of this process has been read into records."""

    path: str
    offset: int


RECORDS: dict[str, type] = {
    "header": Header, "runtime": Runtime, "site": Site, "step": Step, "compile": Compile, "graph": Graph,
    "dynamo": Dynamo, "end": End, "problem": Problem, "debug_read": DebugRead,
}
