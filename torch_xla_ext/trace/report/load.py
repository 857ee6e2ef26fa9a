"""Reading a trace directory back: every rank file, ``run.json`` and the start-up errors, as
untrusted input.

Each line of a rank file is parsed as JSON and validated against the model its ``ev`` names
(``trace.schema.RECORDS``, through ``torch_xla_ext._validation``); the typed value is what the
report reads. A file is read up to its first damaged line (not JSON, a record that does not
validate, a last line without its newline: a process killed while writing it), and
:attr:`RankTrace.damage` names that line and what is wrong with it; everything before it is kept.
A file whose first record is not its header, or of a schema major this torch_xla_ext does not read
(``schema.READS``: a newer one), is refused with a :class:`~torch_xla_ext.trace.schema.TraceError`
naming it, its version, ours and what to do; an older major is upgraded as it is read, and a
newer minor's records of a kind this reader does not know are skipped (:attr:`RankTrace.skipped`).
What torch_xla wrote to its analysis file after the last record read into the rank file (a
process killed between a compile and its next sync) is read too (:attr:`RankTrace.unrecorded`).
"""

from __future__ import annotations

import collections
import dataclasses
import glob
import json
import os
from typing import Any, Optional, TypeVar

from torch_xla_ext import _validation
from torch_xla_ext._compat import xla_debug
from torch_xla_ext.trace import startup
from torch_xla_ext.trace.schema import (READS, RECORDS, SCHEMA_MINOR, SCHEMA_VERSION, Compile, End, Graph, Header,
                                        Problem, RunManifest, Runtime, Site, Step, TraceError, version_text)

__all__ = ["RankTrace", "StartupError", "load_dir", "load_file", "load_run", "rank_files", "startup_errors"]

_MAX_LINE = 64 << 20
R = TypeVar("R")


@dataclasses.dataclass
class RankTrace:
    """One rank file, read: its records by model (:meth:`of`), and the common ones by name."""

    path: str
    header: Header
    runtime: Runtime = dataclasses.field(default_factory=lambda: Runtime(t=0.0))
    sites: dict[int, Site] = dataclasses.field(default_factory=dict)
    graphs: dict[int, Graph] = dataclasses.field(default_factory=dict)
    end: Optional[End] = None
    damage: Optional[str] = None
    records: int = 0  # lines read
    skipped: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # ev -> lines of unknown kinds
    debug_offset: int = 0
    unrecorded: list[Any] = dataclasses.field(default_factory=list)  # _compat.xla_debug entries
    by_model: dict[type, list[Any]] = dataclasses.field(default_factory=lambda: collections.defaultdict(list))

    def of(self, model: type[R]) -> list[R]:
        """The records of ``model`` (a class of ``schema.RECORDS``), in file order."""
        return self.by_model.get(model, [])

    @property
    def steps(self) -> list[Step]:
        return self.of(Step)

    @property
    def compiles(self) -> list[Compile]:
        return self.of(Compile)

    @property
    def problems(self) -> list[Problem]:
        return self.of(Problem)

    @property
    def rank(self) -> int | None:
        return self.header.rank

    @property
    def key(self) -> Any:
        """The rank, else the label (a process without a rank)."""
        return self.rank if self.rank is not None else self.label

    @property
    def label(self) -> str:
        return f"rank {self.rank}" if self.rank is not None else f"pid {self.header.pid}"

    @property
    def last_step(self) -> int:
        return self.steps[-1].n if self.steps else 0

    def site(self, sid: int) -> str:
        s = self.sites.get(sid)
        return f"{s.file}:{s.line}" if s else ""


@dataclasses.dataclass
class StartupError:
    """A process whose recorder did not start (``startup-error-<pid>.txt``): what it said."""

    pid: int
    file: str
    text: str


def rank_files(directory: str) -> list[str]:
    """The rank files of a trace directory, in rank order (then by name)."""
    files = glob.glob(os.path.join(directory, "rank-*.jsonl")) + glob.glob(os.path.join(directory, "proc-*.jsonl"))

    def key(p: str) -> tuple[int, int, str]:
        name = os.path.basename(p)
        head = name.split(".")[0]
        if head.startswith("rank-") and head[5:].isdigit():
            return (0, int(head[5:]), name)
        return (1, 0, name)

    return sorted(files, key=key)


def load_dir(directory: str) -> list[RankTrace]:
    """Every rank file of ``directory``; a directory without any is a TraceError (naming the
    start-up errors, when processes left them)."""
    if not os.path.isdir(directory):
        raise TraceError(f"{directory}: not a directory")
    files = rank_files(directory)
    if not files:
        errors = startup_errors(directory)
        why = (f"the recorder did not start in {len(errors)} process(es): "
               + "; ".join(f"pid {e.pid}: {e.text.splitlines()[0] if e.text else '(empty)'}" for e in errors[:3])
               if errors else "nothing was traced there, or no traced process imported torch_xla or Dynamo")
        raise TraceError(f"{directory}: no rank files (rank-*.jsonl, proc-*.jsonl): {why}")
    return [load_file(f) for f in files]


def startup_errors(directory: str) -> list[StartupError]:
    """What ``startup-error-<pid>.txt`` files say (a process whose recorder did not start), by pid."""
    out = []
    for path in sorted(glob.glob(os.path.join(directory, startup.STARTUP_ERROR.format(pid="*")))):
        name = os.path.basename(path)
        pid = name.removeprefix("startup-error-").removesuffix(".txt")
        try:
            with open(path, "rb") as f:
                text = f.read(1 << 16).decode("utf-8", "replace").strip()
        except OSError as e:
            text = f"(unreadable: {e.strerror or e})"
        out.append(StartupError(pid=int(pid) if pid.isdigit() else -1, file=name, text=text))
    return out


def load_run(directory: str) -> tuple[RunManifest | None, str | None]:
    """``run.json`` of the directory, validated (None when there is none), and what is wrong with
    it when it cannot be read (the report then goes on without it and says so)."""
    path = os.path.join(directory, "run.json")
    if not os.path.isfile(path):
        return None, None
    try:
        with open(path, "rb") as f:
            obj = json.loads(f.read(_MAX_LINE).decode("utf-8"))
        if isinstance(obj, dict) and "schema" in obj and "schema_version" not in obj:  # version 1
            obj = {"schema_version": obj["schema"], **{k: v for k, v in obj.items() if k != "schema"}}
        if isinstance(obj, dict) and isinstance(obj.get("schema_version"), int) and obj["schema_version"] not in READS:
            raise TraceError(f"{path}: run.json schema version {obj['schema_version']}, {_newer(obj['schema_version'])}")
        return _validation.validate(RunManifest, obj, TraceError, path), None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        return None, f"{path}: not readable JSON ({e})"
    except TraceError as e:
        return None, str(e)


def _newer(major: int) -> str:
    known = ", ".join(version_text(v) for v in sorted(READS))
    return (f"this torch_xla_ext reads versions {known} (up to {version_text(SCHEMA_VERSION, SCHEMA_MINOR)}): "
            + ("render it with the torch_xla_ext that wrote it, or a newer one (pip install -U torch-xla-ext)"
               if major > SCHEMA_VERSION else "it is not a version any torch_xla_ext wrote"))


def load_file(path: str) -> RankTrace:
    """One rank file (see the module)."""
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    trace: RankTrace | None = None
    upgrade = None
    newer_minor = False
    for i, raw in enumerate(lines):
        n = i + 1
        last = i == len(lines) - 1
        if last and not raw:
            break
        where = f"{os.path.basename(path)} line {n}"
        if last:
            damage = f"line {n} is cut short ({len(raw)} bytes, no end of line): the process stopped while writing it"
            if trace is None:
                raise TraceError(f"{path}: {damage}")
            trace.damage = damage
            break
        obj: Any = None
        damage = None
        if len(raw) > _MAX_LINE:
            damage = f"line {n} is {len(raw)} bytes, more than a record can be"
        else:
            try:
                obj = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                damage = f"line {n} is not JSON ({e})"
        if damage is None and not isinstance(obj, dict):
            damage = f"line {n} is not a JSON object"
        if damage is None and trace is None:
            upgrade, newer_minor = _check_header(path, obj)
        if damage is None and upgrade is not None:
            obj = upgrade(obj)
            if obj is None:  # a record of the old version that this one has no model of
                trace.records = n  # type: ignore[union-attr]
                continue
        record = None
        if damage is None:
            kind = obj.get("ev")
            model = RECORDS.get(kind) if isinstance(kind, str) else None
            if model is None:
                if newer_minor and trace is not None and isinstance(kind, str):
                    trace.skipped[kind] += 1  # a newer writer's record kind: skipped, not damage
                    trace.records = n
                    continue
                damage = f"line {n} has an unknown record kind ev={kind!r}"
            else:
                try:
                    record = _validation.validate(model, obj, TraceError, where)
                except TraceError as e:
                    damage = f"line {n}: " + str(e).removeprefix(where + ": ")
        if damage is not None:
            if trace is None:
                raise TraceError(f"{path}: {damage}")
            trace.damage = damage
            break
        if trace is None:
            if not isinstance(record, Header):
                raise TraceError(f"{path}: line 1 is a {obj['ev']!r} record, not the file's header: not a rank file")
            trace = RankTrace(path=path, header=record)
        else:
            _add(trace, record)
        trace.records = n
    if trace is None:
        raise TraceError(f"{path}: empty: the process stopped before its first record")
    _read_unrecorded(trace)
    return trace


def _check_header(path: str, obj: dict[str, Any]) -> tuple[Any, bool]:
    """(the upgrade of this file's records, whether it is a newer minor of our major); raises
    TraceError for a file this reader does not read."""
    if obj.get("ev") != "header":
        return None, False  # refused as "not a rank file" once validated
    major, minor = obj.get("schema_version"), obj.get("schema_minor", 0)
    if not isinstance(major, int) or not isinstance(minor, int):
        raise TraceError(f"{path}: the header's schema_version {major!r} is not a version number: not a rank file")
    if major not in READS:
        raise TraceError(f"{path}: rank file schema version {version_text(major, minor)}, {_newer(major)}")
    return READS[major], major == SCHEMA_VERSION and minor > SCHEMA_MINOR


def _add(trace: RankTrace, record: Any) -> None:
    offset = getattr(record, "debug_offset", None)
    if isinstance(offset, int):
        trace.debug_offset = offset
    if isinstance(record, Runtime):
        trace.runtime = record
    elif isinstance(record, Site):
        trace.sites[record.id] = record
    elif isinstance(record, Graph):
        trace.graphs[record.k] = record
    elif isinstance(record, End):
        trace.end = record
    trace.by_model[type(record)].append(record)


def _read_unrecorded(trace: RankTrace) -> None:
    """torch_xla's analysis written after the last record that read it: compiles of a process
    that stopped before its next step marker (or its exit)."""
    path = trace.runtime.debug_file
    if trace.end is not None or not path or not os.path.isfile(path):
        return
    if os.path.dirname(os.path.dirname(path)) != os.path.dirname(trace.path):
        # The trace was moved: the analysis file is next to the rank file if it came along.
        path = os.path.join(os.path.dirname(trace.path), os.path.basename(os.path.dirname(path)), os.path.basename(path))
        if not os.path.isfile(path):
            return
    with open(path, "rb") as f:
        f.seek(trace.debug_offset)
        text = f.read(_MAX_LINE).decode("utf-8", "replace")
    entries, _ = xla_debug.parse(text)
    trace.unrecorded = entries
