"""The report of a trace directory (``report/model.py``'s :class:`~.model.Report`, what
``report.json`` holds; schema in docs/trace.md), built from the typed records ``load.py`` read: every compile of every rank with
why, the sites that compile, where the script syncs, each rank's Dynamo record, how each rank
ended, the processes whose recorder did not start, and the ranks that diverge.

Each figure names the upstream record it equals (``ORACLES``): torch_xla's ``CompileTime``
metric and ``PT_XLA_DEBUG_LEVEL`` analysis for compiles, Dynamo's counters, structured trace and
``explain`` for the Dynamo figures (``_dynamo_events.DYNAMO_FIGURES``, the graph-break ledger's
names).

The compile rows come from :data:`COMPILE_SOURCES`: one function per frontend that turns a rank's
records into :class:`~.model.CompileRow` objects (``kind``, the ``trigger`` with its ``site`` and
``function``, ``ms``, ``changed``, ``advice``...). The sections after it
(sites, the steady state, the summary, divergence) read only those rows, so a new frontend's
compile record is one more source here, not a branch in each section.
"""

from __future__ import annotations

import collections
import dataclasses
import os
from typing import Any, Callable

from torch_xla_ext._dynamo_events import (DYNAMO_FIGURES, AotGraph, BridgeExtraction, DynamoGraph, FrameCompile,
                                         GraphBreak, Recompile, XlaCompile)
from torch_xla_ext.trace import advice as _advice
from torch_xla_ext.trace import frames as _frames
from torch_xla_ext.trace import graphs as _graphs
from torch_xla_ext.trace.report import ranks as _ranks
from torch_xla_ext.trace.report import render
from torch_xla_ext.trace.report.load import RankTrace, StartupError
from torch_xla_ext.trace.report.model import CompileRow, DynamoSection, RankRow, Report, SiteRow, SyncPoint
from torch_xla_ext.trace.schema import SCHEMA_VERSION, Compile, RunManifest, TraceError

__all__ = ["COMPILE_SOURCES", "DYNAMO_FIGURES", "ORACLES", "build"]

REPORT_SCHEMA = "torch_xla_ext.trace.report"
EVERY_STEP_MIN = 3  # compiles in a row at a site before it is flagged as compiling every step
_DYNAMO_KINDS = ("dynamo", "dynamo_inputs", "dynamo_run")

ORACLES = {
    "compiles": "torch_xla's CompileTime metric (samples) and PT_XLA_DEBUG_LEVEL=2's Compilation Analysis blocks",
    "graph_hash": "PT_XLA_DEBUG_LEVEL's 'Graph Hash' of the same compile",
}


def build(traces: list[RankTrace], run: RunManifest | None = None, directory: str = "",
          startup: list[StartupError] | None = None, problems: list[str] | None = None) -> Report:
    if not traces:
        raise TraceError(f"{directory or 'trace'}: no rank files to report on")
    compiles: list[CompileRow] = []
    ranks: list[RankRow] = []
    sites: list[SiteRow] = []
    syncs: list[SyncPoint] = []
    dynamo: list[DynamoSection] = []
    for t in traces:
        rc = [row for source in COMPILE_SOURCES for row in source(t)]
        compiles.extend(rc)
        dyn = _dynamo(t)
        if dyn.compile_ids or any(dyn.figures.values()):
            dynamo.append(dyn)
        sites.extend(_sites(t, rc))
        syncs.extend(_sync_points(t))
        ranks.append(_rank(t, rc, run))
    report = Report(schema=REPORT_SCHEMA, version=SCHEMA_VERSION, directory=directory,
                    command=run.command if run is not None else None,
                    exit=None if run is None else {"code": run.exit_code, "signal": run.signal},
                    ranks=ranks, compiles=compiles, sites=sites, sync_points=syncs, dynamo=dynamo,
                    divergence=_ranks.divergence(traces), oracles=dict(ORACLES),
                    dynamo_figures=[{"key": k, "label": label, "oracle": o} for k, label, o in DYNAMO_FIGURES],
                    startup_errors=list(startup or []), problems=list(problems or []))
    report.summary = render.summary_lines(report)
    return report


# ---- compiles ---------------------------------------------------------------------------------------


def _torch_xla_compiles(t: RankTrace) -> list[CompileRow]:
    """torch_xla's compiles (lazy, and the openxla bridge's), joined with the Dynamo compile that
    led to each."""
    # The bridge's compiles are torch_xla's compiles of kind "dynamo" (the bridge keys its cache by
    # another hash than the one torch_xla's analysis prints, so they join by CompileTime's count).
    bridge = t.of(XlaCompile)
    recompile_reason = {r.compile_id: r.reason for r in t.of(Recompile)}
    frame_of = {f.compile_id: f.frame for f in t.of(FrameCompile)}
    by_k = {c.k: c for c in t.compiles}
    records = list(t.compiles)
    k = max((c.k for c in t.compiles), default=0)
    for e in t.unrecorded:
        if e.kind != "compile":
            continue
        k += 1
        trig = _frames.classify(e.frames, e.cause)
        trig.cause, trig.frames = e.cause, _frames.frame_strings(e.frames)
        records.append(Compile(k=k, step=t.last_step + 1, t=0.0, graph_hash=e.graph_hash, trigger=trig,
                               inputs=e.inputs, outputs=e.outputs, recovered=True))
    # Each bridge compile carries CompileTime's count once it compiled: the ordinal of the lazy
    # half's record of the same compile (the first, where a warm-up compiled nothing and repeats
    # the count). Records without ordinals (an older writer) join in order.
    by_ordinal: dict[int, XlaCompile] = {}
    for b in bridge:
        if b.ordinal is not None:
            by_ordinal.setdefault(b.ordinal, b)
    in_order = iter([b for b in bridge if b.ordinal is None])
    out = []
    for c in records:
        joined = None
        if c.trigger.kind == "dynamo":
            joined = by_ordinal.get(c.ordinal) if c.ordinal in by_ordinal else next(in_order, None)
        out.append(_compile_row(t, c, by_k, joined, recompile_reason, frame_of))
    return out


def _compile_row(t: RankTrace, c: Compile, by_k: dict[int, Compile], bridge: XlaCompile | None,
                 recompile_reason: dict[str, str], frame_of: dict[str, str]) -> CompileRow:
    trig = dataclasses.replace(c.trigger)
    dynamo_kind = trig.kind in _DYNAMO_KINDS
    cid = c.compile_id or (bridge.compile_id if bridge is not None else None)
    if dynamo_kind and not trig.site:
        # Compiled where no frame of the user's is on the stack (a backward graph, on autograd's
        # thread): the frame Dynamo compiled it from.
        trig.site = frame_of.get(cid or "", "")
        if not trig.site:
            trig.function = "(the backward pass: no Python frame of the user's)"
    changed = list(c.changed)
    advice = c.advice
    if dynamo_kind and cid:
        reason = recompile_reason.get(cid)
        if reason:
            changed.insert(0, {"what": "guard", "compile_id": cid, "reason": reason})
        advice = advice or _advice.dynamo(reason)
    # What the user can act on leads; what follows from it (a constant XLA made with no line of
    # the user's) is kept, marked, and left out of the summary.
    changed = [dict(x, actionable=_graphs.actionable(x, _frames.is_library))
               for x in _graphs.rank_changes(changed, _frames.is_library)]
    prev = by_k.get(c.previous) if c.previous is not None else None
    return CompileRow(rank=t.rank, k=c.k, step=c.step, kind="dynamo" if dynamo_kind else "lazy",
                      graph_hash=c.graph_hash, trigger=trig, ms=c.ms, inputs=c.inputs, outputs=c.outputs,
                      compile_id=cid, changed=changed, previous_step=prev.step if prev else None,
                      previous_hash=prev.graph_hash if prev else None, advice=advice, captured=c.captured,
                      recovered=c.recovered, replica=c.replica,
                      bridge_hash=bridge.graph_hash if bridge is not None else None)


# One function per frontend: a rank's records -> its rows of ``compiles`` (see the module). A new
# frontend's compile record (a JAX compile of a jitted function: kind "jax", its trigger's site the
# user's call site and function the jitted function) adds its function here.
COMPILE_SOURCES: tuple[Callable[[RankTrace], list[CompileRow]], ...] = (_torch_xla_compiles,)


# ---- sites and sync points ------------------------------------------------------------------------------


def _sites(t: RankTrace, compiles: list[CompileRow]) -> list[SiteRow]:
    runs: dict[tuple[str, str], list[int]] = collections.defaultdict(list)
    for s in t.steps:
        runs[(s.kind, t.site(s.site))].append(s.n)
        for kind, sid, _ in s.executions:
            if kind == "host_read":
                runs[("host_read", t.site(sid))].append(s.n)
    groups: dict[tuple[str, str], list[CompileRow]] = collections.defaultdict(list)
    for c in compiles:
        groups[(c.trigger.kind, c.trigger.site)].append(c)
    out = []
    for (kind, site), cs in groups.items():
        steps = sorted({c.step for c in cs})
        ran = sorted(set(runs.get((kind, site), [])) | set(steps))
        tail = ran[-EVERY_STEP_MIN:]
        every = len(steps) >= EVERY_STEP_MIN and all(s in steps for s in tail) and \
            (len(ran) <= len(steps) + 1 or ran[-1] in steps)
        first = cs[0].trigger
        out.append(SiteRow(rank=t.rank, kind=kind, site=site, op=first.op, function=first.function, code=first.code,
                           compiles=len(cs), graphs=len({c.graph_hash for c in cs}), steps_run=len(ran),
                           first_step=steps[0], last_step=steps[-1], every_step=every,
                           advice=("Compiles at every step it runs: its graph changes each step (see what changed); "
                                   "the run will not reach a steady state." if every else "")))
    out.sort(key=lambda r: (-r.compiles, r.rank if r.rank is not None else -1))
    return out


def _sync_points(t: RankTrace) -> list[SyncPoint]:
    """Where the script makes torch_xla run graphs: step markers and host reads, with how many
    executions and in how many steps (from torch_xla's execution analysis)."""
    rows: dict[tuple[str, str], SyncPoint] = {}
    for s in t.steps:
        seen = set()
        if not s.executions:
            key = (s.kind, t.site(s.site))
            r = rows.setdefault(key, _sync_row(t, key, s.site))
            r.markers += 1
            continue
        for kind, sid, _ in s.executions:
            key = (kind, t.site(sid))
            r = rows.setdefault(key, _sync_row(t, key, sid))
            r.executions += 1
            if key not in seen:
                r.steps += 1
                seen.add(key)
        key = (s.kind, t.site(s.site))
        rows.setdefault(key, _sync_row(t, key, s.site)).markers += 1
    out = list(rows.values())
    out.sort(key=lambda r: (-r.executions, -r.markers))
    return out


def _sync_row(t: RankTrace, key: tuple[str, str], sid: int) -> SyncPoint:
    site = t.sites.get(sid)
    code = site.code if site is not None else ""
    op = ""
    if key[0] == "host_read":
        op = next((name for name, rx in _frames.HOST_READ_OPS if rx.search(code)), "")
    return SyncPoint(rank=t.rank, kind=key[0], site=key[1], code=code, op=op)


# ---- Dynamo -----------------------------------------------------------------------------------------------


def _dynamo(t: RankTrace) -> DynamoSection:
    cids: dict[str, dict[str, Any]] = {}

    def entry(cid: str | None) -> dict[str, Any]:
        cid = cid or "-"
        return cids.setdefault(cid, {"compile_id": cid, "name": "", "frame": "", "ms": None, "error": None,
                                     "recompile_reason": None, "breaks": [], "graphs": [], "aot": [], "bridges": []})

    figures: dict[str, Any] = {k: 0 for k, _, _ in DYNAMO_FIGURES}
    figures["aot_graphs"] = {}
    figures["fallback_nodes"] = {}
    breaks: dict[tuple[str, str], dict[str, Any]] = {}
    for f in t.of(FrameCompile):
        figures["dynamo_compiles"] += 1
        entry(f.compile_id).update(name=f.name, frame=f.frame, ms=f.ms, error=f.error)
    for r in t.of(Recompile):
        figures["recompiles"] += 1
        entry(r.compile_id)["recompile_reason"] = r.reason
    for b in t.of(GraphBreak):
        figures["logged_breaks"] += int(b.logged)
        figures["counted_breaks"] += int(b.counted)
        entry(b.compile_id)["breaks"].append({"gb_type": b.gb_type, "gb_id": b.gb_id, "frame": b.frame,
                                              "origin": b.origin, "counted": b.counted, "split_at": b.split_at})
        row = breaks.setdefault((b.gb_type, b.frame), {
            "gb_type": b.gb_type, "gb_id": b.gb_id, "frame": b.frame, "function": b.function,
            "explanation": b.explanation, "hints": list(b.hints), "doc": b.doc, "logged": 0, "counted": 0,
            "inherited": 0, "compile_ids": []})
        row["logged"] += int(b.logged)
        row["counted"] += int(b.counted)
        row["inherited"] += int(not b.logged)
        row["compile_ids"].append(b.compile_id)
    for g in t.of(DynamoGraph):
        figures["fx_graphs"] += 1
        figures["graphs_ended_by_break"] += int(g.ended_by_break)
        entry(g.compile_id)["graphs"].append({"nodes": g.nodes, "ops": g.ops, "ended_by": g.ended_by})
    for a in t.of(AotGraph):
        figures["aot_graphs"][a.kind] = figures["aot_graphs"].get(a.kind, 0) + 1
        entry(a.compile_id)["aot"].append({"name": a.name, "kind": a.kind, "nodes": a.nodes})
    for x in t.of(BridgeExtraction):
        figures["xla_partitions"] += len(x.partitions)
        for op in x.fallback_nodes:
            figures["fallback_nodes"][op] = figures["fallback_nodes"].get(op, 0) + 1
        entry(x.compile_id)["bridges"].append({
            "aot_name": x.aot_name, "partitions": [dataclasses.asdict(p) for p in x.partitions],
            "fallback_nodes": list(x.fallback_nodes), "ms": x.ms, "error": x.error})
    for e in cids.values():
        e["advice"] = _advice.dynamo(e["recompile_reason"], len(e["breaks"]))
    return DynamoSection(rank=t.rank, figures=figures, compile_ids=list(cids.values()),
                         breaks=sorted(breaks.values(), key=lambda b: -b["logged"]))


# ---- ranks --------------------------------------------------------------------------------------------------


def _rank(t: RankTrace, compiles: list[CompileRow], run: RunManifest | None) -> RankRow:
    last = t.last_step
    k = max((c.step for c in compiles), default=0)
    if not t.steps:
        steady = ""
    elif k < last:
        steady = f"no new graphs after step {k} ({last - k} more steps reused compiled graphs)" if k else \
            f"no compiles in its {last} steps"
    else:
        steady = f"still compiling at its last step ({last})"
    end = t.end
    ex = end.exception if end is not None else None
    if ex is not None:
        first = ex.message.splitlines()[0][:200] if ex.message else ""
        stopped = f"raised {ex.type}: {first}" + (f" at {ex.site}" if ex.site else "") + f", after step {last}"
    elif end is not None:
        stopped = f"ended normally after step {last}"
    else:
        why = "killed (SIGKILL, the OOM killer), crashed in native code, or still running"
        if run is not None and run.signal:
            why = f"the command ended by {run.signal}"
        stopped = f"stopped after step {last} without an end record: {why}"
    if t.damage:
        stopped += f"; {t.damage}"
    notes = list(t.runtime.notes)
    if t.skipped:
        notes.append("records of kinds this torch_xla_ext does not know (a newer writer's) skipped: "
                     + ", ".join(f"{n} {ev}" for ev, n in sorted(t.skipped.items())))
    ms = sum(c.ms for c in compiles if c.ms is not None)
    return RankRow(rank=t.rank, label=t.label, file=os.path.basename(t.path), host=t.header.host, pid=t.header.pid,
                   world_size=t.header.world_size, steps=last, ended=end is not None, exception=ex, damage=t.damage,
                   stopped=stopped, compiles=len(compiles), compile_ms=round(ms, 3),
                   torch_xla_compile_count=end.compile_time_count if end is not None else None,
                   compile_analysis=t.runtime.compile_analysis, capture=t.runtime.capture, notes=notes,
                   problems=[f"{p.where}: {p.message}" for p in t.problems][:20], steady=steady, last_compile_step=k,
                   unrecorded_compiles=sum(1 for e in t.unrecorded if e.kind == "compile"))
