"""``trace.perfetto.json``: the run as Chrome trace events (ui.perfetto.dev, chrome://tracing).

One process per rank file, on one clock (each file's records are milliseconds since its header,
whose wall-clock time places it): a ``steps`` thread with one slice per step (from the step
marker before it to its own), a ``compiles`` thread with each compile of every frontend
(``build.compile_rows``: torch_xla's graphs, JAX's programs, op by op included; ``args``: graph
hash, trigger, site, what changed), a ``dynamo`` thread with Dynamo's frame compiles and bridge
extractions (``args.compile_id`` as tlparse and Dynamo's own events carry it). Slices that
overlap on a thread (compiles on two threads at once) go on a further lane of it.
"""

from __future__ import annotations

from typing import Any

from torch_xla_ext._chrome_trace import nest_on_threads
from torch_xla_ext._dynamo_events import BridgeExtraction, FrameCompile
from torch_xla_ext.trace.report.build import compile_rows
from torch_xla_ext.trace.report.load import RankTrace
from torch_xla_ext.trace.report.render import change_text

__all__ = ["events"]

_THREADS = ("steps", "compiles", "dynamo")


def events(traces: list[RankTrace]) -> dict[str, Any]:
    wall0 = min(t.header.wall for t in traces)
    out: list[dict[str, Any]] = []
    for pid, t in enumerate(traces):
        base = (t.header.wall - wall0) * 1e6  # µs
        out.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": t.label}})
        for tid, name in enumerate(_THREADS):
            out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
        prev = 0.0
        for s in t.steps:
            ts = base + prev * 1e3
            out.append({"ph": "X", "name": f"step {s.n}", "cat": "step", "pid": pid, "tid": 0, "ts": round(ts, 3),
                        "dur": max(round((s.t - prev) * 1e3, 3), 1.0),
                        "args": {"marker": s.kind, "site": t.site(s.site), "sync_ms": s.ms, "graphs": s.graphs}})
            prev = s.t
        for c in compile_rows(t):
            if c.t is None:  # read back from torch_xla's analysis after the process stopped: no time
                continue
            ms = c.ms or 0.0
            label = (c.trigger.function or c.name) if c.name else c.graph_hash[:12]  # a JAX program by its function
            out.append({"ph": "X", "name": f"compile {label}" + (f" ({c.trigger.op})" if c.eager else ""),
                        "cat": "compile.op_by_op" if c.eager else "compile", "pid": pid, "tid": 1,
                        "ts": round(base + (c.t - ms) * 1e3, 3), "dur": max(round(ms * 1e3, 3), 1.0),
                        "args": {"step": c.step, "graph_hash": c.graph_hash, "name": c.name, "trigger": c.trigger.kind,
                                 "site": c.trigger.site, "changed": [change_text(x) for x in c.changed],
                                 "advice": c.advice}})
        spans = [(f"[{f.compile_id}] {f.name}", "dynamo.frame", f.t, f.ms, f.compile_id) for f in t.of(FrameCompile)]
        spans += [(f"extract {x.aot_name or 'graph'}", "dynamo.bridge", x.t, x.ms, x.compile_id)
                  for x in t.of(BridgeExtraction)]
        for name, cat, end, ms, cid in sorted(spans, key=lambda sp: sp[2]):
            ms = ms or 0.0
            out.append({"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": 2,
                        "ts": round(base + (end - ms) * 1e3, 3), "dur": max(round(ms * 1e3, 3), 1.0),
                        "args": {"compile_id": cid if cid not in (None, "-") else None}})
    return {"traceEvents": nest_on_threads(out), "displayTimeUnit": "ms"}
