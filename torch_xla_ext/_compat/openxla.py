"""AOTAutograd's openxla backend and torch_xla's Dynamo bridge (``torch_xla._dynamo.dynamo_bridge``),
the torch_xla half of what :mod:`torch_xla_ext._compat.dynamo` does for Dynamo: the one place that
wraps their entry points. Each has a canary in ``tests/graph_breaks/compat_canary_test.py``.

:func:`install` wraps these entry points and forwards each call, as plain values, to one
:class:`BridgeListener` (``graph_breaks.watch``); the wrappers call through unchanged:
  * AOTAutograd: ``xla_backend_helper`` (each forward/backward/inference graph of the openxla
    backend, named by ``get_graph_being_compiled()``).
  * the openxla bridge: ``extract_compiled_graph``, ``UnsupportedNodesCollector`` (fallback
    nodes; its per-node counter clear and restore), ``extract_internal`` with ``_get_graph_hash``
    (an XLA partition), ``_xla_warm_up_cache`` (its compile) and ``_run_cached_graph`` (replaced
    by what the caller makes of the original: a C++ Tap).
"""

from __future__ import annotations

import functools
import re
import threading
import time
from typing import Any, Callable, Protocol

import torch._dynamo.backends.torchxla as _xla_backend
import torch_xla
import torch_xla._dynamo.dynamo_bridge as _bridge
import torch_xla.core.dynamo_bridge as _core_bridge
from torch._functorch.aot_autograd import get_graph_being_compiled

from torch_xla_ext._compat.dynamo import aten_op_name, count_ops, current_compile_id, patch, restore
from torch_xla_ext._compat.lazy import replica
from torch_xla_ext.errors import InternalError

__all__ = ["BridgeListener", "install", "replica", "uninstall"]


class BridgeListener(Protocol):
    """What :func:`install` reports to: each call of a wrapped entry point, as plain values."""

    def backend_graph(self, compile_id: str | None, model: Any, aot_name: str | None, aot_id: str | None,
                      kind: str, nodes: int) -> None: ...
    def bridge_start(self, model: Any, nodes: int) -> Any: ...
    def bridge_end(self, token: Any, error: BaseException | None) -> None: ...
    def unsupported_node(self, aten_op: str | None, node: str) -> None: ...
    def counter_restored(self, counter: str, value: int) -> None: ...
    def partition(self, nodes: int, graph_hash: str, t0_ns: int, t1_ns: int) -> None: ...
    def bridge_compile(self, graph_hash: str, t0_ns: int, t1_ns: int) -> None: ...


_saved: list[tuple[Any, str, Any]] = []
_tls = threading.local()
_AOT_NAME = re.compile(r"__(\d+)_(forward|backward|inference)_\d+$")
_compile_id = current_compile_id


def _hex(h: Any) -> str:
    if h is None:
        return ""
    return h.hex() if isinstance(h, (bytes, bytearray)) else str(h)


def install(listener: BridgeListener, run_cached_graph: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Wraps the entry points (see the module docstring) to report to ``listener``, and replaces
    ``_XLAC._run_cached_graph`` with ``run_cached_graph(original)``. :func:`uninstall` undoes it."""
    if _saved:
        raise InternalError("torch_xla_ext._compat.openxla.install: already installed")
    L = listener

    def backend_helper(original):
        # openxla = aot_autograd(fw_compiler=openxla_eval_boxed): forward, backward and
        # inference graphs all end here; AOT's own name for the graph tells which.
        @functools.wraps(original)
        def wrapper(model, fake_tensor_inputs, *args, **kwargs):
            name = str(get_graph_being_compiled() or "")
            m = _AOT_NAME.search(name)
            # openxla_eval: Dynamo's graph, no AOTAutograd
            L.backend_graph(_compile_id(), model, name if m else None, m.group(1) if m else None,
                            m.group(2) if m else "dynamo", count_ops(model)[0])
            return original(model, fake_tensor_inputs, *args, **kwargs)
        return wrapper

    def extract_compiled_graph(original):
        @functools.wraps(original)
        def wrapper(xla_model, xla_args):
            token = L.bridge_start(xla_model, count_ops(xla_model)[0])
            try:
                out = original(xla_model, xla_args)
            except BaseException as e:  # the bridge's own error, recorded on the partition and re-raised unchanged
                L.bridge_end(token, e)
                raise
            L.bridge_end(token, None)
            return out
        return wrapper

    def get_unsupported_nodes(original):
        @functools.wraps(original)
        def wrapper(self):
            nodes = original(self)
            for node in nodes:
                op = aten_op_name(node.target) if node.op == "call_function" else None
                # op None: an input, constant or output holding a non-XLA tensor
                L.unsupported_node(op, f"{node.op} {node.name}")
            return nodes
        return wrapper

    def run_node(original):
        # The collector clears all counters per node and restores exactly these two afterwards.
        @functools.wraps(original)
        def wrapper(self, n):
            restored = {c: torch_xla._XLAC._xla_counter_value(c) or 0
                        for c in ("DynamoExtractCompiledGraph", "UncachedCompile")}
            result = original(self, n)
            for c, v in restored.items():
                if v:
                    L.counter_restored(c, int(v))
            return result
        return wrapper

    def extract_internal(original):
        @functools.wraps(original)
        def wrapper(xla_model):
            nodes = count_ops(xla_model)[0]
            _tls.last_hash = None
            t0 = time.monotonic_ns()
            out = original(xla_model)
            L.partition(nodes, _hex(getattr(_tls, "last_hash", None)), t0, time.monotonic_ns())
            return out
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
            t0 = time.monotonic_ns()
            out = original(*args, **kwargs)
            L.bridge_compile(_hex(getattr(_tls, "last_hash", None)), t0, time.monotonic_ns())
            return out
        return wrapper

    patch(_saved, _xla_backend, "xla_backend_helper", backend_helper)
    # The openxla backend looks the function up on torch_xla.core.dynamo_bridge at call time.
    patch(_saved, _core_bridge, "extract_compiled_graph", extract_compiled_graph)
    patch(_saved, _bridge.UnsupportedNodesCollector, "get_unsupported_nodes", get_unsupported_nodes)
    patch(_saved, _bridge.UnsupportedNodesCollector, "run_node", run_node)
    patch(_saved, _bridge, "extract_internal", extract_internal)
    patch(_saved, torch_xla._XLAC, "_get_graph_hash", get_graph_hash)
    patch(_saved, torch_xla._XLAC, "_xla_warm_up_cache", warm_up_cache)
    patch(_saved, torch_xla._XLAC, "_run_cached_graph", run_cached_graph)


def uninstall() -> None:
    """Restores every entry point :func:`install` wrapped."""
    restore(_saved)
