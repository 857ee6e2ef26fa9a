"""The ledger of one accounted region: account() opens it, the watches in ``graph_breaks.watch`` feed it.

Compile-time events (Dynamo frames, breaks, graphs, AOT graphs, the bridge's partitions) arrive as
Python calls and are rare; the per-step events (a lazy sync, a cached-graph execution) are written
by a C++ Tap straight into this ledger's C++ ``Ledger``. torch_xla's counters and metrics are read
as deltas over the region (``_compat.metrics.CounterWindow``), which survives the bridge's counter
clears.

Example:
    >>> import torch, torch_xla
    >>> step = torch.compile(lambda x: torch.sin(x) * 2, backend="openxla")
    >>> with account() as ledger:
    ...     for x in torch.ones(3, 4, device="xla"):
    ...         y = step(x); torch_xla.sync(); ledger.step()
    >>> report = ledger.report()
    >>> report.steps, report.fx_graphs
    (3, 1)
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

from torch_xla_ext import _versions
from torch_xla_ext._compat import lazy as _lazy
from torch_xla_ext._compat import trace_log
from torch_xla_ext._dynamo_events import (AotGraph, BridgeExtraction, DynamoGraph, FrameCompile, GraphBreak, Partition,
                                         Recompile, XlaCompile)
from torch_xla_ext._ext import graph_breaks as _core
from torch_xla_ext.graph_breaks import tlparse
from torch_xla_ext.graph_breaks import trace as _trace
from torch_xla_ext.graph_breaks.report import GraphBreakError, GraphBreakReport
from torch_xla_ext.graph_breaks.watch import BridgeSink, BridgeWatch, SyncWatch

__all__ = ["GraphBreakLedger", "account", "native_ledger", "rank_identity"]

# Counters whose deltas say "a host read happened" (each can force a pending graph to run).
_HOST_READ_COUNTERS = ("aten::_local_scalar_dense", "xla::_to_cpu")
_TIME_METRICS = ("CompileTime", "ExecuteTime", "TransferFromDeviceTime")
K, S = _core.Kind, _core.Stage


class _NoXlaWindow:
    """torch_xla's counter window where torch_xla is not installed: every counter and metric is
    zero (nothing of torch_xla's ran)."""

    class _Zero:
        count = 0
        total = 0.0

    counters: dict[str, int] = {}

    def metric(self, name: str) -> Any:
        return self._Zero

    def delta(self) -> "_NoXlaWindow":
        return self

    def compensate(self, counter: str, restored: int) -> None:
        pass
# Regions open in this process: only the outermost writes tlparse artifacts (a nested region's
# compile ids are the outer one's too).
_open_regions = [0]


def _metrics() -> Any:
    # Imports torch_xla: only where graph_breaks.openxla's stack is there (Dynamo's half runs without it).
    from torch_xla_ext._compat import metrics

    return metrics


def rank_identity() -> dict[str, Any]:
    """Which process of a job this is: torch.distributed's rank if it is initialized, else the
    RANK / LOCAL_RANK / WORLD_SIZE a launcher (torchrun) set, else torch_xla's process index
    (without torch_xla: rank 0 of 1)."""
    ident: dict[str, Any] = {"host": socket.gethostname(), "pid": os.getpid()}
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        ident.update(rank=dist.get_rank(), world_size=dist.get_world_size(), source="torch.distributed")
    elif "RANK" in os.environ:
        ident.update(rank=_env_int("RANK"), world_size=_env_int("WORLD_SIZE"), source="RANK")
    elif _versions.available("graph_breaks.openxla"):
        import torch_xla.runtime as xr

        ident.update(rank=int(xr.process_index()), world_size=int(xr.process_count()),
                     source="torch_xla.runtime.process_index()")
    else:  # torch alone, no launcher: the one process of its job
        ident.update(rank=0, world_size=1, source="single process")
    if "LOCAL_RANK" in os.environ:
        ident["local_rank"] = _env_int("LOCAL_RANK")
    return ident


def _env_int(name: str) -> int | None:
    v = os.environ.get(name)
    if v is None:
        return None
    try:
        return int(v)
    except ValueError:
        raise GraphBreakError(f"environment variable {name}={v!r} is not an integer") from None


class GraphBreakLedger(BridgeSink):
    """Records Dynamo, AOTAutograd, bridge and XLA events while its region is open; see
    :func:`account`."""

    def __init__(self, ring_capacity: int = 4096, torch_trace: bool | None = None):
        if not isinstance(ring_capacity, int) or isinstance(ring_capacity, bool) or ring_capacity < 1:
            raise GraphBreakError(f"ring_capacity must be a positive int, got {ring_capacity!r}")
        if torch_trace not in (None, True, False):
            raise GraphBreakError(f"torch_trace must be None, True or False, got {torch_trace!r}")
        self._torch_trace = torch_trace
        self._outermost = False
        self.tlparse_compile_ids: list[str] = []
        self._ledger = _core.Ledger(ring_capacity=ring_capacity)
        self._open = False
        self._final: GraphBreakReport | None = None
        self._steps: list[int] = []
        self._compiles: dict[str, dict[str, Any]] = {}
        self._breaks: dict[tuple[str, str, int], dict[str, Any]] = {}
        self._recompiles: dict[tuple[str, str, int], dict[str, Any]] = {}
        self._graphs: dict[int, dict[str, Any]] = {}
        self._aot: dict[str, dict[str, Any]] = {}
        self._bridges: dict[int, dict[str, Any]] = {}
        self._hash_compiles: dict[str, list[float]] = {}
        self._spans: list[dict[str, Any]] = []

    # -- marking steps --
    def step(self) -> None:
        """Marks the end of one training/inference step, so the report gives executions per
        step and the timeline shows step boundaries."""
        self._steps.append(time.monotonic_ns())

    # -- sink interface for graph_breaks.watch.BridgeWatch --
    def ledgers(self) -> list[Any]:
        return [self._ledger]

    def _span(self, name: str, track: str, t0: int, t1: int, **args: Any) -> None:
        self._spans.append({"name": name, "track": track, "t0": t0, "t1": t1, "args": args})

    def on_compile_start(self, compile_id: str, name: str, frame: str, t_ns: int) -> None:
        # Opened at the start, so the breaks and the recompile of the compile find it.
        self._compiles.setdefault(compile_id, {"compile_id": compile_id, "name": name, "frame": frame, "breaks": [],
                                               "recompile_reason": None, "error": None})

    def on_frame_compile(self, ev: FrameCompile) -> None:
        c = self._compiles.setdefault(ev.compile_id, {"compile_id": ev.compile_id, "name": ev.name, "frame": ev.frame,
                                                      "breaks": [], "recompile_reason": None, "error": None})
        c["ms"] = ev.ms
        c["error"] = ev.error
        self._span(f"[{ev.compile_id}] {ev.name}", "dynamo compile", ev.t0_ns, ev.t1_ns, frame=ev.frame,
                   compile_id=ev.compile_id, **({"error": ev.error} if ev.error else {}))

    def on_recompile(self, ev: Recompile) -> None:
        file, _, line = ev.frame.rpartition(":")
        self._ledger.record(K.recompile, S.dynamo, reason=ev.reason, file=file, line=int(line or 0))
        row = self._recompiles.setdefault((ev.reason, ev.frame), {
            "reason": ev.reason, "frame": ev.frame, "count": 0, "compile_ids": []})
        row["count"] += 1
        row["compile_ids"].append(ev.compile_id)
        if ev.compile_id in self._compiles:
            self._compiles[ev.compile_id]["recompile_reason"] = ev.reason

    def on_graph_break(self, ev: GraphBreak) -> None:
        key = (ev.gb_type, ev.file, ev.line)
        inherited = not ev.logged
        if not inherited:  # a split Dynamo neither logs nor counts is not one of its breaks
            self._ledger.record(K.graph_break, S.dynamo, key=ev.gb_type, file=ev.file, line=ev.line)
        row = self._breaks.get(key)
        if row is None:
            row = self._breaks[key] = {
                "gb_type": ev.gb_type, "gb_id": ev.gb_id, "explanation": ev.explanation,
                "hints": list(ev.hints), "context": ev.context, "doc": ev.doc,
                "reason": f"{ev.gb_type}: {ev.explanation}" if ev.explanation else ev.gb_type,
                "dynamo_reason": ev.dynamo_reason, "frame": ev.frame,
                "function": ev.function, "count": 0, "inherited": 0, "counted": 0, "jumps": 0, "split_at": [],
                "compile_ids": []}
        row["count"] += 1
        row["counted"] += int(ev.counted)  # in Dynamo's counters["graph_break"]
        row["jumps"] += int(ev.origin == "jump")  # a jump in the frame's own code
        row["skipped_frames"] = row.get("skipped_frames", 0) + int(ev.origin == "frame_skipped")
        row["compile_ids"].append(ev.compile_id)
        if inherited:
            row["inherited"] += 1
            if ev.split_at and ev.split_at not in row["split_at"]:
                row["split_at"].append(ev.split_at)
        if ev.compile_id in self._compiles:
            where = f" (split at the call {ev.split_at})" if inherited and ev.split_at else ""
            self._compiles[ev.compile_id]["breaks"].append(f"{row['gb_type']} at {row['frame']}{where}")

    def on_dynamo_graph(self, ev: DynamoGraph) -> None:
        self._ledger.record(K.fx_graph, S.dynamo, key=ev.compile_id)
        self._graphs[ev.graph] = {"graph": ev.graph, "compile_id": ev.compile_id, "nodes": ev.nodes, "ops": ev.ops,
                                  "ended_by": ev.ended_by}

    def on_aot_graph(self, ev: AotGraph) -> None:
        self._aot[ev.name] = {"name": ev.name, "kind": ev.kind, "nodes": ev.nodes, "compile_id": ev.compile_id,
                              "graph": ev.graph}

    def on_bridge_extraction(self, ev: BridgeExtraction) -> None:
        self._bridges[ev.bridge] = {"bridge": ev.bridge, "aot_name": ev.aot_name, "compile_id": ev.compile_id,
                                    "nodes": ev.nodes, "partitions": [{"nodes": p.nodes, "graph_hash": p.graph_hash}
                                                                      for p in ev.partitions],
                                    "fallback_nodes": list(ev.fallback_nodes), "eager_nodes": list(ev.eager_nodes),
                                    "error": ev.error, "ms": ev.ms}
        self._span(f"extract {ev.aot_name or 'graph'}", "bridge", ev.t0_ns, ev.t1_ns, partitions=len(ev.partitions),
                   **({"compile_id": ev.compile_id} if ev.compile_id not in (None, "-") else {}),
                   **({"error": ev.error} if ev.error else {}))

    def on_fallback_node(self, bridge: int | None, aten_op: str) -> None:
        self._ledger.record(K.fallback_node, S.bridge, key=aten_op)

    def on_partition(self, bridge: int | None, partition: Partition) -> None:
        self._ledger.record(K.xla_partition, S.bridge, key=partition.graph_hash)

    def on_xla_compile(self, ev: XlaCompile) -> None:
        self._hash_compiles.setdefault(ev.graph_hash, []).append((ev.t1_ns - ev.t0_ns) / 1e6)
        self._span(f"compile {ev.graph_hash[:12]}", "bridge", ev.t0_ns, ev.t1_ns, graph_hash=ev.graph_hash)

    def compensate(self, counter: str, restored: int) -> None:
        self._window.compensate(counter, restored)

    # -- region --
    def __enter__(self) -> "GraphBreakLedger":
        if self._open or self._final is not None:
            raise GraphBreakError("a GraphBreakLedger accounts one region; call account() again for another")
        # A process with torch alone (any Dynamo backend) accounts Dynamo's half; torch_xla's
        # counters, syncs and bridge join in where torch_xla is installed.
        self._xla = _versions.available("graph_breaks.openxla")
        if self._xla:
            # Work launched before the region (async executions) must not land inside it.
            _metrics().wait_device_ops()
        self._rank = rank_identity()
        self._outermost = _open_regions[0] == 0
        if self._torch_trace is not False:
            if self._torch_trace and trace_log.trace_dir() is None:
                raise GraphBreakError("account(torch_trace=True): torch writes no structured trace file in "
                                      "this process; set TORCH_TRACE=DIR before torch is imported")
            if trace_log.active() and self._rank.get("source") == "RANK" and self._rank.get("rank") is not None:
                trace_log.name_file_by_rank(self._rank["rank"])  # for tlparse --all-ranks-html
        self._native_start = _core.global_ledger().totals()
        if self._xla:
            self._window = _metrics().CounterWindow(metric_names=_TIME_METRICS)
            self._watches = [self._window, BridgeWatch(self), SyncWatch(self._ledger, _lazy.replica)]
        else:
            self._window = _NoXlaWindow()
            self._watches = [BridgeWatch(self)]
        for w in self._watches:
            w.__enter__()
        _core.set_hooks_enabled(True)
        self._open = True
        _open_regions[0] += 1
        self._wall0, self._t0 = time.time_ns(), time.monotonic_ns()
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            if self._xla:  # executions are asynchronous; their time metrics land when they finish
                _metrics().wait_device_ops()
            self._t1 = time.monotonic_ns()
        finally:
            _core.set_hooks_enabled(False)
            for w in reversed(self._watches):
                w.__exit__(*exc)
            self._open = False
            _open_regions[0] -= 1
        self._final = self._build(self._window.delta(), self._t1, record=True)
        if self._outermost and self._torch_trace is not False:
            self.tlparse_compile_ids = tlparse.emit(self._final, wall0_us=self._wall0 / 1e3)

    def report(self) -> GraphBreakReport:
        """The region's report (so far, if the region is still open)."""
        if self._final is not None:
            return self._final
        if not self._open:
            raise GraphBreakError("report(): the region has not started; use `with account() as ledger:`")
        return self._build(self._window.delta(), time.monotonic_ns(), record=False)

    def recent_events(self) -> list[_core.Event]:
        """The most recent per-step and compile events in order (bounded ring; the report's
        counts never drop)."""
        return self._ledger.recent_events()

    def _build(self, delta: Any, t_end: int, record: bool) -> GraphBreakReport:
        c, tm = delta.counters, delta.metric
        rows = self._ledger.aggregates()
        # Executions from the ExecuteTime metric: counters are cleared by the bridge meanwhile, and
        # an execution finishing on its own thread while they are read and cleared would be lost.
        bridge_exec = sum(r.count for r in rows if r.kind == K.execute and r.stage == S.bridge)
        executions = tm("ExecuteTime").count
        lazy_exec = max(0, executions - bridge_exec)
        fallback_ops = {k: v for k, v in c.items() if k.startswith("aten::") and v > 0}
        launched = sum(int(r.key or 0) * r.count for r in rows if r.kind == K.sync)
        forced = max(0, lazy_exec - launched)
        forced_by = {k: c[k] for k in _HOST_READ_COUNTERS if c.get(k, 0) > 0}
        for op, n in fallback_ops.items():
            forced_by.setdefault(op, n)
        if record:
            # Counter-derived totals go through the C++ ledger too, so one structure holds all.
            L = self._ledger
            if c.get("UncachedCompile", 0):
                L.record(K.compile, S.xla, count=c["UncachedCompile"], duration_ns=int(tm("CompileTime").total))
            if c.get("CachedCompile", 0):
                L.record(K.cached_compile, S.xla, count=c["CachedCompile"])
            if lazy_exec:
                L.record(K.execute, S.xla, key="lazy", count=lazy_exec)
            if tm("TransferFromDeviceTime").count:
                L.record(K.transfer_to_host, S.xla, count=tm("TransferFromDeviceTime").count,
                         duration_ns=int(tm("TransferFromDeviceTime").total))
            for op, n in fallback_ops.items():
                L.record(K.fallback_op, S.xla, key=op, count=n)
            if forced:
                L.record(K.forced_execution, S.lazy, count=forced)
        per_hash, replicas = self._per_hash(rows)
        aot: dict[str, int] = {}
        for a in self._aot.values():
            aot[a["kind"]] = aot.get(a["kind"], 0) + 1
        eager: dict[str, int] = {}
        for b in self._bridges.values():
            for n in b["eager_nodes"]:
                eager[n.split()[0]] = eager.get(n.split()[0], 0) + 1
        notes = []
        if len(replicas) > 1:
            notes.append(f"{len(replicas)} replicas in this process (thread per device): syncs and bridge "
                         "executions are attributed per replica; torch_xla's counters (XLA compiles, lazy "
                         "executions, transfers, fallback ops) are process-wide and cannot be split per replica.")
        native_end = _core.global_ledger().totals()
        report = GraphBreakReport(
            rank=dict(self._rank),
            steps=len(self._steps),
            dynamo_compiles=len(self._compiles),
            fx_graphs=self._ledger.count(K.fx_graph),
            fx_breaks=sorted((dict(b) for b in self._breaks.values()), key=lambda b: -b["count"]),
            graphs_ended_by_break=sum(1 for g in self._graphs.values() if g["ended_by"]),
            recompiles=self._ledger.count(K.recompile),
            recompile_reasons=[dict(r) for r in self._recompiles.values()],
            aot_graphs=dict(sorted(aot.items())),
            bridge_graphs=len(self._bridges),
            xla_partitions=self._ledger.count(K.xla_partition),
            fallback_nodes={r.key: r.count for r in rows if r.kind == K.fallback_node},
            eager_nodes=dict(sorted(eager.items())),
            joined=self._joined(),
            per_graph_hash=per_hash,
            fallback_ops=dict(sorted(fallback_ops.items())),
            compiles=c.get("UncachedCompile", 0),
            cached_compiles=c.get("CachedCompile", 0),
            executions=executions,
            transfers_to_host=tm("TransferFromDeviceTime").count,
            syncs=self._ledger.count(K.sync),
            forced_executions=forced,
            forced_by=dict(sorted(forced_by.items())),
            dynamo_input_syncs=c.get("DynamoSyncInputExecuteTime", 0),
            compile_ms=tm("CompileTime").total / 1e6,
            execute_ms=tm("ExecuteTime").total / 1e6,
            transfer_ms=tm("TransferFromDeviceTime").total / 1e6,
            wall_ms=(t_end - self._t0) / 1e6,
            replicas=replicas,
            native_hooks={name: native_end.count(k) - self._native_start.count(k)
                          for name, k in K.__members__.items() if native_end.count(k) - self._native_start.count(k)},
            notes=notes,
        )
        report.timeline, dropped = _trace.collect(self, t_end)
        if dropped:
            report.notes.append(f"the timeline holds the last {self._ledger.ring_capacity} per-step events; "
                                f"{dropped} earlier ones are counted but not drawn (account(ring_capacity=...))")
        return report

    def _per_hash(self, rows: list[_core.Aggregate]) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
        per_hash: dict[str, dict[str, Any]] = {}

        def entry(h: str) -> dict[str, Any]:
            return per_hash.setdefault(h, {"compiles": 0, "compile_ms": 0.0, "executions": 0, "dispatch_ms": 0.0,
                                           "by_replica": {}})

        for h, times in self._hash_compiles.items():
            e = entry(h)
            e["compiles"] += len(times)
            e["compile_ms"] += sum(times)
        replicas: dict[str, dict[str, Any]] = {}
        for r in rows:
            rep = str(r.replica) if r.replica >= 0 else None
            if r.kind == K.execute and r.stage == S.bridge:
                e = entry(r.key)
                e["executions"] += r.count
                e["dispatch_ms"] += r.total_ns / 1e6
                if rep is not None:
                    e["by_replica"][rep] = e["by_replica"].get(rep, 0) + r.count
                    replicas.setdefault(rep, {"syncs": 0, "executions": 0})["executions"] += r.count
            elif r.kind == K.sync and rep is not None:
                replicas.setdefault(rep, {"syncs": 0, "executions": 0})["syncs"] += r.count
        for b in self._bridges.values():
            for p in b["partitions"]:
                entry(p["graph_hash"]).setdefault("partition_of", b["aot_name"])
        return per_hash, dict(sorted(replicas.items(), key=lambda kv: int(kv[0])))

    def _joined(self) -> list[dict[str, Any]]:
        """compile id -> Dynamo graphs -> AOT graphs -> bridge graphs -> partitions."""
        bridges_of: dict[str, list[dict[str, Any]]] = {}
        loose_bridges = []
        for b in self._bridges.values():
            entry = {k: b[k] for k in ("bridge", "nodes", "partitions", "fallback_nodes", "eager_nodes", "error")}
            entry["ms"] = b.get("ms")
            if b["aot_name"] in self._aot:
                bridges_of.setdefault(b["aot_name"], []).append(entry)
            else:
                loose_bridges.append(dict(entry, aot_name=b["aot_name"], compile_id=b["compile_id"]))
        aot_of: dict[Any, list[dict[str, Any]]] = {}
        for a in self._aot.values():
            aot_of.setdefault(a["graph"], []).append(dict(a, bridge=bridges_of.get(a["name"], [])))
        graphs_of: dict[str, list[dict[str, Any]]] = {}
        for g in self._graphs.values():
            graphs_of.setdefault(g["compile_id"], []).append(dict(g, aot=aot_of.pop(g["graph"], [])))
        out = []
        for cid, c in self._compiles.items():
            out.append({"compile_id": cid, "name": c["name"], "frame": c["frame"], "ms": c.get("ms"),
                        "error": c["error"], "recompile_reason": c["recompile_reason"], "breaks": list(c["breaks"]),
                        "graphs": graphs_of.pop(cid, [])})
        # Graphs whose frame compile began before the region, AOT graphs of Dynamo graphs compiled
        # before it (a backward compiled lazily), bridge graphs of AOT graphs compiled before it.
        rest = [g for gs in graphs_of.values() for g in gs]
        rest_aot = [a for gs in aot_of.values() for a in gs]
        if rest or rest_aot or loose_bridges:
            graphs = rest + ([{"graph": "-", "compile_id": "-", "nodes": 0, "ops": 0, "ended_by": None,
                               "aot": rest_aot}] if rest_aot else [])
            if loose_bridges:
                graphs.append({"graph": "-", "compile_id": "-", "nodes": 0, "ops": 0, "ended_by": None,
                               "aot": [{"name": b["aot_name"] or "(compiled before this region)", "kind": "-",
                                        "nodes": b["nodes"], "compile_id": b["compile_id"], "graph": None,
                                        "bridge": [b]} for b in loose_bridges]})
            out.append({"compile_id": "-", "name": "(compiled before this region)", "frame": "-", "ms": None,
                        "error": None, "recompile_reason": None, "breaks": [], "graphs": graphs})
        return out


def account(ring_capacity: int = 4096, torch_trace: bool | None = None) -> GraphBreakLedger:
    """A context manager that accounts graph breaks, AOT graphs, partitions, compiles,
    executions and transfers in its region; returns the ledger (``ledger.report()`` after or
    during). Call ``ledger.step()`` after each step for per-step figures.

    Accounting wraps torch_xla/Dynamo entry points and calls through unchanged: results do not
    change. At region entry and exit it waits for pending device work, so executions launched
    before the region are not counted in it and execution times are complete.

    When torch emits its structured trace (``TORCH_TRACE=DIR``, or any listener on it), the
    outermost region writes its figures into it at exit, one artifact per Dynamo compile id and
    a run-level summary, which ``tlparse`` lists under those compile ids
    (:mod:`~torch_xla_ext.graph_breaks.tlparse`); ``torch_trace=False`` writes none, ``True``
    requires a ``TORCH_TRACE`` file. With RANK set by a launcher and
    no process group, the trace file is named by rank (``tlparse --all-ranks-html``).

    Example:
        >>> import torch, torch_xla
        >>> model, x = torch.nn.Linear(4, 4).to("xla"), torch.ones(2, 4, device="xla")
        >>> with account() as ledger:
        ...     y = torch.compile(model, backend="openxla")(x); torch_xla.sync()
        >>> ledger.report().fx_graphs
        1
    """
    return GraphBreakLedger(ring_capacity=ring_capacity, torch_trace=torch_trace)


def native_ledger() -> Any:
    """The process-wide C++ ledger that ``cc/graph_breaks/hooks.h`` writes to."""
    return _core.global_ledger()
