"""Dynamo and torch_xla's openxla Dynamo bridge (torch_xla._dynamo.dynamo_bridge), in one place.

While a :class:`BridgeWatch` is open, thin wrappers report to its sink:
  * Dynamo: each graph break (``GraphCompileReason`` with ``graph_break=True``: reason and the user
    frame), each recompile (``get_and_maybe_log_recompilation_reasons``: the first failed guard).
  * bridge: each FX graph handed to ``extract_compiled_graph``; the nodes
    ``UnsupportedNodesCollector`` leaves to eager (with their aten ops); each XLA partition
    (``extract_internal``); each cached-graph execution (``_XLAC._run_cached_graph``, per graph
    hash) and each bridge compile (``_XLAC._xla_warm_up_cache`` after ``_get_graph_hash``).
The wrappers call through unchanged, so results do not change. They are installed when the first
watch opens and removed when the last closes.
"""

from __future__ import annotations

import functools
import threading
import time
from typing import Any, Protocol

import torch
import torch._dynamo.convert_frame as _convert_frame
import torch._dynamo.output_graph as _output_graph
import torch_xla
import torch_xla._dynamo.dynamo_bridge as _bridge
import torch_xla.core.dynamo_bridge as _core_bridge

__all__ = ["BridgeSink", "BridgeWatch", "aten_op_name", "reset_dynamo"]


class BridgeSink(Protocol):
    def on_fx_graph(self, num_nodes: int) -> None: ...
    def on_graph_break(self, reason: str, file: str, line: int) -> None: ...
    def on_recompile(self, reason: str, file: str, line: int) -> None: ...
    def on_fallback_node(self, aten_op: str) -> None: ...
    def on_partition(self, num_nodes: int) -> None: ...
    def on_execute(self, graph_hash: str, duration_ns: int) -> None: ...
    def on_bridge_compile(self, graph_hash: str, duration_ns: int) -> None: ...
    def compensate(self, counter: str, restored: int) -> None: ...


def aten_op_name(target: Any) -> str:
    """'aten::digamma' for torch.ops.aten.digamma.default; str(target) for anything else."""
    name = getattr(target, "name", None)
    if callable(name):
        try:
            return str(name())
        except Exception:  # noqa: BLE001 - some targets have name() with other meanings
            pass
    return getattr(target, "__name__", None) or str(target)


def _short_reason(reason: str) -> str:
    """Dynamo's reasons run to many lines of hints; keep the headline and its explanation."""
    lines = [ln.strip() for ln in str(reason).splitlines() if ln.strip()]
    if not lines:
        return ""
    head = lines[0]
    for ln in lines[1:]:
        if ln.startswith("Explanation:"):
            return f"{head}: {ln[len('Explanation:'):].strip()}"
    return head


def reset_dynamo() -> None:
    """Fresh Dynamo state: compiled frames, guards and counters forgotten."""
    torch._dynamo.reset()


_lock = threading.Lock()
_sinks: list[BridgeSink] = []
_saved: list[tuple[Any, str, Any]] = []
_tls = threading.local()  # last graph hash seen by _get_graph_hash on this thread


def _each(method: str, *args: Any) -> None:
    for s in _sinks:  # copy on write (BridgeWatch), so no copy here
        getattr(s, method)(*args)


def _patch(owner: Any, name: str, make) -> None:
    original = getattr(owner, name)
    _saved.append((owner, name, original))
    setattr(owner, name, make(original))


def _install() -> None:
    def post_init(original):
        @functools.wraps(original)
        def wrapper(self):
            original(self)
            if self.graph_break:
                frame = self.user_stack[-1] if self.user_stack else None
                _each("on_graph_break", _short_reason(self.reason), getattr(frame, "filename", ""),
                      int(getattr(frame, "lineno", 0) or 0))
        return wrapper

    def recompile_reasons(original):
        @functools.wraps(original)
        def wrapper(cache_entry, frame, *args, **kwargs):
            reasons = original(cache_entry, frame, *args, **kwargs)
            if not kwargs.get("skip_logging", False) and not (args and args[0]):
                code = frame.f_code
                reason = reasons[0] if reasons else "unable to find recompilation reasons"
                _each("on_recompile", _short_reason(reason), code.co_filename, code.co_firstlineno)
            return reasons
        return wrapper

    def extract_compiled_graph(original):
        @functools.wraps(original)
        def wrapper(xla_model, xla_args):
            n = sum(1 for nd in xla_model.graph.nodes if nd.op in ("call_function", "call_method", "call_module"))
            _each("on_fx_graph", n)
            return original(xla_model, xla_args)
        return wrapper

    def get_unsupported_nodes(original):
        @functools.wraps(original)
        def wrapper(self):
            nodes = original(self)
            for node in nodes:
                _each("on_fallback_node", aten_op_name(node.target))
            return nodes
        return wrapper

    def run_node(original):
        # The collector clears all counters per node and restores exactly these two afterwards;
        # open counter windows folded them before the clear, so take the restored part back out.
        @functools.wraps(original)
        def wrapper(self, n):
            restored = {c: torch_xla._XLAC._xla_counter_value(c) or 0
                        for c in ("DynamoExtractCompiledGraph", "UncachedCompile")}
            result = original(self, n)
            for c, v in restored.items():
                if v:
                    _each("compensate", c, int(v))
            return result
        return wrapper

    def extract_internal(original):
        @functools.wraps(original)
        def wrapper(xla_model):
            n = sum(1 for nd in xla_model.graph.nodes if nd.op in ("call_function", "call_method", "call_module"))
            _each("on_partition", n)
            return original(xla_model)
        return wrapper

    def get_graph_hash(original):
        @functools.wraps(original)
        def wrapper(tensors):
            h = original(tensors)
            _tls.last_hash = h
            return h
        return wrapper

    def warm_up_cache(original):
        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            t0 = time.perf_counter_ns()
            out = original(*args, **kwargs)
            _each("on_bridge_compile", _hex(getattr(_tls, "last_hash", b"")), time.perf_counter_ns() - t0)
            return out
        return wrapper

    def run_cached_graph(original):
        @functools.wraps(original)
        def wrapper(graph_hash, graph_input):
            t0 = time.perf_counter_ns()
            out = original(graph_hash, graph_input)
            _each("on_execute", _hex(graph_hash), time.perf_counter_ns() - t0)
            return out
        return wrapper

    _patch(_output_graph.GraphCompileReason, "__post_init__", post_init)
    _patch(_convert_frame, "get_and_maybe_log_recompilation_reasons", recompile_reasons)
    # The openxla backend looks the function up on torch_xla.core.dynamo_bridge at call time.
    _patch(_core_bridge, "extract_compiled_graph", extract_compiled_graph)
    _patch(_bridge.UnsupportedNodesCollector, "get_unsupported_nodes", get_unsupported_nodes)
    _patch(_bridge.UnsupportedNodesCollector, "run_node", run_node)
    _patch(_bridge, "extract_internal", extract_internal)
    _patch(torch_xla._XLAC, "_get_graph_hash", get_graph_hash)
    _patch(torch_xla._XLAC, "_xla_warm_up_cache", warm_up_cache)
    _patch(torch_xla._XLAC, "_run_cached_graph", run_cached_graph)


def _uninstall() -> None:
    while _saved:
        owner, name, original = _saved.pop()
        setattr(owner, name, original)


def _hex(h: Any) -> str:
    return h.hex() if isinstance(h, (bytes, bytearray)) else str(h)


class BridgeWatch:
    """Reports Dynamo and bridge events to ``sink`` while open (nestable, any number at once)."""

    def __init__(self, sink: BridgeSink):
        self._sink = sink

    def __enter__(self) -> "BridgeWatch":
        global _sinks
        with _lock:
            if not _sinks:
                _install()
            _sinks = [*_sinks, self._sink]
        return self

    def __exit__(self, *exc) -> None:
        global _sinks
        with _lock:
            rest = list(_sinks)
            rest.remove(self._sink)
            _sinks = rest
            if not _sinks:
                _uninstall()
