"""The ledger's figures in torch's structured trace (``TORCH_TRACE``), where tlparse shows them.

tlparse lists Dynamo's compile ids, graph breaks and guards of a ``backend="openxla"`` run, but
nothing of what happens after Dynamo hands the graph over. With a trace being written,
``account()`` adds, when its (outermost) region closes:
  * under each Dynamo compile id of the region, an artifact ``torch_xla_ext_xla_graphs``: that
    compile's Dynamo graphs, the AOT graphs made of them, the bridge's partitions and CPU-fallback
    nodes, each partition's XLA graph hash with its compiles, compile ms, executions and execute
    ms (tlparse shows it as ``[1/0] torch_xla_ext_xla_graphs_<k>.json``);
  * once, a run-level ``torch_xla_ext_graph_breaks_summary``: the report's figures, per-hash
    table, fallback ops and the compile ids that got an artifact (tlparse files artifacts written
    outside any compile under ``-_-_-_-``).
  * the region's timeline as Chrome trace events (``chromium_event`` records), which tlparse
    puts in its ``chromium_events.json`` next to Dynamo's own compile phases: one Perfetto view
    of Dynamo's compile, the bridge's extraction, XLA's compiles and every execution, each slice
    with ``args.compile_id`` as Dynamo's own carry it.
The bridge extracts and XLA runs a graph after Dynamo's compile has ended, so the artifacts are
written with the compile id passed explicitly (``_compat.trace_log``).

Example (shell):
    TORCH_TRACE=/tmp/tr python train.py          # train.py: with graph_breaks.account(): ...
    tlparse /tmp/tr/dedicated_log_torch_trace_*.log -o tl_out   # several ranks: tlparse /tmp/tr --all-ranks-html
"""

from __future__ import annotations

from typing import Any

from torch_xla_ext._compat import trace_log
from torch_xla_ext.graph_breaks.report import GraphBreakReport

__all__ = ["COMPILE_ARTIFACT", "SUMMARY_ARTIFACT", "SCHEMA", "CHROMIUM_CAT", "chromium_events", "compile_artifacts",
           "summary", "emit"]

COMPILE_ARTIFACT = "torch_xla_ext_xla_graphs"
SUMMARY_ARTIFACT = "torch_xla_ext_graph_breaks_summary"
SCHEMA = "torch_xla_ext.graph_breaks.tlparse/1"
CHROMIUM_CAT = "torch_xla_ext"  # the `cat` of our chromium events (Dynamo's are "dynamo_timed")
# Dynamo's chromium events are pid 0, tid 0; ours go on threads of their own, one per track.
_TID0 = 100


def _is_compile_id(cid: Any) -> bool:
    return isinstance(cid, str) and cid not in ("", "-", "None")


def _partition(p: dict[str, Any], per_hash: dict[str, dict[str, Any]]) -> dict[str, Any]:
    h = per_hash.get(p["graph_hash"], {})
    return {"graph_hash": p["graph_hash"], "nodes": p["nodes"], "compiles": h.get("compiles", 0),
            "compile_ms": round(h.get("compile_ms", 0.0), 3), "executions": h.get("executions", 0),
            "dispatch_ms": round(h.get("dispatch_ms", 0.0), 3)}


def _bridge(b: dict[str, Any], per_hash: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {"extract_ms": None if b.get("ms") is None else round(b["ms"], 3), "nodes": b.get("nodes"),
            "partitions": [_partition(p, per_hash) for p in b.get("partitions", [])],
            "fallback_nodes": list(b.get("fallback_nodes", [])), "eager_nodes": list(b.get("eager_nodes", [])),
            "error": b.get("error")}


def _aot(a: dict[str, Any], per_hash: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {"name": a["name"], "kind": a["kind"], "nodes": a["nodes"],
            "bridge": [_bridge(b, per_hash) for b in a.get("bridge", [])]}


def _totals(graphs: list[dict[str, Any]]) -> dict[str, Any]:
    parts = [p for g in graphs for a in g["aot"] for b in a["bridge"] for p in b["partitions"]]
    fallback: dict[str, int] = {}
    for g in graphs:
        for a in g["aot"]:
            for b in a["bridge"]:
                for op in b["fallback_nodes"]:
                    fallback[op] = fallback.get(op, 0) + 1
    hashes = list(dict.fromkeys(p["graph_hash"] for p in parts))
    first = {p["graph_hash"]: p for p in parts}  # a hash's figures are the hash's, counted once
    return {"dynamo_graphs": len(graphs), "aot_graphs": sum(len(g["aot"]) for g in graphs),
            "bridge_graphs": sum(len(a["bridge"]) for g in graphs for a in g["aot"]),
            "xla_partitions": len(parts), "fallback_nodes": fallback, "xla_graph_hashes": hashes,
            "xla_compiles": sum(first[h]["compiles"] for h in hashes),
            "compile_ms": round(sum(first[h]["compile_ms"] for h in hashes), 3),
            "executions": sum(first[h]["executions"] for h in hashes),
            "dispatch_ms": round(sum(first[h]["dispatch_ms"] for h in hashes), 3)}


def compile_artifacts(report: GraphBreakReport) -> dict[str, dict[str, Any]]:
    """compile id -> the payload of its ``torch_xla_ext_xla_graphs`` artifact. Graphs compiled
    before the region go under the compile id the bridge recorded for them, when it has one."""
    per_hash = report.per_graph_hash
    out: dict[str, dict[str, Any]] = {}

    def entry(cid: str, c: dict[str, Any] | None) -> dict[str, Any]:
        if cid not in out:
            c = c or {}
            out[cid] = {"schema": SCHEMA, "compile_id": cid, "rank": report.rank.get("rank"), "steps": report.steps,
                        "frame": c.get("frame"), "function": c.get("name"),
                        "dynamo_compile_ms": None if c.get("ms") is None else round(c["ms"], 3),
                        "recompile_reason": c.get("recompile_reason"), "error": c.get("error"),
                        "graph_breaks": list(c.get("breaks", [])), "dynamo_graphs": []}
        return out[cid]

    for c in report.joined:
        if _is_compile_id(c["compile_id"]):
            e = entry(c["compile_id"], c)
            for g in c.get("graphs", []):
                e["dynamo_graphs"].append({"graph": g["graph"], "nodes": g["nodes"], "ops": g["ops"],
                                           "ended_by": g.get("ended_by"),
                                           "aot": [_aot(a, per_hash) for a in g.get("aot", [])]})
            continue
        for g in c.get("graphs", []):  # compiled before the region: placed by the AOT graph's compile id
            for a in g.get("aot", []):
                cid = a.get("compile_id")
                if _is_compile_id(cid):
                    e = entry(cid, {"name": "(compiled before the accounted region)"})
                    e["dynamo_graphs"].append({"graph": None, "nodes": None, "ops": None, "ended_by": None,
                                               "aot": [_aot(a, per_hash)]})
    for e in out.values():
        e["totals"] = _totals(e["dynamo_graphs"])
    return out


def summary(report: GraphBreakReport, compile_ids: list[str]) -> dict[str, Any]:
    """The run-level artifact: every figure of the report and where the per-compile ones are."""
    return {"schema": SCHEMA, "rank": dict(report.rank), "steps": report.steps,
            "figures": {name: value for name, value, _ in report.figures()},
            "compile_ids": compile_ids, "per_graph_hash": report.per_graph_hash,
            "fallback_ops": report.fallback_ops, "graph_breaks": report.fx_breaks,
            "recompiles": report.recompile_reasons, "notes": report.notes}


def chromium_events(report: GraphBreakReport, wall0_us: float) -> list[dict[str, Any]]:
    """The report's timeline as Chrome trace events on Dynamo's clock (``wall0_us``: the
    region's start in microseconds of ``time.time_ns()``), one named thread per track."""
    tids: dict[str, int] = {}
    out: list[dict[str, Any]] = []
    for ev in report.timeline:
        tid = tids.get(ev["track"])
        if tid is None:
            tid = tids[ev["track"]] = _TID0 + len(tids)
            out.append({"ph": "M", "name": "thread_name", "pid": 0, "tid": tid,
                        "args": {"name": f"torch_xla_ext: {ev['track']}"}})
        args = dict(ev["args"], **({"replica": ev["replica"]} if ev.get("replica") is not None else {}))
        e = {"name": ev["name"], "cat": f"{CHROMIUM_CAT}.{ev['cat']}", "pid": 0, "tid": tid,
             "ts": round(wall0_us + ev["ts"], 3), "args": args}
        if ev["dur"] > 0:
            e.update(ph="X", dur=ev["dur"])
        else:
            e.update(ph="i", s="t")
        out.append(e)
    return out


def emit(report: GraphBreakReport, wall0_us: float | None = None) -> list[str]:
    """Writes the artifacts of ``report`` into torch's structured trace (nothing when no one reads
    it), and its timeline as chromium events when ``wall0_us`` (the region's start on
    ``time.time_ns()``, in microseconds) is given; returns the compile ids that got an artifact."""
    if not trace_log.active():
        return []
    placed, unplaced = [], {}
    for cid, payload in compile_artifacts(report).items():
        try:
            trace_log.artifact(COMPILE_ARTIFACT, payload, cid)
            placed.append(cid)
        except ValueError:  # not a compile id torch can parse: kept in the summary instead
            unplaced[cid] = payload
    s = summary(report, placed)
    if unplaced:
        s["unplaced"] = unplaced
    trace_log.artifact(SUMMARY_ARTIFACT, s, None)
    if wall0_us is not None:
        for e in chromium_events(report, wall0_us):
            trace_log.chromium_event(e)
    return placed
