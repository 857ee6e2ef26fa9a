"""``trace.perfetto.json``: the run as Chrome trace events (ui.perfetto.dev, chrome://tracing).

One process per rank file, on one clock (each file's records are milliseconds since its header,
whose wall-clock time places it): a ``steps`` thread with one slice per step (from the step
marker before it to its own), a ``compiles`` thread with each XLA compile (``args``: graph hash,
trigger, site, what changed), a ``dynamo`` thread with Dynamo's frame compiles and bridge
extractions (``args.compile_id`` as tlparse and Dynamo's own events carry it).
"""

from __future__ import annotations

from typing import Any

from torch_xla_ext.trace.report.load import RankTrace
from torch_xla_ext.trace.report.render import change_text

__all__ = ["events"]

_THREADS = ("steps", "compiles", "dynamo")


def events(traces: list[RankTrace]) -> dict[str, Any]:
    wall0 = min(t.header["wall"] for t in traces)
    out: list[dict[str, Any]] = []
    for pid, t in enumerate(traces):
        base = (t.header["wall"] - wall0) * 1e6  # µs
        out.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": t.label}})
        for tid, name in enumerate(_THREADS):
            out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
        prev = 0.0
        for s in t.steps:
            ts = base + prev * 1e3
            out.append({"ph": "X", "name": f"step {s['n']}", "cat": "step", "pid": pid, "tid": 0, "ts": round(ts, 3),
                        "dur": max(round((s["t"] - prev) * 1e3, 3), 1.0),
                        "args": {"marker": s["kind"], "site": t.site(s["site"]), "sync_ms": s["ms"],
                                 "graphs": s["graphs"]}})
            prev = s["t"]
        for c in t.compiles:
            ms = c.get("ms") or 0.0
            out.append({"ph": "X", "name": f"compile {c['graph_hash'][:12]}", "cat": "compile", "pid": pid, "tid": 1,
                        "ts": round(base + (c["t"] - ms) * 1e3, 3), "dur": max(round(ms * 1e3, 3), 1.0),
                        "args": {"step": c["step"], "graph_hash": c["graph_hash"], "trigger": c["trigger"].get("kind"),
                                 "site": c["trigger"].get("site"), "changed": [change_text(x) for x in c.get("changed", [])],
                                 "advice": c.get("advice", "")}})
        for d in t.dynamo:
            if d["what"] not in ("frame", "bridge"):
                continue
            ms = d["data"].get("ms") or 0.0
            name = f"[{d.get('compile_id')}] {d['data'].get('name', '')}" if d["what"] == "frame" else \
                f"extract {d['data'].get('aot_name') or 'graph'}"
            out.append({"ph": "X", "name": name, "cat": f"dynamo.{d['what']}", "pid": pid, "tid": 2,
                        "ts": round(base + (d["t"] - ms) * 1e3, 3), "dur": max(round(ms * 1e3, 3), 1.0),
                        "args": {"compile_id": d.get("compile_id")}})
    return {"traceEvents": out, "displayTimeUnit": "ms"}
