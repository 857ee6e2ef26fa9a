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
``function``, ``ms``, ``changed``, ``advice``...); how far a rank got comes from
:data:`STEP_SOURCES` (torch_xla's step markers, or the calls of the rank's most-called compiled
function), as a :class:`Progress`. The sections after them (sites, the steady state, the summary,
divergence, the Perfetto trace) read only those rows and that progress, so a new frontend's
compile record is one more source here, not a branch in each section. Computations compiled op by
op (``CompileRow.eager``) count in the totals and have their own section (``op_by_op``); the JAX
half's findings (a concretization inside a compiled function) theirs (``findings``).
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
from torch_xla_ext.trace.report.model import (CompileRow, DynamoSection, Finding, FunctionRow, OpGroup, RankRow, Report,
                                              SiteRow, SyncPoint)
from torch_xla_ext.trace.schema import (SCHEMA_VERSION, Compile, Concretization, JitCompile, JitFunction, JitSummary,
                                        RunManifest, TraceError, Trigger)

__all__ = ["COMPILE_SOURCES", "DYNAMO_FIGURES", "ORACLES", "STEP_SOURCES", "Progress", "build", "compile_rows",
           "progress"]

REPORT_SCHEMA = "torch_xla_ext.trace.report"
EVERY_STEP_MIN = 3  # compiles in a row at a site before it is flagged as compiling every step
_DYNAMO_KINDS = ("dynamo", "dynamo_inputs", "dynamo_run")

ORACLES = {
    "compiles": "torch_xla's CompileTime metric (samples) and PT_XLA_DEBUG_LEVEL=2's Compilation Analysis blocks; "
                "for JAX, jax_log_compiles' 'Finished XLA compilation of' lines",
    "graph_hash": "PT_XLA_DEBUG_LEVEL's 'Graph Hash' of the same compile; for JAX, a digest of the call's cache key",
    "changed": "for JAX, jax_explain_cache_misses' explanation of the same compile",
}


@dataclasses.dataclass
class Progress:
    """How far one process got, in its own unit: ``count`` steps (torch_xla's step markers) or
    calls (of ``of``, its most-called compiled function); the steps each (trigger kind, site) ran
    in where known (``ran``), how many times it ran where only that is known (``runs``), and what
    ran at each step besides compiles (``executions``, for the divergence of ranks)."""

    unit: str = "step"
    count: int = 0
    of: str = ""
    noun: str = "graphs"  # what a compile makes, in the steady state's words
    reused: str = "compiled graphs"
    ran: dict[tuple[str, str], list[int]] = dataclasses.field(default_factory=dict)
    runs: dict[tuple[str, str], int] = dataclasses.field(default_factory=dict)
    executions: dict[int, list[str]] = dataclasses.field(default_factory=dict)

    def phrase(self, n: int) -> str:
        """"step 3", "call 3 of GPT2LMHeadModel.forward"."""
        return f"{self.unit} {n}" + (f" of {self.of}" if self.of else "")


def build(traces: list[RankTrace], run: RunManifest | None = None, directory: str = "",
          startup: list[StartupError] | None = None, problems: list[str] | None = None) -> Report:
    if not traces:
        raise TraceError(f"{directory or 'trace'}: no rank files to report on")
    compiles: list[CompileRow] = []
    ranks: list[RankRow] = []
    sites: list[SiteRow] = []
    syncs: list[SyncPoint] = []
    dynamo: list[DynamoSection] = []
    functions: list[FunctionRow] = []
    op_by_op: list[OpGroup] = []
    findings: list[Finding] = []
    by_rank: dict[Any, tuple[list[CompileRow], Progress]] = {}
    for t in traces:
        rc = compile_rows(t)
        prog = progress(t)
        by_rank[t.key] = (rc, prog)
        compiles.extend(rc)
        dyn = _dynamo(t)
        if dyn.compile_ids or any(dyn.figures.values()):
            dynamo.append(dyn)
        sites.extend(_sites(t, rc, prog))
        syncs.extend(_sync_points(t))
        ranks.append(_rank(t, rc, run, prog))
        functions.extend(_functions(t))
        op_by_op.extend(_op_by_op(t, rc))
        findings.extend(_findings(t))
    op_by_op.sort(key=lambda g: (-g.compile_ms, g.rank if g.rank is not None else -1))
    report = Report(schema=REPORT_SCHEMA, version=SCHEMA_VERSION, directory=directory,
                    command=run.command if run is not None else None,
                    exit=None if run is None else {"code": run.exit_code, "signal": run.signal},
                    ranks=ranks, compiles=compiles, sites=sites, sync_points=syncs, dynamo=dynamo,
                    divergence=_ranks.divergence(traces, by_rank), oracles=dict(ORACLES),
                    dynamo_figures=[{"key": k, "label": label, "oracle": o} for k, label, o in DYNAMO_FIGURES],
                    startup_errors=list(startup or []), problems=list(problems or []), functions=functions,
                    op_by_op=op_by_op, findings=findings)
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
                      bridge_hash=bridge.graph_hash if bridge is not None else None, t=None if c.recovered else c.t)


def _primary(t: RankTrace) -> tuple[int, str, int] | None:
    """(fn id, name, calls) of the rank's most-called torchax function, whose calls are the JAX
    half's steps: from the exit's counts, else the last compile's (a killed process)."""
    names = {f.fn: f.name for f in t.of(JitFunction)}
    summary = t.of(JitSummary)
    if summary:
        calls = {f.fn: f.calls for f in summary[-1].functions}
    else:
        calls = {}
        for c in t.of(JitCompile):
            for fid, n in c.calls.items():
                calls[int(fid)] = max(calls.get(int(fid), 0), n)
    if not calls:
        return None
    fid = max(calls, key=lambda f: (calls[f], -f))
    return fid, names.get(fid, f"function {fid}"), calls[fid]


def _jax_compiles(t: RankTrace) -> list[CompileRow]:
    """JAX's compiles (``jit_compile``): a jitted function's, named in torch's terms where torchax
    jitted it, and the computations compiled op by op (``eager``). A row's step is its rank's
    (:func:`progress`): the calls of the most-called torchax function so far."""
    primary = _primary(t)
    rows: dict[int, CompileRow] = {}
    for c in t.of(JitCompile):
        step = c.calls.get(str(primary[0]), 0) if primary is not None else 0
        site = t.sites.get(c.site)
        trig = Trigger(kind="jit" if c.kind == "function" else "op", site=t.site(c.site), op=c.op,
                       function=c.function or c.jax_name, code=site.code if site is not None else "")
        prev = rows.get(c.previous) if c.previous is not None else None
        changed = [dict(x, actionable=x.get("what") != "same_signature") for x in c.changed]
        rows[c.k] = CompileRow(rank=t.rank, k=c.k, step=step, kind="jax", graph_hash=c.sig_hash, trigger=trig, ms=c.ms,
                               inputs=len(c.signature) if c.signature else None, changed=changed,
                               previous_step=prev.step if prev is not None else None,
                               previous_hash=prev.graph_hash if prev is not None else None, advice=c.advice,
                               name=c.jax_name, eager=c.kind == "op", call=c.call, t=c.t)
    return list(rows.values())


# One function per frontend: a rank's records -> its rows of ``compiles`` (see the module).
COMPILE_SOURCES: tuple[Callable[[RankTrace], list[CompileRow]], ...] = (_torch_xla_compiles, _jax_compiles)


def compile_rows(t: RankTrace) -> list[CompileRow]:
    """Every compile of one rank, from every frontend's records."""
    return [row for source in COMPILE_SOURCES for row in source(t)]


def _lazy_progress(t: RankTrace) -> Progress | None:
    """torch_xla's steps: the step markers, and the host reads and markers each step ran."""
    if not t.steps:
        return None
    ran: dict[tuple[str, str], list[int]] = collections.defaultdict(list)
    executions: dict[int, list[str]] = collections.defaultdict(list)
    for s in t.steps:
        ran[(s.kind, t.site(s.site))].append(s.n)
        for kind, sid, h in s.executions:
            if kind == "host_read":
                ran[("host_read", t.site(sid))].append(s.n)
            executions[s.n].append(f"x:{kind}:{h}")
    return Progress(unit="step", count=t.last_step, ran=dict(ran), executions=dict(executions))


def _jax_progress(t: RankTrace) -> Progress | None:
    """The JAX half's steps: the calls of the rank's most-called torchax function; the sites of
    its compiles ran at each of them, another function's as often as it was called."""
    primary = _primary(t)
    if primary is None:
        return None
    fid, name, count = primary
    calls = {f.fn: f.calls for s in t.of(JitSummary)[-1:] for f in s.functions}
    ran: dict[tuple[str, str], list[int]] = {}
    runs: dict[tuple[str, str], int] = {}
    for c in t.of(JitCompile):
        if c.kind != "function" or c.fn is None:
            continue
        key = ("jit", t.site(c.site))
        if c.fn == fid:
            ran[key] = list(range(1, count + 1))
        else:
            runs[key] = max(runs.get(key, 0), calls.get(c.fn, c.call or 0))
    return Progress(unit="call", count=count, of=name, noun="compiles", reused="compiled programs", ran=ran, runs=runs)


# One function per frontend: how far a rank got (the first that answers wins).
STEP_SOURCES: tuple[Callable[[RankTrace], Progress | None], ...] = (_lazy_progress, _jax_progress)


def progress(t: RankTrace) -> Progress:
    """How far a rank got (see :class:`Progress`)."""
    return next((p for p in (source(t) for source in STEP_SOURCES) if p is not None), Progress())


# ---- sites and sync points ------------------------------------------------------------------------------


def _sites(t: RankTrace, compiles: list[CompileRow], prog: Progress) -> list[SiteRow]:
    groups: dict[tuple[str, str], list[CompileRow]] = collections.defaultdict(list)
    for c in compiles:
        if not c.eager:  # op by op has its own section
            groups[(c.trigger.kind, c.trigger.site)].append(c)
    out = []
    for (kind, site), cs in groups.items():
        steps = sorted({c.step for c in cs})
        known = (kind, site) in prog.ran or (kind, site) not in prog.runs
        ran = sorted(set(prog.ran.get((kind, site), [])) | set(steps))
        tail = ran[-EVERY_STEP_MIN:]
        every = known and len(steps) >= EVERY_STEP_MIN and all(s in steps for s in tail) and \
            (len(ran) <= len(steps) + 1 or ran[-1] in steps)
        steps_run = len(ran) if known else max(prog.runs[(kind, site)], len(steps))
        # steps that compiled, not compiles: Dynamo compiles several frames of one step
        most = len(steps) >= EVERY_STEP_MIN and 2 * len(steps) > steps_run
        first = cs[0].trigger
        unit = f"{prog.unit}s" if prog.count else "steps"
        advice = ""
        if every:
            advice = (f"Compiles at every {unit[:-1]} it runs: what it compiles changes each time (see what changed); "
                      "the run will not reach a steady state.")
        elif most:
            advice = (f"Compiled on {len(steps)} of the {steps_run} {unit} it ran: see what changed, and make it the "
                      "same on every call.")
        out.append(SiteRow(rank=t.rank, kind=kind, site=site, op=first.op, function=first.function, code=first.code,
                           compiles=len(cs), graphs=len({c.graph_hash for c in cs}), steps_run=steps_run,
                           first_step=steps[0], last_step=steps[-1], every_step=every, advice=advice,
                           most_steps=most))
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


def _rank(t: RankTrace, compiles: list[CompileRow], run: RunManifest | None, prog: Progress) -> RankRow:
    last = prog.count
    k = max((c.step for c in compiles), default=0)
    unit = prog.unit
    if not last:
        steady = ""
    elif k < last:
        steady = (f"no new {prog.noun} after {prog.phrase(k)} ({last - k} more {unit}s reused {prog.reused})"
                  if k else f"no compiles in its {last} {unit}s")
    else:
        steady = f"still compiling at its last {unit} ({last})"
    end = t.end
    ex = end.exception if end is not None else None
    if ex is not None:
        first = ex.message.splitlines()[0][:200] if ex.message else ""
        stopped = f"raised {ex.type}: {first}" + (f" at {ex.site}" if ex.site else "") + f", after {unit} {last}"
    elif end is not None:
        stopped = f"ended normally after {unit} {last}"
    else:
        why = "killed (SIGKILL, the OOM killer), crashed in native code, or still running"
        if run is not None and run.signal:
            why = f"the command ended by {run.signal}"
        stopped = f"stopped after {unit} {last} without an end record: {why}"
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
                   unrecorded_compiles=sum(1 for e in t.unrecorded if e.kind == "compile"),
                   unit=unit + (f" of {prog.of}" if prog.of else ""), op_by_op=sum(1 for c in compiles if c.eager))


# ---- the JAX half's sections ----------------------------------------------------------------------------


def _functions(t: RankTrace) -> list[FunctionRow]:
    """Each torchax function: calls (from the exit's counts), compiles, the steady state."""
    summary = t.of(JitSummary)
    calls = {f.fn: f.calls for f in summary[-1].functions} if summary else {}
    compiles: dict[int, list[JitCompile]] = collections.defaultdict(list)
    for c in t.of(JitCompile):
        if c.fn is not None:
            compiles[c.fn].append(c)
    out = []
    for f in t.of(JitFunction):
        cs = compiles.get(f.fn, [])
        n = calls.get(f.fn) if summary else None
        last = cs[-1].call if cs else None
        if not cs:
            steady = "never compiled (its trace raised)" if t.of(Concretization) else "never compiled"
        elif n is None:
            steady = f"its last compile at call {last}; its calls after that are not known (no end record)"
        elif last is not None and n > last:
            steady = f"no new compiles after call {last} ({n - last} more calls reused compiled programs)"
        else:
            steady = f"still compiling at its last call ({n})"
        out.append(FunctionRow(rank=t.rank, name=f.name, defined=f.defined, jitted_at=t.site(f.site), calls=n,
                               compiles=len(cs), last_compile_call=last, steady=steady))
    return out


def _op_by_op(t: RankTrace, compiles: list[CompileRow]) -> list[OpGroup]:
    """The computations compiled op by op, grouped by (user line, op), with the op's executions
    there (the exit's counts)."""
    entry = {c.k: t.site(c.entry) for c in t.of(JitCompile)}
    summary = t.of(JitSummary)
    executions = {(t.site(o.site), o.op): o.executions for o in summary[-1].ops} if summary else {}
    groups: dict[tuple[str, str], list[CompileRow]] = collections.defaultdict(list)
    for c in compiles:
        if c.eager:
            groups[(c.trigger.site, c.trigger.op)].append(c)
    out = []
    for (site, op), cs in groups.items():
        out.append(OpGroup(rank=t.rank, site=site, op=op, code=cs[0].trigger.code, compiles=len(cs),
                           compile_ms=round(sum(c.ms or 0.0 for c in cs), 3),
                           executions=executions.get((site, op)),  # None: not a torch op, or no end record
                           names=sorted({c.name for c in cs}), entry=entry.get(cs[0].k, ""),
                           first_step=min(c.step for c in cs), last_step=max(c.step for c in cs)))
    return out


def _findings(t: RankTrace) -> list[Finding]:
    out = []
    for c in t.of(Concretization):
        site = t.sites.get(c.site)
        how = f".{c.op}()" if c.op in ("item", "tolist") else (f"{c.op}(...)" if c.op in ("int", "float", "bool") else
                                                                 c.op or "a Python read")
        out.append(Finding(rank=t.rank, kind="concretization", site=t.site(c.site), code=site.code if site else "",
                           op=c.op, function=c.function, call=c.call, call_site=t.site(c.call_site),
                           exception=c.exception, aten_op=c.aten_op,
                           advice=_advice.concretization(how, c.function)))
    return out
