"""The watches that feed a ledger: Dynamo, AOTAutograd and bridge events joined per compile id
(:class:`BridgeWatch`), and lazy-tensor syncs (:class:`SyncWatch`).

This module is the one recorder of Dynamo's, AOTAutograd's and the bridge's events, for every
sink (a :class:`BridgeSink`: the graph-break ledger, the script trace's Dynamo half). A compiled
call crosses four layers; while a :class:`BridgeWatch` is open, ``_compat.dynamo``'s and
``_compat.openxla``'s wrappers report each call, and this module joins them per Dynamo compile id
(``"1/0"``: frame 1, first compile), does the bookkeeping (a frame compile's duration, a bridge
extraction's partitions, nodes and XLA compiles) and hands every sink the finished events of
:mod:`torch_xla_ext._dynamo_events`:
  * Dynamo: each frame compile (compile id, code object, outcome), each graph break with Dynamo's
    structured record (gb_type, explanation, hints, developer context, GB id; the user frame),
    each recompile and its first failed guard, each graph handed to the backend (what
    ``torch._dynamo.explain`` counts). A split Dynamo neither logs nor counts (an unsupported op
    inside a call it inlined) is named by the Unsupported raised inside that call ("inherited"); a
    logged break no split followed gave up on the whole frame ("frame_skipped").
  * AOTAutograd: each forward, backward and inference graph the openxla backend compiles, tied to
    its Dynamo graph (a backward graph to the graph whose forward it belongs to).
  * the openxla bridge (at the graph's first run): each graph it extracts (tied to its AOT graph),
    the FX nodes left to eager, each XLA partition with its graph hash and compile time, and each
    cached-graph execution (a C++ :class:`Tap` writes straight into the open ledgers, so a step
    pays well under a microsecond).
The wrappers are installed when the first watch opens and removed when the last closes.

torch_xla 2.9's bridge fails a step whose compiled graph was never compiled ("Failed to get
computation by hash ... kicked out of the LRU cache"); it is raised as :class:`TorchXlaBridgeBug`
naming the cause, instead of surfacing from our wrapper.
"""

from __future__ import annotations

import collections
import itertools
import sys
import threading
import time
import weakref
from typing import Any, Callable

from torch_xla_ext import _versions
from torch_xla_ext._dynamo_events import (AotGraph, BridgeExtraction, DynamoGraph, FrameCompile, GraphBreak,
                                         Partition, Recompile, XlaCompile, no_text_break)
from torch_xla_ext._compat import dynamo as _dynamo
from torch_xla_ext._compat import lazy as _lazy
from torch_xla_ext._ext import graph_breaks as _core
from torch_xla_ext.errors import InternalError

__all__ = ["BridgeSink", "BridgeWatch", "SyncWatch", "TorchXlaBridgeBug", "attach_bridge"]


class TorchXlaBridgeBug(InternalError):
    """A failure inside torch_xla's openxla bridge that is torch_xla's, not torch_xla_ext's."""


class BridgeSink:
    """What a watch reports to (compile time only; per-step events go through the C++ Tap): the
    finished events of :mod:`torch_xla_ext._dynamo_events`, and two per-item calls for sinks that
    draw a timeline. Every method does nothing here; a sink overrides what it keeps."""

    def on_compile_start(self, compile_id: str, name: str, frame: str, t_ns: int) -> None: ...
    def on_frame_compile(self, ev: FrameCompile) -> None: ...
    def on_recompile(self, ev: Recompile) -> None: ...
    def on_graph_break(self, ev: GraphBreak) -> None: ...
    def on_dynamo_graph(self, ev: DynamoGraph) -> None: ...
    def on_aot_graph(self, ev: AotGraph) -> None: ...
    def on_partition(self, bridge: int | None, partition: Partition) -> None: ...
    def on_fallback_node(self, bridge: int | None, aten_op: str) -> None: ...
    def on_xla_compile(self, ev: XlaCompile) -> None: ...
    def on_bridge_extraction(self, ev: BridgeExtraction) -> None: ...
    def compensate(self, counter: str, restored: int) -> None: ...

    def ledgers(self) -> list[Any]:
        return []


_lock = threading.Lock()
_sinks: list[BridgeSink] = []  # copy on write, so readers iterate it without a copy
_tls = threading.local()
_graph_ids = itertools.count()
_bridge_ids = itertools.count()
# AOT graph (fx.GraphModule) -> (compile id, aot name, kind): the bridge sees the same object at
# the graph's first run, which may be much later (a backward graph runs in the backward pass).
_aot_graphs: "weakref.WeakKeyDictionary[Any, tuple[str, str, str]]" = weakref.WeakKeyDictionary()
_aot_owner: dict[str, int] = {}  # aot id -> the Dynamo graph whose forward it compiled
# Frame compiles begun and not ended (compile id -> name, frame, start), and bridge extractions
# under way (bridge key -> the event they fill): the bookkeeping every sink gets done.
_open_compiles: dict[str, tuple[str, str, int]] = {}
_open_bridges: dict[int, BridgeExtraction] = {}
_execute_tap: Any = None


def _each(method: str, *args: Any) -> None:
    for s in _sinks:
        getattr(s, method)(*args)


def _now() -> int:
    return time.monotonic_ns()


def _first_line(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0] if msg else ''}"


def _cause_inside(cid: str | None, call: Any) -> tuple[str, Any] | None:
    """(message, frame) of the newest Unsupported of compile `cid` raised inside `call` (a frame
    summary of the splitting frame): its stack passes through that call and goes deeper."""
    if call is None:
        return None
    here = (getattr(call, "filename", None), getattr(call, "lineno", None))
    for raised_cid, msg, stack in reversed(getattr(_tls, "unsupported", None) or ()):
        if raised_cid != cid:
            continue
        for f in stack[:-1]:
            if (f.filename, f.lineno) == here:
                return msg, stack[-1]
    return None


def _current_bridge() -> int | None:
    stack = getattr(_tls, "bridge", None)
    return stack[-1] if stack else None


class _Join:
    """The :class:`~torch_xla_ext._compat.dynamo.DynamoListener` and
    :class:`~torch_xla_ext._compat.openxla.BridgeListener`: per-thread join state, and sink events
    out."""

    def frame_start(self, cid: str, code: Any) -> None:
        _tls.pending_break = None
        _tls.unsupported = None
        _tls.counted = None
        _tls.breaks = {}
        t, frame = _now(), f"{code.co_filename}:{int(code.co_firstlineno)}"
        _open_compiles[cid] = (code.co_name, frame, t)
        _each("on_compile_start", cid, code.co_name, frame, t)

    def frame_end(self, cid: str, code: Any, error: BaseException | None) -> None:
        t = _now()
        self._skipped_frame(cid, code)
        _tls.pending_break = None
        started = _open_compiles.pop(cid, None)
        if started is None:  # began before the watch opened
            return
        name, frame, t0 = started
        _each("on_frame_compile", FrameCompile(compile_id=cid, name=name, frame=frame, ms=round((t - t0) / 1e6, 3),
                                               error=None if error is None else _first_line(error), t0_ns=t0, t1_ns=t))

    def _skipped_frame(self, cid: str, code: Any) -> None:
        """A break Dynamo logged that no split followed: it gave up on the whole frame (a break
        inside a for/while loop raises SkipFrame), which then runs uncompiled. Reported as a
        logged break of origin "frame_skipped"."""
        pending = getattr(_tls, "pending_break", None)
        if pending is None or pending[0] != cid:
            return
        frame = pending[2]
        _each("on_graph_break", _graph_break(
            cid, _dynamo.parse_graph_break(pending[1]), dynamo_reason="frame skipped: a graph break in a for/while loop",
            origin="frame_skipped", counted=False, split_at=None,
            file=str(getattr(frame, "filename", None) or code.co_filename),
            line=int(getattr(frame, "lineno", None) or code.co_firstlineno),
            function=str(getattr(frame, "name", None) or code.co_name)))

    def break_logged(self, cid: str | None, message: str, frame: Any) -> None:
        _tls.pending_break = (cid, message, frame)

    def break_counted(self, cid: str | None) -> None:
        _tls.counted = (cid,)  # the next split is the one Dynamo counted

    def unsupported_raised(self, cid: str | None, message: str, stack: list[Any]) -> None:
        # The newest of the compile raised inside the call a frame splits at without logging a
        # break is that split's cause.
        raised = getattr(_tls, "unsupported", None)
        if raised is None:
            raised = _tls.unsupported = collections.deque(maxlen=256)
        raised.append((cid, message, stack))

    def split(self, cid: str | None, key: int, reason: str, frame: Any) -> None:
        pending = getattr(_tls, "pending_break", None)
        head = reason.splitlines()[0] if reason else ""
        record = _dynamo.parse_graph_break(reason)
        origin, split_at = _dynamo.split_kind(reason), None
        if origin == "inherited":
            # An unsupported op inside a call Dynamo inlined: the calling frame splits at the
            # call and Dynamo neither logs nor counts it; name the op that caused it.
            split_at = frame
            cause = _cause_inside(cid, split_at)
            if cause is not None:
                record, frame = _dynamo.parse_graph_break(cause[0]), cause[1]
        if origin != "inherited" and not record["structured"] and pending is not None and pending[0] == cid:
            record = _dynamo.parse_graph_break(pending[1])
        _tls.pending_break = None
        counted = origin == "break" and getattr(_tls, "counted", None) == (cid,)
        _tls.counted = None
        ev = _graph_break(cid or "-", record, dynamo_reason=head, origin=origin, counted=counted,
                          file=str(getattr(frame, "filename", "") or ""), line=int(getattr(frame, "lineno", 0) or 0),
                          function=str(getattr(frame, "name", "") or ""),
                          split_at=(f"{getattr(split_at, 'filename', '')}:{getattr(split_at, 'lineno', 0)}"
                                    if split_at is not None else None))
        breaks = getattr(_tls, "breaks", None)
        if breaks is not None:
            breaks[key] = ev
        _each("on_graph_break", ev)

    def recompile(self, cid: str | None, failed_guard: str, file: str, line: int) -> None:
        _each("on_recompile", Recompile(compile_id=cid or "-", reason=failed_guard, frame=f"{file}:{line}"))

    def dynamo_graph_start(self, cid: str | None, nodes: int, ops: int, split_key: int | None,
                           split_reason: str | None) -> Any:
        graph = next(_graph_ids)
        ended_by = None
        if split_key is not None:  # Dynamo split here (GraphCompileReason.graph_break), whatever its text
            brk = (getattr(_tls, "breaks", None) or {}).get(split_key)
            if brk is None:  # a break recorded before the watch opened
                brk = _graph_break(cid or "-", _dynamo.parse_graph_break(split_reason or ""))
            ended_by = (brk.gb_type or no_text_break) + (f" at {brk.frame}" if brk.file else "")
        _each("on_dynamo_graph", DynamoGraph(compile_id=cid or "-", graph=graph, nodes=nodes, ops=ops,
                                             ended_by=ended_by))
        outer = getattr(_tls, "dynamo_graph", None)
        _tls.dynamo_graph = graph
        return outer

    def dynamo_graph_end(self, outer: Any) -> None:
        _tls.dynamo_graph = outer

    def backend_graph(self, cid: str | None, model: Any, aot_name: str | None, aot_id: str | None, kind: str,
                      nodes: int) -> None:
        cid = cid or "-"
        graph = getattr(_tls, "dynamo_graph", None)
        if aot_id is not None:
            if kind == "backward":
                graph = _aot_owner.get(aot_id, graph)
            elif graph is not None:
                _aot_owner[aot_id] = graph
        name = aot_name if aot_name is not None else f"dynamo_graph_{graph}"
        _aot_graphs[model] = (cid, name, kind)
        _each("on_aot_graph", AotGraph(compile_id=cid, graph=graph, name=name, kind=kind, nodes=nodes))

    def bridge_start(self, model: Any, nodes: int) -> Any:
        key = next(_bridge_ids)
        info = _aot_graphs.get(model)
        _open_bridges[key] = BridgeExtraction(bridge=key, compile_id=info[0] if info else None,
                                              aot_name=info[1] if info else None, nodes=nodes, t0_ns=_now())
        stack = getattr(_tls, "bridge", None)
        if stack is None:
            stack = _tls.bridge = []
        stack.append(key)
        return key

    def bridge_end(self, key: Any, error: BaseException | None) -> None:
        _tls.bridge.pop()
        b = _open_bridges.pop(key, None)
        if b is None:
            return
        b.t1_ns = _now()
        b.ms = round((b.t1_ns - b.t0_ns) / 1e6, 3)
        b.error = None if error is None else _first_line(error)
        _each("on_bridge_extraction", b)

    def unsupported_node(self, aten_op: str | None, node: str) -> None:
        key = _current_bridge()
        b = _open_bridges.get(key) if key is not None else None
        if aten_op is not None:
            if b is not None:
                b.fallback_nodes.append(aten_op)
            _each("on_fallback_node", key, aten_op)
        elif b is not None:  # an input, constant or output holding a non-XLA tensor
            b.eager_nodes.append(node)

    def counter_restored(self, counter: str, value: int) -> None:
        # Open counter windows folded it before the bridge's clear: take the restored part back out.
        _each("compensate", counter, value)

    def partition(self, nodes: int, graph_hash: str, t0_ns: int, t1_ns: int) -> None:
        key = _current_bridge()
        p = Partition(graph_hash=graph_hash, nodes=nodes)
        if key in _open_bridges:
            _open_bridges[key].partitions.append(p)
        _each("on_partition", key, p)

    def bridge_compile(self, graph_hash: str, t0_ns: int, t1_ns: int) -> None:
        key = _current_bridge()
        b = _open_bridges.get(key) if key is not None else None
        # CompileTime's count once it compiled: the script trace's lazy record of the same compile has it as its ordinal.
        ev = XlaCompile(graph_hash=graph_hash, ms=round((t1_ns - t0_ns) / 1e6, 3),
                        compile_id=b.compile_id if b is not None else None, ordinal=_metrics().compile_count(),
                        t0_ns=t0_ns, t1_ns=t1_ns)
        if b is not None:
            b.compiles.append(ev)
        _each("on_xla_compile", ev)


def _graph_break(cid: str, parsed: dict[str, Any], **fields: Any) -> GraphBreak:
    """A GraphBreak from ``_compat.dynamo.parse_graph_break``'s fields and the join's."""
    return GraphBreak(compile_id=cid, gb_type=parsed["gb_type"], gb_id=parsed["gb_id"], explanation=parsed["explanation"],
                      hints=list(parsed["hints"]), context=parsed["context"], doc=parsed["doc"], **fields)


def _metrics() -> Any:
    # Imports torch_xla: only once the bridge (which exists only with torch_xla) compiles.
    from torch_xla_ext._compat import metrics

    return metrics


_JOIN = _Join()


def _explain_bridge_error(exc: BaseException) -> None:
    """Raises TorchXlaBridgeBug for torch_xla 2.9's never-compiled cached graph; returns for
    anything else (the Tap then re-raises the original)."""
    if _dynamo.is_lru_miss(exc):
        raise TorchXlaBridgeBug(
            "torch_xla 2.9's openxla bridge has no compiled computation for a graph it runs (\""
            + str(exc).strip().splitlines()[-1] + "\"). This is a torch_xla bug, not torch_xla_ext's: it is "
            "seen when a compiled graph only passes an input through, e.g. a training step ending in "
            "`return loss.detach()` (loss.backward() splits the step, and the last graph only detaches "
            "the loss). Return a computed tensor instead (`loss.detach() * 1.0`), or return nothing and "
            "read the loss outside the compiled function."
        ) from exc


def _execute_stand_in(original: Callable[..., Any]) -> Callable[..., Any]:
    global _execute_tap
    _execute_tap = _core.Tap(original, "execute", replica_fn=_lazy.replica, on_error=_explain_bridge_error)
    return _execute_tap.stand_in()


_bridge_installed = False


def _torch_xla_loaded() -> bool:
    """torch_xla finished importing in this process: the openxla bridge is there to watch (a
    torch-only process watches Dynamo alone)."""
    m = sys.modules.get("torch_xla")
    return m is not None and not getattr(getattr(m, "__spec__", None), "_initializing", False)


def _install_bridge_if_ready(loaded: bool = False) -> None:
    global _bridge_installed
    if _bridge_installed or not _sinks or not (loaded or _torch_xla_loaded()):
        return
    _versions.require("graph_breaks.openxla")
    # Imports torch_xla and its bridge: only once torch_xla has finished importing.
    from torch_xla_ext._compat import openxla as _openxla

    _openxla.install(_JOIN, _execute_stand_in)
    _bridge_installed = True


def attach_bridge(loaded: bool = False) -> None:
    """Watches the openxla bridge too, now that torch_xla is imported (for watches opened while
    only Dynamo was: a script trace starts watching when Dynamo loads, inside torch_xla's import).
    ``loaded``: torch_xla's module has run to its end (an import hook's caller knows; Python still
    marks the module as initializing until the import returns)."""
    with _lock:
        _install_bridge_if_ready(loaded)


def _set_tap_ledgers() -> None:
    if _execute_tap is not None:
        _execute_tap.set_ledgers([ledger for s in _sinks for ledger in s.ledgers()])


class BridgeWatch:
    """Reports Dynamo, AOTAutograd and bridge events to ``sink`` while open (nestable, any
    number at once); cached-graph executions go to ``sink.ledgers()`` through a C++ Tap."""

    def __init__(self, sink: BridgeSink):
        self._sink = sink

    def __enter__(self) -> "BridgeWatch":
        global _sinks
        with _lock:
            if not _sinks:
                _dynamo.install(_JOIN)
            _sinks = [*_sinks, self._sink]
            _install_bridge_if_ready()
            _set_tap_ledgers()
        return self

    def __exit__(self, *exc: Any) -> None:
        global _sinks, _execute_tap, _bridge_installed
        with _lock:
            rest = list(_sinks)
            rest.remove(self._sink)
            _sinks = rest
            _set_tap_ledgers()
            if not _sinks:
                if _bridge_installed:
                    sys.modules["torch_xla_ext._compat.openxla"].uninstall()
                    _bridge_installed = False
                _dynamo.uninstall()
                _execute_tap = None
                _aot_owner.clear()
                _open_compiles.clear()
                _open_bridges.clear()


# ---- lazy-tensor syncs -----------------------------------------------------------------------

_sync_lock = threading.Lock()
_sync_ledgers: list[Any] = []  # copy on write
_sync_tap: Any = None


class SyncWatch:
    """Records each lazy-tensor sync (``torch_xla.sync()`` / ``xm.mark_step()``, both end in
    torch_xla's step marker) into ``ledger`` (a ``_ext.graph_breaks.Ledger``) while open: one
    ``sync`` event keyed by how many graphs it launched, with its duration and the calling
    thread's replica. A C++ Tap stands in for the step marker, so a sync pays under a microsecond."""

    def __init__(self, ledger: Any, replica_fn: Callable[[], int] | None = None):
        self._ledger = ledger
        self._replica_fn = replica_fn

    def __enter__(self) -> "SyncWatch":
        global _sync_ledgers, _sync_tap

        def stand_in(original: Callable[..., Any]) -> Callable[..., Any]:
            global _sync_tap
            _sync_tap = _core.Tap(original, "sync", replica_fn=self._replica_fn,
                                  counter_value=_metrics().counter_reader())
            return _sync_tap.stand_in()

        with _sync_lock:
            if not _sync_ledgers:
                _lazy.replace_step_marker(stand_in)
            _sync_ledgers = [*_sync_ledgers, self._ledger]
            _sync_tap.set_ledgers(_sync_ledgers)
        return self

    def __exit__(self, *exc: Any) -> None:
        global _sync_ledgers, _sync_tap
        with _sync_lock:
            rest = list(_sync_ledgers)
            rest.remove(self._ledger)
            _sync_ledgers = rest
            _sync_tap.set_ledgers(_sync_ledgers)
            if not _sync_ledgers:
                _lazy.restore_step_marker()
                _sync_tap = None
