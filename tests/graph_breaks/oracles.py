"""Independent oracles for graph-break counts: what torch and torch_xla themselves record.

* ``DynamoCounters``: deltas of ``torch._dynamo.utils.counters`` (graphs Dynamo compiled,
  graph breaks it counted).
* ``TraceLog``: torch's structured trace (the stream tlparse reads), captured with a logging
  handler on ``torch.__trace``: one ``dynamo_start`` per compile id, one ``dynamo_output_graph``
  per graph handed to the backend, ``aot_forward_graph`` / ``aot_backward_graph`` /
  ``aot_inference_graph`` per AOTAutograd graph, a ``dynamo_graph_break_reason`` artifact per
  logged break, ``recompile_reasons`` per recompile.
* ``explain``: ``torch._dynamo.explain`` run on the same function (its own Dynamo pass).
* ``xla_counters``: torch_xla's debug counters and metrics.
"""

from __future__ import annotations

import collections
import logging
from typing import Any

import torch
import torch._dynamo
import torch_xla.debug.metrics as met
from torch._dynamo.utils import counters


class DynamoCounters:
    def __enter__(self):
        self._start = self._read()
        return self

    def __exit__(self, *exc):
        self.delta = {k: v - self._start.get(k, 0) for k, v in self._read().items()}

    @staticmethod
    def _read() -> dict[str, int]:
        return {"unique_graphs": counters["stats"]["unique_graphs"],
                "graph_breaks": sum(counters["graph_break"].values()),
                "aot_autograd": counters["aot_autograd"]["total"]}


class TraceLog(logging.Handler):
    """Counts torch's structured-trace records while open."""

    def __enter__(self):
        from torch._logging._internal import trace_log

        super().__init__(level=logging.DEBUG)
        self.kinds: collections.Counter = collections.Counter()
        self.compile_ids: set[tuple[int, int]] = set()
        self._log = trace_log
        trace_log.addHandler(self)
        return self

    def __exit__(self, *exc):
        self._log.removeHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        md = getattr(record, "metadata", {}) or {}
        for k, v in md.items():
            if k == "artifact":
                self.kinds["artifact:" + v["name"]] += 1
            elif k == "dynamo_start":
                self.kinds[k] += 1
                self.compile_ids.add((md.get("frame_id"), md.get("frame_compile_id")))
            elif k in ("dynamo_output_graph", "aot_forward_graph", "aot_backward_graph", "aot_inference_graph"):
                self.kinds[k] += 1

    @property
    def aot(self) -> dict[str, int]:
        return {k: self.kinds[f"aot_{k}_graph"] for k in ("forward", "backward", "inference")
                if self.kinds[f"aot_{k}_graph"]}


def explain(fn, *args: Any, **kwargs: Any) -> tuple[int, int]:
    """(graph_count, len(break_reasons)) of ``torch._dynamo.explain(fn)(*args, **kwargs)``."""
    out = torch._dynamo.explain(fn)(*args, **kwargs)
    return out.graph_count, len(out.break_reasons)


def xla_counter(name: str) -> int:
    return int(met.counter_value(name) or 0)
