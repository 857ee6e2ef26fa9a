"""The report of a trace directory, as plain data (what ``report.json`` holds; schema in
docs/trace.md): every XLA compile of every rank with why, the sites that compile, where the
script syncs, each rank's Dynamo record, how each rank ended, and the ranks that diverge.

Each figure names the upstream record it equals (``ORACLES``): torch_xla's ``CompileTime``
metric and ``PT_XLA_DEBUG_LEVEL`` analysis for compiles, Dynamo's counters, structured trace and
``explain`` for the Dynamo figures.
"""

from __future__ import annotations

import collections
import os
from typing import Any

from torch_xla_ext import _json
from torch_xla_ext.trace import advice as _advice
from torch_xla_ext.trace import frames as _frames
from torch_xla_ext.trace.report import ranks as _ranks
from torch_xla_ext.trace.report.load import RankTrace, load_dir
from torch_xla_ext.trace.schema import SCHEMA_VERSION, TraceError

__all__ = ["DYNAMO_FIGURES", "ORACLES", "build", "build_dir"]

REPORT_SCHEMA = "torch_xla_ext.trace.report"
EVERY_STEP_MIN = 3  # compiles in a row at a site before it is flagged as compiling every step

ORACLES = {
    "compiles": "torch_xla's CompileTime metric (samples) and PT_XLA_DEBUG_LEVEL=2's Compilation Analysis blocks",
    "graph_hash": "PT_XLA_DEBUG_LEVEL's 'Graph Hash' of the same compile",
}
# (key, label, the upstream record it equals)
DYNAMO_FIGURES = (
    ("frame_compiles", "Dynamo frame compiles (compile ids)", "dynamo_start records of torch's structured trace"),
    ("graphs", "graphs handed to the backend", "counters['stats']['unique_graphs'], explain().graph_count"),
    ("breaks_logged", "graph breaks (logged)", "dynamo_graph_break_reason artifacts (TORCH_LOGS=graph_breaks)"),
    ("breaks_counted", "graph breaks (Dynamo's counter)", "sum(counters['graph_break'].values())"),
    ("graphs_ended_by_break", "graphs ended by a break", "len(explain().break_reasons)"),
    ("recompiles", "recompiles", "TORCH_LOGS=recompiles, compile ids N/1, N/2, ..."),
    ("aot_graphs", "AOT graphs (forward/backward/inference)", "aot_*_graph records of torch's structured trace"),
    ("xla_partitions", "XLA graphs the bridge made", "torch_xla's dynamo_bridge.extract_internal calls (one per partition)"),
    ("fallback_nodes", "CPU-fallback nodes",
     "torch_xla's UnsupportedNodesCollector (the bridge's partitioner); each runs as a CPU fallback, in "
     "executed_fallback_ops() until the next extraction clears torch_xla's counters"),
)


def build_dir(directory: str) -> dict[str, Any]:
    """The report of a trace directory (its rank files and run.json)."""
    traces = load_dir(directory)
    run = None
    path = os.path.join(directory, "run.json")
    if os.path.isfile(path):
        import json

        try:
            with open(path) as f:
                run = json.load(f)
            if not isinstance(run, dict):
                run = None
        except (OSError, ValueError):
            run = None
    return build(traces, run=run, directory=directory)


def build(traces: list[RankTrace], run: dict[str, Any] | None = None, directory: str = "") -> dict[str, Any]:
    if not traces:
        raise TraceError(f"{directory or 'trace'}: no rank files to report on")
    compiles: list[dict[str, Any]] = []
    ranks: list[dict[str, Any]] = []
    sites: list[dict[str, Any]] = []
    syncs: list[dict[str, Any]] = []
    dynamo: list[dict[str, Any]] = []
    for t in traces:
        rc = _compiles(t)
        compiles.extend(rc)
        dyn = _dynamo(t)
        if dyn["compile_ids"] or any(dyn["figures"].values()):
            dynamo.append(dyn)
        sites.extend(_sites(t, rc))
        syncs.extend(_sync_points(t))
        ranks.append(_rank(t, rc, run))
    divergence = _ranks.divergence(traces, compiles)
    report = {"schema": REPORT_SCHEMA, "version": SCHEMA_VERSION, "directory": directory,
              "command": (run or {}).get("command"),
              "exit": None if run is None else {"code": run.get("exit_code"), "signal": run.get("signal")},
              "ranks": ranks, "compiles": compiles, "sites": sites, "sync_points": syncs, "dynamo": dynamo,
              "divergence": divergence, "oracles": dict(ORACLES),
              "dynamo_figures": [{"key": k, "label": label, "oracle": o} for k, label, o in DYNAMO_FIGURES]}
    from torch_xla_ext.trace.report import render

    report["summary"] = render.summary_lines(report)
    return _json.encode(report)


# ---- compiles ---------------------------------------------------------------------------------------


def _compiles(t: RankTrace) -> list[dict[str, Any]]:
    # The bridge's compiles are torch_xla's compiles of kind "dynamo" (the bridge keys its cache by
    # another hash than the one torch_xla's analysis prints, so they join by CompileTime's count).
    bridge = [d for d in t.dynamo if d["what"] == "xla_compile"]
    recompile_reason = {d["compile_id"]: d["data"].get("reason") for d in t.dynamo if d["what"] == "recompile"}
    frame_of = {d["compile_id"]: d["data"].get("frame", "") for d in t.dynamo if d["what"] == "frame"}
    by_k = {c["k"]: c for c in t.compiles}
    records = list(t.compiles)
    last_step = t.steps[-1]["n"] if t.steps else 0
    k = max((c["k"] for c in t.compiles), default=0)
    for e in t.unrecorded:
        if e.kind != "compile":
            continue
        k += 1
        trig = _frames.classify(e.frames, e.cause)
        trig.update(cause=e.cause, frames=_frames.frame_strings(e.frames))
        records.append({"k": k, "step": last_step + 1, "graph_hash": e.graph_hash, "trigger": trig, "ms": None,
                        "inputs": e.inputs, "outputs": e.outputs, "changed": [], "previous": None, "advice": "",
                        "captured": False, "recovered": True})
    # Each bridge compile carries CompileTime's count once it compiled: the ordinal of the lazy
    # half's record of the same compile (the first, where a warm-up compiled nothing and repeats
    # the count). Records without ordinals (an older writer) join in order.
    by_ordinal: dict[int, dict[str, Any]] = {}
    for b in bridge:
        if b["data"].get("ordinal") is not None:
            by_ordinal.setdefault(b["data"]["ordinal"], b)
    in_order = iter([b for b in bridge if b["data"].get("ordinal") is None])
    out = []
    for c in records:
        b = None
        if c["trigger"].get("kind") == "dynamo":
            b = by_ordinal.get(c["ordinal"]) if c.get("ordinal") in by_ordinal else next(in_order, None)
        out.append(_compile_row(t, c, by_k, b, recompile_reason, frame_of))
    return out


def _compile_row(t: RankTrace, c: dict[str, Any], by_k: dict[int, dict[str, Any]], bridge: dict[str, Any] | None,
                 recompile_reason: dict[str, Any], frame_of: dict[str, str]) -> dict[str, Any]:
    trig = dict(c["trigger"])
    dynamo_kind = trig.get("kind") in ("dynamo", "dynamo_inputs", "dynamo_run")
    cid = c.get("compile_id") or (bridge or {}).get("compile_id")
    if dynamo_kind and not trig.get("site"):
        # Compiled where no frame of the user's is on the stack (a backward graph, on autograd's
        # thread): the frame Dynamo compiled it from.
        trig["site"] = frame_of.get(cid or "", "")
        trig.setdefault("function", "")
        if not trig["site"]:
            trig["function"] = "(the backward pass: no Python frame of the user's)"
    changed = list(c.get("changed") or [])
    advice = c.get("advice", "")
    if dynamo_kind and cid:
        reason = recompile_reason.get(cid)
        if reason:
            changed.insert(0, {"what": "guard", "compile_id": cid, "reason": reason})
        advice = advice or _advice.dynamo(reason)
    prev = by_k.get(c.get("previous")) if c.get("previous") is not None else None
    return {"rank": t.rank, "k": c["k"], "step": c["step"], "kind": "dynamo" if dynamo_kind else "lazy",
            "graph_hash": c.get("graph_hash", ""),
            "trigger": {k: trig.get(k, "") for k in ("kind", "site", "op", "function", "code", "cause")},
            "ms": c.get("ms"), "inputs": c.get("inputs"), "outputs": c.get("outputs"), "compile_id": cid,
            "changed": changed, "previous_step": prev["step"] if prev else None,
            "previous_hash": prev.get("graph_hash") if prev else None, "advice": advice,
            "captured": bool(c.get("captured")), "recovered": bool(c.get("recovered")),
            "replica": c.get("replica", 0),
            "bridge_hash": (bridge or {}).get("data", {}).get("graph_hash")}


# ---- sites and sync points ------------------------------------------------------------------------------


def _sites(t: RankTrace, compiles: list[dict[str, Any]]) -> list[dict[str, Any]]:
    runs: dict[tuple[str, str], list[int]] = collections.defaultdict(list)
    for s in t.steps:
        runs[(s["kind"], t.site(s["site"]))].append(s["n"])
        for kind, sid, _ in s.get("executions", []):
            if kind == "host_read":
                runs[("host_read", t.site(sid))].append(s["n"])
    groups: dict[tuple[str, str], list[dict[str, Any]]] = collections.defaultdict(list)
    for c in compiles:
        groups[(c["trigger"]["kind"], c["trigger"]["site"])].append(c)
    out = []
    for (kind, site), cs in groups.items():
        steps = sorted({c["step"] for c in cs})
        ran = sorted(set(runs.get((kind, site), [])) | set(steps))
        tail = ran[-EVERY_STEP_MIN:]
        every = len(steps) >= EVERY_STEP_MIN and all(s in steps for s in tail) and \
            (len(ran) <= len(steps) + 1 or ran[-1] in steps)
        row = {"rank": t.rank, "kind": kind, "site": site, "op": cs[0]["trigger"].get("op", ""),
               "code": cs[0]["trigger"].get("code", ""), "compiles": len(cs),
               "graphs": len({c["graph_hash"] for c in cs}), "steps_run": len(ran), "first_step": steps[0],
               "last_step": steps[-1], "every_step": every}
        row["advice"] = ("Compiles at every step it runs: its graph changes each step (see what changed); the "
                         "run will not reach a steady state." if every else "")
        out.append(row)
    out.sort(key=lambda r: (-r["compiles"], r["rank"] if r["rank"] is not None else -1))
    return out


def _sync_points(t: RankTrace) -> list[dict[str, Any]]:
    """Where the script makes torch_xla run graphs: step markers and host reads, with how many
    executions and in how many steps (from torch_xla's execution analysis)."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for s in t.steps:
        seen = set()
        execs = s.get("executions") or []
        if not execs:
            key = (s["kind"], t.site(s["site"]))
            r = rows.setdefault(key, _sync_row(t, key, s["site"]))
            r["markers"] += 1
            continue
        for kind, sid, _ in execs:
            key = (kind, t.site(sid))
            r = rows.setdefault(key, _sync_row(t, key, sid))
            r["executions"] += 1
            if key not in seen:
                r["steps"] += 1
                seen.add(key)
        key = (s["kind"], t.site(s["site"]))
        rows.setdefault(key, _sync_row(t, key, s["site"]))["markers"] += 1
    out = list(rows.values())
    out.sort(key=lambda r: (-r["executions"], -r["markers"]))
    return out


def _sync_row(t: RankTrace, key: tuple[str, str], sid: int) -> dict[str, Any]:
    site = t.sites.get(sid) or {}
    code = site.get("code", "")
    op = ""
    if key[0] == "host_read":
        op = next((name for name, rx in _frames.HOST_READ_OPS if rx.search(code)), "")
    return {"rank": t.rank, "kind": key[0], "site": key[1], "code": code, "op": op, "executions": 0, "steps": 0,
            "markers": 0}


# ---- Dynamo -----------------------------------------------------------------------------------------------


def _dynamo(t: RankTrace) -> dict[str, Any]:
    cids: dict[str, dict[str, Any]] = {}

    def entry(cid: str | None) -> dict[str, Any]:
        cid = cid or "-"
        return cids.setdefault(cid, {"compile_id": cid, "name": "", "frame": "", "ms": None, "error": None,
                                     "recompile_reason": None, "breaks": [], "graphs": [], "aot": [], "bridges": []})

    figures = {k: 0 for k, _, _ in DYNAMO_FIGURES}
    figures["aot_graphs"] = {}
    figures["fallback_nodes"] = {}
    breaks: dict[tuple[str, str], dict[str, Any]] = {}
    for d in t.dynamo:
        what, data, e = d["what"], d["data"], entry(d.get("compile_id"))
        if what == "frame":
            figures["frame_compiles"] += 1
            e.update(name=data.get("name", ""), frame=data.get("frame", ""), ms=data.get("ms"), error=data.get("error"))
        elif what == "recompile":
            figures["recompiles"] += 1
            e["recompile_reason"] = data.get("reason")
        elif what == "break":
            inherited = data.get("origin") == "inherited"
            if not inherited:
                figures["breaks_logged"] += 1
            figures["breaks_counted"] += int(bool(data.get("counted")))
            e["breaks"].append({k: data.get(k) for k in ("gb_type", "gb_id", "frame", "origin", "counted", "split_at")})
            key = (data.get("gb_type", ""), data.get("frame", ""))
            row = breaks.setdefault(key, {"gb_type": key[0], "gb_id": data.get("gb_id"), "frame": key[1],
                                          "function": data.get("function", ""),
                                          "explanation": data.get("explanation", ""), "hints": data.get("hints", []),
                                          "doc": data.get("doc"), "logged": 0, "counted": 0, "inherited": 0,
                                          "compile_ids": []})
            row["logged"] += int(not inherited)
            row["counted"] += int(bool(data.get("counted")))
            row["inherited"] += int(inherited)
            row["compile_ids"].append(d.get("compile_id"))
        elif what == "graph":
            figures["graphs"] += 1
            figures["graphs_ended_by_break"] += int(bool(data.get("ended_by_break")))
            e["graphs"].append({"nodes": data.get("nodes"), "ops": data.get("ops"), "ended_by": data.get("ended_by")})
        elif what == "aot":
            kind = data.get("kind", "")
            figures["aot_graphs"][kind] = figures["aot_graphs"].get(kind, 0) + 1
            e["aot"].append({"name": data.get("name"), "kind": kind, "nodes": data.get("nodes")})
        elif what == "bridge":
            figures["xla_partitions"] += len(data.get("partitions", []))
            for op in data.get("fallback_nodes", []):
                figures["fallback_nodes"][op] = figures["fallback_nodes"].get(op, 0) + 1
            e["bridges"].append({k: data.get(k) for k in ("aot_name", "partitions", "fallback_nodes", "ms", "error")})
    for e in cids.values():
        e["advice"] = _advice.dynamo(e["recompile_reason"], len(e["breaks"]))
    return {"rank": t.rank, "figures": figures, "compile_ids": list(cids.values()),
            "breaks": sorted(breaks.values(), key=lambda b: -b["logged"])}


# ---- ranks --------------------------------------------------------------------------------------------------


def _rank(t: RankTrace, compiles: list[dict[str, Any]], run: dict[str, Any] | None) -> dict[str, Any]:
    last = t.steps[-1]["n"] if t.steps else 0
    steps_with_compiles = [c["step"] for c in compiles]
    k = max(steps_with_compiles, default=0)
    if not t.steps:
        steady = ""
    elif k < last:
        steady = f"no new graphs after step {k} ({last - k} more steps reused compiled graphs)" if k else \
            f"no compiles in its {last} steps"
    else:
        steady = f"still compiling at its last step ({last})"
    end = t.end
    if end is not None and end.get("exception"):
        ex = end["exception"]
        stopped = (f"raised {ex.get('type')}: {str(ex.get('message', '')).splitlines()[0][:200] if ex.get('message') else ''}"
                   + (f" at {ex['site']}" if ex.get("site") else "") + f", after step {last}")
    elif end is not None:
        stopped = f"ended normally after step {last}"
    else:
        why = "killed (SIGKILL, the OOM killer), crashed in native code, or still running"
        if run is not None and run.get("signal"):
            why = f"the command ended by {run['signal']}"
        stopped = f"stopped after step {last} without an end record: {why}"
    if t.damage:
        stopped += f"; {t.damage}"
    ms = sum(c["ms"] for c in compiles if isinstance(c.get("ms"), (int, float)))
    return {"rank": t.rank, "label": t.label, "file": os.path.basename(t.path), "host": t.header.get("host"),
            "pid": t.header.get("pid"), "world_size": t.header.get("world_size"), "steps": last,
            "ended": end is not None, "exception": end.get("exception") if end else None, "damage": t.damage,
            "stopped": stopped, "compiles": len(compiles), "compile_ms": round(ms, 3),
            "torch_xla_compile_count": end.get("compile_time_count") if end else None,
            "compile_analysis": t.runtime.get("compile_analysis", ""), "capture": t.runtime.get("capture", ""),
            "notes": list(t.runtime.get("notes", [])),
            "problems": [f"{p['where']}: {p['message']}" for p in t.problems][:20], "steady": steady,
            "last_compile_step": k, "unrecorded_compiles": sum(1 for e in t.unrecorded if e.kind == "compile")}
