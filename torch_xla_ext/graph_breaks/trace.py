"""The region on a timeline: a Chrome / Perfetto trace (``traceEvents`` JSON).

Where the events come from (all put on one clock, microseconds from the region's start):
  * Dynamo frame compiles, the bridge's graph extraction and partition compiles: spans the
    ``_compat`` wrappers time (``time.monotonic_ns``);
  * lazy syncs and cached-graph executions (per replica), Dynamo graphs, breaks, recompiles and
    partitions: the C++ ledger's ring of recent events (steady clock = CLOCK_MONOTONIC);
  * XLA compiles, executions and device->host transfers: torch_xla's own metric samples
    (``CompileTime``, ``ExecuteTime``, ``TransferFromDeviceTime``; wall-clock end times, mapped
    through the region's start on both clocks);
  * the steps ``ledger.step()`` marked.
Slices of a Dynamo compile, a bridge extraction, an XLA graph's compile and its executions carry
``args.compile_id`` (the Dynamo compile id they belong to), so a trace processor can select them
by compile id as tlparse groups them.
Open the file in https://ui.perfetto.dev or chrome://tracing (both read it offline too).

Example:
    >>> import torch, torch_xla
    >>> from torch_xla_ext import graph_breaks
    >>> def f(x):
    ...     x = torch.sin(x)
    ...     torch._dynamo.graph_break()               # one break: two graphs
    ...     return torch.cos(x)
    >>> with graph_breaks.account() as ledger:
    ...     y = torch.compile(f, backend="openxla")(torch.ones(3, device="xla")); torch_xla.sync()
    >>> write_trace("region.trace.json", [ledger.report()])
    'region.trace.json'
"""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

from torch_xla_ext import _json
from torch_xla_ext._chrome_trace import nest_on_threads
from torch_xla_ext.graph_breaks.report import GraphBreakError, GraphBreakReport

__all__ = ["collect", "to_chrome_trace", "write_trace"]

# torch_xla metric -> the track its samples go on.
_SAMPLED = {"CompileTime": "xla compile", "ExecuteTime": "xla execute", "TransferFromDeviceTime": "transfer to host"}
_INSTANT_KINDS = {"fx_graph": "dynamo", "graph_break": "dynamo", "recompile": "dynamo", "xla_partition": "bridge",
                  "fallback_node": "bridge"}


def collect(ledger: Any, t_end: int) -> tuple[list[dict[str, Any]], int]:
    """The timeline of an open or closed ledger's region, and how many ring events were
    overwritten before they could be drawn."""
    t0, wall0 = ledger._t0, ledger._wall0
    span_us = (t_end - t0) / 1e3
    events: list[dict[str, Any]] = []

    # An XLA graph's compile id is that of the Dynamo compile whose graph the bridge partitioned.
    hash_cid = {p["graph_hash"]: b["compile_id"] for b in ledger._bridges.values() for p in b["partitions"]
                if b["compile_id"] not in (None, "-")}

    def add(name: str, cat: str, track: str, start_ns: float, dur_ns: float, replica: int | None = None,
            **args: Any) -> None:
        if args.get("graph_hash") in hash_cid and "compile_id" not in args:
            args["compile_id"] = hash_cid[args["graph_hash"]]
        events.append({"name": name, "cat": cat, "track": track, "ts": round((start_ns - t0) / 1e3, 3),
                       "dur": round(max(dur_ns, 0) / 1e3, 3), "replica": replica, "args": args})

    for s in ledger._spans:
        add(s["name"], s["track"].split()[0], s["track"], s["t0"], s["t1"] - s["t0"], **s["args"])
    ring = ledger._ledger.recent_events()
    dropped = max(0, ledger._ledger.events_recorded - len(ring))
    epoch = ledger._ledger.epoch_ns
    for e in ring:
        end = epoch + e.timestamp_ns
        rep = e.replica if e.replica >= 0 else None
        kind = e.kind.name
        if kind == "sync":
            add("sync", "lazy", "sync" if rep is None else f"sync r{rep}", end - e.duration_ns, e.duration_ns,
                rep, graphs_launched=int(e.key or 0))
        elif kind == "execute" and e.stage.name == "bridge":
            add(f"run {e.key[:12]}", "bridge", "bridge execute" if rep is None else f"bridge execute r{rep}",
                end - e.duration_ns, e.duration_ns, rep, graph_hash=e.key)
        elif kind in _INSTANT_KINDS:
            what = e.key or e.reason
            add(f"{kind.replace('_', ' ')} {what}"[:80], _INSTANT_KINDS[kind], _INSTANT_KINDS[kind],
                end, 0, rep, **({"frame": f"{e.file}:{e.line}"} if e.file else {}))
    samples: Callable[[str], Any] = lambda metric: ()  # torch alone: no XLA metric was sampled
    if ledger._xla:
        # Imports torch_xla: only where the region had it (Dynamo's half runs without it).
        from torch_xla_ext._compat import metrics as _metrics

        samples = _metrics.metric_samples
    for metric, track in _SAMPLED.items():
        for wall_s, value_ns in samples(metric):
            end_rel_ns = wall_s * 1e9 - wall0
            if 0 <= end_rel_ns <= span_us * 1e3 + 1e6:
                add(track.split()[-1], "xla", track, t0 + end_rel_ns - value_ns, value_ns)
    for i, t in enumerate(ledger._steps, 1):
        add(f"step {i}", "user", "steps", t, 0)
    events.sort(key=lambda ev: ev["ts"])
    return events, dropped


def to_chrome_trace(reports: Sequence[GraphBreakReport], labels: Sequence[str] | None = None) -> dict[str, Any]:
    """One trace with a process per report (named by ``labels``, else by its rank) and a thread
    per track (a further lane of it where slices overlap: torch_xla executes asynchronously)."""
    trace: list[dict[str, Any]] = []
    for i, r in enumerate(reports):
        pid = i + 1
        label = labels[i] if labels else f"rank {r.rank.get('rank', i)}"
        trace.append({"ph": "M", "name": "process_name", "pid": pid,
                      "args": {"name": f"{label} ({r.rank.get('host', '?')}:{r.rank.get('pid', '?')})"}})
        trace.append({"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": pid}})
        tids: dict[str, int] = {}
        for ev in r.timeline:
            tid = tids.get(ev["track"])
            if tid is None:
                tid = tids[ev["track"]] = len(tids) + 1
                trace.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": ev["track"]}})
                trace.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                              "args": {"sort_index": tid}})
            out = {"name": ev["name"], "cat": ev["cat"], "pid": pid, "tid": tid, "ts": ev["ts"],
                   "args": dict(ev["args"], **({"replica": ev["replica"]} if ev["replica"] is not None else {}))}
            if ev["dur"] > 0:
                out.update(ph="X", dur=ev["dur"])
            else:
                out.update(ph="i", s="t")
            trace.append(out)
    return {"traceEvents": nest_on_threads(trace), "displayTimeUnit": "ms",
            "otherData": {"producer": "torch_xla_ext.graph_breaks", "ranks": len(reports)}}


def write_trace(path: str, reports: Sequence[GraphBreakReport] | GraphBreakReport,
                labels: Sequence[str] | None = None) -> str:
    """Writes the Chrome/Perfetto trace of one report or of several (one process each: the
    ranks of a job, or the modes of a comparison with ``labels``); returns ``path``.

    Example:
        >>> import torch, torch_xla
        >>> from torch_xla_ext import graph_breaks
        >>> def f(x):
        ...     x = torch.sin(x)
        ...     torch._dynamo.graph_break()               # one break: two graphs
        ...     return torch.cos(x)
        >>> with graph_breaks.account() as ledger:
        ...     y = torch.compile(f, backend="openxla")(torch.ones(3, device="xla")); torch_xla.sync()
        >>> ledger.report().save("gb-rank0.json")
        'gb-rank0.json'
        >>> from torch_xla_ext.graph_breaks import load_report
        >>> files = ["gb-rank0.json"]               # one per rank in a real job
        >>> write_trace("ranks.trace.json", [load_report(f) for f in files])
        'ranks.trace.json'
    """
    if isinstance(reports, GraphBreakReport):
        reports = [reports]
    if not reports or not all(isinstance(r, GraphBreakReport) for r in reports):
        raise GraphBreakError("write_trace: reports must be GraphBreakReport objects")
    if labels is not None and len(labels) != len(reports):
        raise GraphBreakError(f"write_trace: {len(labels)} labels for {len(reports)} reports")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        _json.dump(to_chrome_trace(reports, labels), f)
    return path
