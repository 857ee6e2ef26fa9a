"""The records of a rank file, of ``run.json``, and the error of the trace: one typed model each,
used by the writers (the recorder builds these objects, :meth:`RankFile.write
<torch_xla_ext.trace.stream.RankFile.write>` writes them) and by the reader (``report/load.py``
validates every line against the model of its ``ev`` through ``torch_xla_ext._validation`` and
keeps the typed value; the report reads attributes).

A rank file (``rank-<r>.jsonl`` / ``proc-<pid>.jsonl``, :mod:`~torch_xla_ext.trace.stream`) is one
JSON object per line; ``ev`` names the record (:data:`RECORDS`). Dynamo's, AOTAutograd's and the
openxla bridge's records are the events of :mod:`torch_xla_ext._dynamo_events`, the classes the
graph-break ledger aggregates too. A file is untrusted input (gathered from a job's hosts, cut
short by a kill): keys a record does not declare are ignored, so a newer writer's extra fields
read back.

Versions (:data:`SCHEMA_VERSION`, :data:`SCHEMA_MINOR`): a file's header says ``schema_version``
(the major) and ``schema_minor``. A reader reads its own major at any minor (a newer minor only
adds fields and records, and records of a kind it does not know are skipped, not damage), and the
older majors in :data:`READS` (each upgraded to this one's records on reading); a newer major is
refused naming the file, its version, the reader's and what to do.

Adding a record (a new frontend's compile, say): one dataclass here (or in the frontend's own
module), one line in :data:`RECORDS`, a writer that builds it, and the report's section that
reads it (docs/trace.md, "Adding a record").

Example:
    >>> rec = Step(n=1, t=12.5, site=0, kind="sync", graphs=1)
    >>> EV[Step], to_json(rec)["n"]
    ('step', 1)
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

from torch_xla_ext._dynamo_events import EVENTS
from torch_xla_ext.errors import InvalidArgumentError

__all__ = ["EV", "READS", "RANK_FILE_GLOB", "RECORDS", "SCHEMA_MINOR", "SCHEMA_VERSION", "End", "ExceptionInfo",
           "Compile", "Graph", "Header", "Problem", "RunManifest", "Runtime", "Site", "Step", "TraceError", "Trigger",
           "to_json", "version_text"]

SCHEMA_VERSION = 2  # the major: rank files, run.json and report.json
SCHEMA_MINOR = 0
RANK_FILE_GLOB = "rank-*.jsonl proc-*.jsonl"


class TraceError(InvalidArgumentError):
    """Bad input to the trace: an unusable ``--out``, an old trace without ``--overwrite``, a
    directory without rank files, a rank file of a schema this torch_xla_ext cannot read. Names
    the path or argument."""


def version_text(major: int, minor: int = 0) -> str:
    return f"{major}.{minor}"


@dataclasses.dataclass
class Header:
    """A rank file's first line: which process wrote it, and the schema it wrote."""

    schema_version: int
    pid: int
    host: str
    wall: float  # time.time() when the file opened: places its records (ms since then) on one clock
    schema_minor: int = 0
    rank: Optional[int] = None
    world_size: Optional[int] = None
    local_rank: Optional[int] = None
    source: Optional[str] = None  # where the rank came from: RANK, torch_xla's ordinal, LOCAL_RANK
    argv: list[str] = dataclasses.field(default_factory=list)
    executable: str = ""
    python: str = ""
    cwd: str = ""
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
    # The executions of the step in order: (trigger kind, site id or -1, graph hash).
    executions: list[tuple[str, int, str]] = dataclasses.field(default_factory=list)
    debug_offset: Optional[int] = None  # how far torch_xla's analysis file was read


@dataclasses.dataclass
class Trigger:
    """What made torch_xla compile or run a graph.

    ``kind``: sync, data_loader, optimizer_step, torch_xla.compile, profiler, host_read, dynamo,
    dynamo_inputs, dynamo_run or other; ``site``: "file:line" of the user's code ("" when
    unknown); ``op``: for a host read, item, tolist, cpu, numpy, print, format, bool, scalar."""

    kind: str
    site: str = ""
    op: str = ""
    function: str = ""
    code: str = ""
    cause: str = ""  # torch_xla's own words, when it wrote them
    frames: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Compile:
    """One XLA compile (lazy, or one of the openxla bridge's).

    ``changed`` is what differs from the earlier graph of the site it was compared with
    (``previous``): each entry a JSON object whose ``what`` names the change (docs/trace.md,
    "What changed can say")."""

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
    # The XLA tensors in scope that are user inputs or locals (name -> [role, dtype, shape]), and
    # how many tensors of each role there were.
    tensors: dict[str, list[Any]] = dataclasses.field(default_factory=dict)
    roles: dict[str, int] = dataclasses.field(default_factory=dict)
    debug_offset: Optional[int] = None
    recovered: bool = False  # read back from torch_xla's analysis after the process stopped (False when written)


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
    passed_through: int = 0


@dataclasses.dataclass
class ExceptionInfo:
    """An uncaught exception: its type, message and the user's line it came from."""

    type: str
    message: str = ""
    site: str = ""


@dataclasses.dataclass
class End:
    """The process ended through Python's exit path (not killed)."""

    t: float
    steps: int
    compile_time_count: Optional[int] = None  # torch_xla's CompileTime samples, its own record
    exception: Optional[ExceptionInfo] = None
    debug_offset: Optional[int] = None


@dataclasses.dataclass
class Problem:
    """Something the recorder could not do, and what it caught; the run went on."""

    t: float
    where: str
    message: str


RECORDS: dict[str, type] = {
    "header": Header, "runtime": Runtime, "site": Site, "step": Step, "compile": Compile, "graph": Graph,
    "end": End, "problem": Problem, **EVENTS,
}
EV: dict[type, str] = {cls: ev for ev, cls in RECORDS.items()}


def to_json(record: Any) -> dict[str, Any]:
    """``record`` as the JSON object of its line: ``ev`` and its fields (nested models stay
    objects; the one JSON writer, ``_json``, turns them into JSON objects)."""
    return {"ev": EV[type(record)], **{f.name: getattr(record, f.name) for f in _fields(type(record))}}


_FIELDS: dict[type, tuple[Any, ...]] = {}


def _fields(cls: type) -> tuple[Any, ...]:
    f = _FIELDS.get(cls)
    if f is None:
        f = _FIELDS[cls] = dataclasses.fields(cls)
    return f


# ---- run.json -------------------------------------------------------------------------------------


@dataclasses.dataclass
class RunManifest:
    """``run.json``: the command the CLI ran traced, and how it ended (``exit_code`` or
    ``signal``; both None while it runs). Version 1 called ``schema_version`` ``schema``."""

    schema_version: int
    command: list[str]
    executable: str = ""
    cwd: str = ""
    capture: str = "auto"
    start_wall: float = 0.0
    torch_trace: Optional[str] = None
    end_wall: Optional[float] = None
    exit_code: Optional[int] = None
    signal: Optional[str] = None


# ---- older versions -----------------------------------------------------------------------------------


def _upgrade_v1(obj: dict[str, Any]) -> dict[str, Any] | None:
    """A version 1 record as version 2's: Dynamo's events were ``ev: "dynamo"`` records with a
    ``what`` and a ``data`` object, and a break's frame was one ``"file:line"``; the rest is
    unchanged. None for a record version 2 has no model of (``debug_read``)."""
    ev = obj.get("ev")
    if ev == "debug_read":
        return None
    if ev != "dynamo":
        return obj
    what, data = obj.get("what"), obj.get("data")
    if not isinstance(data, dict):
        return obj  # fails validation as it is: damage
    cid = obj.get("compile_id") or "-"
    out = {"t": obj.get("t", 0.0), **data}
    if what == "frame":
        return {"ev": "frame_compile", "compile_id": cid, **out}
    if what == "recompile":
        return {"ev": "recompile", "compile_id": cid, **out}
    if what == "break":
        file, _, line = str(data.get("frame", "")).rpartition(":")
        out.pop("frame", None)
        return {"ev": "graph_break", "compile_id": cid, "file": file, "line": int(line) if line.isdigit() else 0, **out}
    if what == "graph":
        out.pop("ended_by_break", None)
        return {"ev": "dynamo_graph", "compile_id": cid, **out}
    if what == "aot":
        return {"ev": "aot_graph", "compile_id": cid, **out}
    if what == "bridge":
        return {"ev": "bridge", "bridge": 0, "compile_id": obj.get("compile_id"), **out}
    if what == "xla_compile":
        return {"ev": "xla_compile", "compile_id": obj.get("compile_id"), **out}
    return obj


# major -> how its records become this version's (None: they are this version's).
READS: dict[int, Callable[[dict[str, Any]], dict[str, Any] | None] | None] = {1: _upgrade_v1, SCHEMA_VERSION: None}
