"""The Dynamo half of the recorder: every frame compile, graph break, recompile, graph handed to
the backend, AOT graph and (with torch_xla) bridge extraction of the whole process, as records.

It is one more sink of ``graph_breaks.watch``, the one recorder of these events (the joins per
compile id and the bookkeeping are that module's): each finished event, a class of
:mod:`torch_xla_ext._dynamo_events`, is written as it is, stamped with the rank file's clock.
Opened when ``torch._dynamo`` is imported and never closed. Installing it imports no torch_xla:
the openxla bridge's part is added when torch_xla has finished importing
(:meth:`DynamoRecorder.install_bridge`). With torch's structured trace on (``TORCH_TRACE``), each
bridge extraction also becomes an artifact under its Dynamo compile id, which tlparse lists next
to Dynamo's own.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable

from torch_xla_ext._compat import trace_log
from torch_xla_ext._dynamo_events import (AotGraph, BridgeExtraction, DynamoGraph, FrameCompile, GraphBreak, Recompile,
                                         XlaCompile)
from torch_xla_ext.graph_breaks.watch import BridgeSink, BridgeWatch, attach_bridge
from torch_xla_ext.trace.schema import to_json

__all__ = ["BRIDGE_ARTIFACT", "DynamoRecorder"]

BRIDGE_ARTIFACT = "torch_xla_ext_xla_graphs"


class DynamoRecorder(BridgeSink):
    """A ``graph_breaks.watch.BridgeSink`` that writes each event as a record (see the module)."""

    def __init__(self, emit: Callable[[Any], None], now: Callable[[], float]):
        self._emit = emit
        self._now = now

    def install(self) -> None:
        rank = os.environ.get("RANK")
        if rank is not None and rank.isdigit() and trace_log.active():
            trace_log.name_file_by_rank(int(rank))  # before Dynamo writes its first record: tlparse --all-ranks-html
        self._watch = BridgeWatch(self)
        self._watch.__enter__()

    def install_bridge(self) -> None:
        attach_bridge(loaded=True)

    def _record(self, ev: Any) -> None:
        self._emit(dataclasses.replace(ev, t=self._now()))

    # ---- BridgeSink: every finished event is a record -------------------------------------------------

    def on_frame_compile(self, ev: FrameCompile) -> None:
        self._record(ev)

    def on_recompile(self, ev: Recompile) -> None:
        self._record(ev)

    def on_graph_break(self, ev: GraphBreak) -> None:
        self._record(ev)

    def on_dynamo_graph(self, ev: DynamoGraph) -> None:
        self._record(ev)

    def on_aot_graph(self, ev: AotGraph) -> None:
        self._record(ev)

    def on_xla_compile(self, ev: XlaCompile) -> None:
        self._record(ev)

    def on_bridge_extraction(self, ev: BridgeExtraction) -> None:
        self._record(ev)
        self._artifact(ev)

    # ---- tlparse -----------------------------------------------------------------------------------

    def _artifact(self, ev: BridgeExtraction) -> None:
        cid = ev.compile_id
        if cid in (None, "", "-") or not trace_log.active():
            return
        payload = {k: v for k, v in to_json(ev).items() if k not in ("ev", "t", "t0_ns", "t1_ns", "bridge")}
        try:
            trace_log.artifact(BRIDGE_ARTIFACT, dict(payload, rank=_rank()), cid)
        except ValueError:  # not a compile id torch can parse: the record has it all the same
            pass


def _rank() -> int | None:
    r = os.environ.get("RANK")
    return int(r) if r is not None and r.isdigit() else None
