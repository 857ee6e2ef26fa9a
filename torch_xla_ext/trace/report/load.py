"""Reading a trace directory back: every rank file, as untrusted input.

Each line is parsed as JSON and validated against the record its ``ev`` names
(``trace.schema.RECORDS``, through ``torch_xla_ext._validation``). A file is read up to its first
damaged line (not JSON, a record that does not validate, a last line without its newline: a
process killed while writing it), and :attr:`RankTrace.damage` names that line and what is wrong
with it; everything before it is kept. A file of another schema version, or one whose first
record is not its header, is refused with a :class:`~torch_xla_ext.trace.schema.TraceError`
naming it. What torch_xla wrote to its analysis file after the last record read into the rank
file (a process killed between a compile and its next sync) is read too
(:attr:`RankTrace.unrecorded`).
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
from typing import Any

from torch_xla_ext import _validation
from torch_xla_ext.trace.schema import RECORDS, SCHEMA_VERSION, TraceError

__all__ = ["RankTrace", "load_dir", "load_file", "rank_files"]

_MAX_LINE = 64 << 20


@dataclasses.dataclass
class RankTrace:
    path: str
    header: dict[str, Any]
    runtime: dict[str, Any] = dataclasses.field(default_factory=dict)
    sites: dict[int, dict[str, Any]] = dataclasses.field(default_factory=dict)
    steps: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    compiles: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    graphs: dict[int, dict[str, Any]] = dataclasses.field(default_factory=dict)
    dynamo: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    problems: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    end: dict[str, Any] | None = None
    damage: str | None = None
    records: int = 0
    debug_offset: int = 0
    unrecorded: list[Any] = dataclasses.field(default_factory=list)  # _compat.xla_debug entries

    @property
    def rank(self) -> int | None:
        return self.header.get("rank")

    @property
    def label(self) -> str:
        r = self.rank
        return f"rank {r}" if r is not None else f"pid {self.header.get('pid')}"

    def site(self, sid: int) -> str:
        s = self.sites.get(sid)
        return f"{s['file']}:{s['line']}" if s else ""


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
    """Every rank file of ``directory``; a directory without any is a TraceError."""
    if not os.path.isdir(directory):
        raise TraceError(f"{directory}: not a directory")
    files = rank_files(directory)
    if not files:
        raise TraceError(f"{directory}: no rank files (rank-*.jsonl, proc-*.jsonl): nothing was traced there, or no "
                         "traced process imported torch_xla or Dynamo")
    return [load_file(f) for f in files]


def load_file(path: str) -> RankTrace:
    """One rank file (see the module)."""
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    trace: RankTrace | None = None
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
        if len(raw) > _MAX_LINE:
            damage = f"line {n} is {len(raw)} bytes, more than a record can be"
        else:
            damage = None
            try:
                obj = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                damage = f"line {n} is not JSON ({e})"
        if damage is None and not isinstance(obj, dict):
            damage = f"line {n} is not a JSON object"
        if damage is None:
            kind = obj.get("ev")
            schema = RECORDS.get(kind) if isinstance(kind, str) else None
            if schema is None:
                damage = f"line {n} has an unknown record kind ev={kind!r}"
            else:
                try:
                    _validation.validate(schema, obj, TraceError, where)
                except TraceError as e:
                    damage = str(e).removeprefix(where + ": ")
                    damage = f"line {n}: {damage}"
        if damage is not None:
            if trace is None:
                raise TraceError(f"{path}: {damage}")
            trace.damage = damage
            break
        if trace is None:
            if obj["ev"] != "header":
                raise TraceError(f"{path}: line 1 is a {obj['ev']!r} record, not the file's header: not a rank file")
            if obj["schema_version"] != SCHEMA_VERSION:
                raise TraceError(f"{path}: schema version {obj['schema_version']}, this torch_xla_ext reads version "
                                 f"{SCHEMA_VERSION}")
            trace = RankTrace(path=path, header=obj)
        else:
            _add(trace, obj)
        trace.records = n
    if trace is None:
        raise TraceError(f"{path}: empty: the process stopped before its first record")
    _read_unrecorded(trace)
    return trace


def _add(trace: RankTrace, obj: dict[str, Any]) -> None:
    kind = obj["ev"]
    if "debug_offset" in obj and isinstance(obj["debug_offset"], int):
        trace.debug_offset = obj["debug_offset"]
    if kind == "runtime":
        trace.runtime = obj
    elif kind == "site":
        trace.sites[obj["id"]] = obj
    elif kind == "step":
        trace.steps.append(obj)
    elif kind == "compile":
        trace.compiles.append(obj)
    elif kind == "graph":
        trace.graphs[obj["k"]] = obj
    elif kind == "dynamo":
        trace.dynamo.append(obj)
    elif kind == "problem":
        trace.problems.append(obj)
    elif kind == "end":
        trace.end = obj


def _read_unrecorded(trace: RankTrace) -> None:
    """torch_xla's analysis written after the last record that read it: compiles of a process
    that stopped before its next step marker (or its exit)."""
    from torch_xla_ext._compat import xla_debug

    path = trace.runtime.get("debug_file") or ""
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
