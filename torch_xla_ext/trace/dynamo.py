"""The Dynamo half of the recorder: every frame compile, graph break, recompile, graph handed to
the backend, AOT graph and (with torch_xla) bridge extraction of the whole process, as records.

It is one more sink of ``graph_breaks.watch`` (the joins per compile id are that module's),
opened when ``torch._dynamo`` is imported and never closed; it writes each event as it happens
instead of aggregating a region. Installing it imports no torch_xla: the openxla bridge's part is
added when torch_xla has finished importing (:meth:`DynamoRecorder.install_bridge`). With torch's
structured trace on (``TORCH_TRACE``), each bridge extraction also becomes an artifact under its
Dynamo compile id, which tlparse lists next to Dynamo's own.
"""

from __future__ import annotations

import os
from typing import Any, Callable

__all__ = ["BRIDGE_ARTIFACT", "DynamoRecorder"]

BRIDGE_ARTIFACT = "torch_xla_ext_xla_graphs"


class DynamoRecorder:
    """A ``graph_breaks.watch.BridgeSink`` that writes records (see the module)."""

    def __init__(self, emit: Callable[[dict[str, Any]], None], now: Callable[[], float]):
        self._emit = emit
        self._now = now
        self._compiles: dict[str, dict[str, Any]] = {}
        self._bridges: dict[int, dict[str, Any]] = {}
        self._open_bridge: list[int] = []

    def install(self) -> None:
        from torch_xla_ext._compat import trace_log
        from torch_xla_ext.graph_breaks.watch import BridgeWatch

        rank = os.environ.get("RANK")
        if rank is not None and rank.isdigit() and trace_log.active():
            trace_log.name_file_by_rank(int(rank))  # before Dynamo writes its first record: tlparse --all-ranks-html
        self._watch = BridgeWatch(self)
        self._watch.__enter__()

    def install_bridge(self) -> None:
        from torch_xla_ext.graph_breaks.watch import attach_bridge

        attach_bridge(loaded=True)

    def _record(self, what: str, cid: str | None, **data: Any) -> None:
        self._emit({"ev": "dynamo", "what": what, "t": self._now(), "compile_id": cid if cid not in ("-", "") else None,
                    "data": data})

    # ---- BridgeSink ------------------------------------------------------------------------------

    def ledgers(self) -> list[Any]:
        return []

    def compensate(self, counter: str, restored: int) -> None:
        pass

    def on_compile_start(self, compile_id: str, name: str, file: str, line: int, t_ns: int) -> None:
        self._compiles[compile_id] = {"name": name, "frame": f"{file}:{line}", "t0": t_ns}

    def on_compile_end(self, compile_id: str, t_ns: int, error: str | None) -> None:
        c = self._compiles.pop(compile_id, None)
        if c is None:
            return
        self._record("frame", compile_id, name=c["name"], frame=c["frame"], ms=round((t_ns - c["t0"]) / 1e6, 3),
                     error=error)

    def on_recompile(self, compile_id: str, failed_guard: str, file: str, line: int) -> None:
        self._record("recompile", compile_id, reason=failed_guard, frame=f"{file}:{line}")

    def on_graph_break(self, compile_id: str, record: dict[str, Any]) -> None:
        self._record("break", compile_id, gb_type=record.get("gb_type", ""), gb_id=record.get("gb_id"),
                     explanation=(record.get("explanation") or "")[:500], hints=list(record.get("hints") or [])[:4],
                     doc=record.get("doc"), frame=f"{record.get('file', '')}:{record.get('line', 0)}",
                     function=record.get("function", ""), origin=record.get("origin", "break"),
                     counted=bool(record.get("counted")), split_at=record.get("split_at"),
                     dynamo_reason=record.get("dynamo_reason", ""))

    def on_dynamo_graph(self, compile_id: str, graph: int, nodes: int, ops: int,
                        ended_by: dict[str, Any] | None) -> None:
        end = None
        if ended_by is not None:  # Dynamo split here (GraphCompileReason.graph_break), whatever its text
            end = (ended_by.get("gb_type") or "(a break Dynamo gave no reason text)") + \
                (f" at {ended_by['file']}:{ended_by['line']}" if ended_by.get("file") else "")
        self._record("graph", compile_id, graph=graph, nodes=nodes, ops=ops, ended_by=end,
                     ended_by_break=ended_by is not None)

    def on_aot_graph(self, compile_id: str, graph: int | None, name: str, kind: str, nodes: int) -> None:
        self._record("aot", compile_id, graph=graph, name=name, kind=kind, nodes=nodes)

    def on_bridge_start(self, bridge: int, aot_name: str | None, compile_id: str | None, nodes: int,
                        t_ns: int) -> None:
        self._bridges[bridge] = {"aot_name": aot_name, "compile_id": compile_id, "nodes": nodes, "t0": t_ns,
                                 "partitions": [], "fallback_nodes": [], "eager_nodes": [], "compiles": []}
        self._open_bridge.append(bridge)

    def on_bridge_end(self, bridge: int, t_ns: int, error: str | None) -> None:
        if self._open_bridge and self._open_bridge[-1] == bridge:
            self._open_bridge.pop()
        b = self._bridges.pop(bridge, None)
        if b is None:
            return
        cid = b["compile_id"]
        payload = {"aot_name": b["aot_name"], "nodes": b["nodes"], "ms": round((t_ns - b["t0"]) / 1e6, 3),
                   "partitions": b["partitions"], "fallback_nodes": b["fallback_nodes"],
                   "eager_nodes": b["eager_nodes"], "compiles": b["compiles"], "error": error}
        self._record("bridge", cid, **payload)
        self._artifact(cid, payload)

    def on_fallback_node(self, bridge: int | None, aten_op: str) -> None:
        if bridge in self._bridges:
            self._bridges[bridge]["fallback_nodes"].append(aten_op)

    def on_eager_node(self, bridge: int | None, node: str) -> None:
        if bridge in self._bridges:
            self._bridges[bridge]["eager_nodes"].append(node)

    def on_partition(self, bridge: int | None, nodes: int, graph_hash: str, t0_ns: int, t1_ns: int) -> None:
        if bridge in self._bridges:
            self._bridges[bridge]["partitions"].append({"graph_hash": graph_hash, "nodes": nodes})

    def on_bridge_compile(self, graph_hash: str, t0_ns: int, t1_ns: int) -> None:
        bridge = self._open_bridge[-1] if self._open_bridge else None
        b = self._bridges.get(bridge) if bridge is not None else None
        row = {"graph_hash": graph_hash, "ms": round((t1_ns - t0_ns) / 1e6, 3)}
        try:  # CompileTime's count once it compiled: the lazy half's record of the same compile has it as its ordinal
            from torch_xla_ext._compat import lazy

            row["ordinal"] = lazy.compile_count()
        except Exception:  # noqa: BLE001 - the join falls back to the order of the compiles
            pass
        if b is not None:
            b["compiles"].append(row)
        self._record("xla_compile", b["compile_id"] if b is not None else None, **row)

    # ---- tlparse -----------------------------------------------------------------------------------

    def _artifact(self, cid: str | None, payload: dict[str, Any]) -> None:
        from torch_xla_ext._compat import trace_log

        if cid in (None, "", "-") or not trace_log.active():
            return
        try:
            trace_log.artifact(BRIDGE_ARTIFACT, dict(payload, compile_id=cid, rank=_rank()), cid)
        except ValueError:  # not a compile id torch can parse
            pass


def _rank() -> int | None:
    r = os.environ.get("RANK")
    return int(r) if r is not None and r.isdigit() else None
