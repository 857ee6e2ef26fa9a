"""Dynamo, AOTAutograd's openxla backend and torch_xla's Dynamo bridge, in one place.

A compiled call crosses four layers; while a :class:`BridgeWatch` is open, thin wrappers report
each to its sink, keyed so the layers join up per Dynamo compile id (``"1/0"``: frame 1, first
compile):
  * Dynamo: each frame compile (``convert_frame._compile``: compile id, code object, outcome),
    each graph break with Dynamo's structured record (``log_graph_break``'s message: gb_type,
    explanation, hints, developer context, and the GB id from torch's graph-break registry; the
    user frame from ``GraphCompileReason``), each recompile and its first failed guard
    (``get_and_maybe_log_recompilation_reasons``), each graph handed to the backend
    (``OutputGraph.call_user_compiler``, what ``torch._dynamo.explain`` counts).
  * AOTAutograd: each forward, backward and inference graph the openxla backend is asked to
    compile (``xla_backend_helper``, named by ``get_graph_being_compiled()``).
  * the openxla bridge (at the graph's first run): each graph it extracts
    (``extract_compiled_graph``), the FX nodes ``UnsupportedNodesCollector`` leaves to eager,
    each XLA partition (``extract_internal``) with its graph hash and compile time
    (``_xla_warm_up_cache``), and each cached-graph execution (``_run_cached_graph``: a C++
    :class:`Tap` writes straight into the open ledgers, so a step pays well under a microsecond).
The wrappers call through unchanged, so results do not change. They are installed when the first
watch opens and removed when the last closes.

torch_xla 2.9's bridge fails a step whose compiled graph was never compiled ("Failed to get
computation by hash ... kicked out of the LRU cache"); it is recognised here and raised as
:class:`TorchXlaBridgeBug` naming the cause, instead of surfacing from our wrapper.
"""

from __future__ import annotations

import collections
import functools
import itertools
import linecache
import os
import re
import threading
import time
import weakref
from typing import Any, Callable, Protocol

import torch
import torch._dynamo.backends.torchxla as _xla_backend
import torch._dynamo.convert_frame as _convert_frame
import torch._dynamo.exc as _dynamo_exc
import torch._dynamo.output_graph as _output_graph
import torch._dynamo.symbolic_convert as _symbolic_convert
import torch._guards
import torch_xla
import torch_xla._dynamo.dynamo_bridge as _bridge
import torch_xla.core.dynamo_bridge as _core_bridge
from torch._functorch.aot_autograd import get_graph_being_compiled

from torch_xla_ext._ext import graph_breaks as _core
from torch_xla_ext.errors import InternalError

__all__ = ["BridgeSink", "BridgeWatch", "KNOWN_FAILURES", "TorchXlaBridgeBug", "aten_op_name", "describe_failure",
           "parse_graph_break", "replica", "reset_dynamo"]


class TorchXlaBridgeBug(InternalError):
    """A failure inside torch_xla's openxla bridge that is torch_xla's, not torch_xla_ext's."""


class BridgeSink(Protocol):
    """What a watch reports to (compile time only; per-step events go through the C++ Tap)."""

    def on_compile_start(self, compile_id: str, name: str, file: str, line: int, t_ns: int) -> None: ...
    def on_compile_end(self, compile_id: str, t_ns: int, error: str | None) -> None: ...
    def on_recompile(self, compile_id: str, failed_guard: str, file: str, line: int) -> None: ...
    def on_graph_break(self, compile_id: str, record: dict[str, Any]) -> None: ...
    def on_dynamo_graph(self, compile_id: str, graph: int, nodes: int, ops: int,
                        ended_by: dict[str, Any] | None) -> None: ...
    def on_aot_graph(self, compile_id: str, graph: int | None, name: str, kind: str, nodes: int) -> None: ...
    def on_bridge_start(self, bridge: int, aot_name: str | None, compile_id: str | None, nodes: int,
                        t_ns: int) -> None: ...
    def on_bridge_end(self, bridge: int, t_ns: int, error: str | None) -> None: ...
    def on_fallback_node(self, bridge: int | None, aten_op: str) -> None: ...
    def on_eager_node(self, bridge: int | None, node: str) -> None: ...
    def on_partition(self, bridge: int | None, nodes: int, graph_hash: str, t0_ns: int, t1_ns: int) -> None: ...
    def on_bridge_compile(self, graph_hash: str, t0_ns: int, t1_ns: int) -> None: ...
    def compensate(self, counter: str, restored: int) -> None: ...
    def ledgers(self) -> list[Any]: ...


def aten_op_name(target: Any) -> str | None:
    """'aten::digamma' for torch.ops.aten.digamma.default (any operator overload or packet, in
    any namespace: aten, prims, a custom op's); None for anything that is not a torch operator
    (a Python callable such as operator.getitem)."""
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        schema_name = getattr(target, "_schema", None)
        if schema_name is not None:
            return str(schema_name.name)
        return str(target.name())
    return None


def reset_dynamo() -> None:
    """Fresh Dynamo state: compiled frames, guards and counters forgotten."""
    torch._dynamo.reset()


def replica() -> int:
    """The device ordinal of the calling thread's default XLA device: the replica a thread of
    torch_xla's thread-per-device execution drives (0 in a one-device process)."""
    return int(torch_xla._XLAC._xla_get_device_ordinal(torch_xla._XLAC._xla_get_default_device()))


# ---- Dynamo's structured graph-break record ----------------------------------------------------

_GB_IDS: dict[str, str] | None = None
_DOC_LINK = re.compile(r"please visit:\s*(\S+/gb(\d+)\.html)")


def _gb_ids() -> dict[str, str]:
    """gb_type -> 'GB0123' from torch's graph-break registry (torch/_dynamo/graph_break_registry.json)."""
    global _GB_IDS
    if _GB_IDS is None:
        load = getattr(_dynamo_exc, "_load_gb_type_to_gb_id_map", None)
        _GB_IDS = dict(load()) if load is not None else {}
    return _GB_IDS


def parse_graph_break(text: str) -> dict[str, Any]:
    """Dynamo's graph-break message (``torch._dynamo.exc.format_graph_break_message``: gb_type,
    "Explanation:", "Hint:" lines, "Developer debug context:", a documentation link) as fields.
    A message without that structure keeps its first line as ``gb_type`` and no GB id.

    Example:
        >>> parse_graph_break("Data-dependent branching\\n  Explanation: Detected ...")["gb_type"]
        'Data-dependent branching'
    """
    lines = str(text).splitlines()
    head = next((ln.strip() for ln in lines if ln.strip()), "")
    fields: dict[str, list[str]] = {"explanation": [], "context": []}
    hints: list[str] = []
    current: list[str] | None = None
    link = None
    for ln in lines[1:]:
        s = ln.strip()
        if s.startswith("Explanation:"):
            current = fields["explanation"]
            current.append(s[len("Explanation:"):].strip())
        elif s.startswith("Hint:"):
            hints.append(s[len("Hint:"):].strip())
            current = None
        elif s.startswith("Developer debug context:"):
            current = fields["context"]
            current.append(s[len("Developer debug context:"):].strip())
        elif s.startswith("For more details"):
            m = _DOC_LINK.search(s)
            link = m.group(1) if m else None
            current = None
        elif s and current is not None:
            current.append(s)
        elif s and hints and ln.startswith("    "):  # a hint's continuation line
            hints[-1] += " " + s
    structured = bool(fields["explanation"])
    gb_id = _gb_ids().get(head) if structured else None
    if gb_id is None and link:
        gb_id = "GB" + _DOC_LINK.search(f"please visit: {link}").group(2)  # type: ignore[union-attr]
    if link is None and gb_id is not None:
        doc = getattr(_dynamo_exc, "get_gbid_documentation_link", None)
        link = doc(head) if doc is not None else None
    return {
        "gb_type": head,
        "gb_id": gb_id,
        "explanation": " ".join(fields["explanation"]),
        "hints": hints,
        "context": " ".join(fields["context"]),
        "doc": link,
        "structured": structured,
    }


# ---- the wrappers ------------------------------------------------------------------------------

# GraphCompileReason of a split at an instruction whose speculation failed (symbolic_convert's
# step_graph_break): the cause was an Unsupported raised while inlining a call.
STEP_UNSUPPORTED = "step_unsupported"

_lock = threading.Lock()
_sinks: list[BridgeSink] = []  # copy on write, so readers iterate it without a copy
_saved: list[tuple[Any, str, Any]] = []
_tls = threading.local()
_graph_ids = itertools.count()
_bridge_ids = itertools.count()
# AOT graph (fx.GraphModule) -> (compile id, aot name, kind): the bridge sees the same object at
# the graph's first run, which may be much later (a backward graph runs in the backward pass).
_aot_graphs: "weakref.WeakKeyDictionary[Any, tuple[str, str, str]]" = weakref.WeakKeyDictionary()
_aot_owner: dict[str, int] = {}  # aot id -> the Dynamo graph whose forward it compiled
_execute_tap: Any = None
_AOT_NAME = re.compile(r"__(\d+)_(forward|backward|inference)_\d+$")


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


def _skipped_frame(cid: str, code: Any) -> None:
    """A break Dynamo logged that no split followed: it gave up on the whole frame (a break inside
    a for/while loop raises SkipFrame), which then runs uncompiled. Reported as a logged break of
    origin "frame_skipped"."""
    pending = getattr(_tls, "pending_break", None)
    if pending is None or pending[0] != cid:
        return
    record = parse_graph_break(pending[1])
    frame = pending[2]
    record.update(dynamo_reason="frame skipped: a graph break in a for/while loop", origin="frame_skipped",
                  counted=False, split_at=None,
                  file=str(getattr(frame, "filename", None) or code.co_filename),
                  line=int(getattr(frame, "lineno", None) or code.co_firstlineno),
                  function=str(getattr(frame, "name", None) or code.co_name))
    _each("on_graph_break", cid, record)


def _each(method: str, *args: Any) -> None:
    for s in _sinks:
        getattr(s, method)(*args)


def _compile_id() -> str | None:
    cid = torch._guards.CompileContext.current_compile_id()
    return None if cid is None else str(cid)


def _now() -> int:
    return time.monotonic_ns()


def _first_line(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0] if msg else ''}"


def _count_ops(gm: Any) -> tuple[int, int]:
    nodes = ops = 0
    for nd in gm.graph.nodes:
        nodes += 1
        if nd.op in ("call_function", "call_method", "call_module"):
            ops += 1
    return nodes, ops


def _patch(owner: Any, name: str, make: Callable[[Any], Any]) -> None:
    original = getattr(owner, name)
    _saved.append((owner, name, original))
    setattr(owner, name, make(original))


def _install() -> None:
    global _execute_tap

    def compile_frame(original):
        @functools.wraps(original)
        def wrapper(code, *args, **kwargs):
            cid = str(kwargs.get("compile_id"))
            _tls.pending_break = None
            _tls.unsupported = None
            _tls.counted = None
            _tls.breaks = {}
            _each("on_compile_start", cid, code.co_name, code.co_filename, int(code.co_firstlineno), _now())
            try:
                result = original(code, *args, **kwargs)
            except BaseException as e:
                _each("on_compile_end", cid, _now(), _first_line(e))
                raise
            finally:
                _skipped_frame(cid, code)
                _tls.pending_break = None
            _each("on_compile_end", cid, _now(), None)
            return result
        return wrapper

    def log_graph_break(original):
        # The message logged here carries Dynamo's structure even where the GraphCompileReason
        # that follows does not (a data-dependent jump's reason is just "generic_jump ...").
        @functools.wraps(original)
        def wrapper(code_options, reason="", *args, **kwargs):
            stack = kwargs.get("user_stack") or (args[1] if len(args) > 1 else None)
            _tls.pending_break = (_compile_id(), str(reason), stack[-1] if stack else None)
            return original(code_options, reason, *args, **kwargs)
        return wrapper

    def unsupported_raised(original):
        # Every Unsupported counts itself as "unimplemented" when raised (many are caught inside
        # Dynamo): the newest of the compile raised inside the call a frame splits at without
        # logging a break ("step_unsupported") is that split's cause.
        @functools.wraps(original)
        def wrapper(self, category="unimplemented"):
            original(self, category)
            if category == "graph_break":  # what counters["graph_break"] counts: the next split is this one
                _tls.counted = (_compile_id(),)
            if category == "unimplemented":  # the message and the frames, not the exception and its traceback
                raised = getattr(_tls, "unsupported", None)
                if raised is None:
                    raised = _tls.unsupported = collections.deque(maxlen=256)
                raised.append((_compile_id(), str(self.msg), list(getattr(self, "real_stack", None) or [])))
        return wrapper

    def post_init(original):
        @functools.wraps(original)
        def wrapper(self):
            original(self)
            if not self.graph_break:
                return
            cid = _compile_id()
            pending = getattr(_tls, "pending_break", None)
            text = str(self.reason)
            head = text.splitlines()[0] if text else ""
            record = parse_graph_break(text)
            frame = self.user_stack[-1] if self.user_stack else None
            origin, split_at = "break", None
            if head.startswith("generic_jump"):
                origin = "jump"
            elif head == STEP_UNSUPPORTED:
                # An unsupported op inside a call Dynamo inlined: the calling frame splits at the
                # call and Dynamo neither logs nor counts it; name the op that caused it.
                origin, split_at = "inherited", frame
                cause = _cause_inside(cid, split_at)
                if cause is not None:
                    record, frame = parse_graph_break(cause[0]), cause[1]
            if origin != "inherited" and not record["structured"] and pending is not None and pending[0] == cid:
                record = parse_graph_break(pending[1])
            _tls.pending_break = None
            counted = origin == "break" and getattr(_tls, "counted", None) == (cid,)
            _tls.counted = None
            record.update(dynamo_reason=head, origin=origin, counted=counted,
                          file=str(getattr(frame, "filename", "") or ""),
                          line=int(getattr(frame, "lineno", 0) or 0),
                          function=str(getattr(frame, "name", "") or ""),
                          split_at=(f"{getattr(split_at, 'filename', '')}:{getattr(split_at, 'lineno', 0)}"
                                    if split_at is not None else None))
            breaks = getattr(_tls, "breaks", None)
            if breaks is not None:
                breaks[id(self)] = record
            _each("on_graph_break", cid or "-", record)
        return wrapper

    def recompile_reasons(original):
        @functools.wraps(original)
        def wrapper(cache_entry, frame, *args, **kwargs):
            reasons = original(cache_entry, frame, *args, **kwargs)
            if not kwargs.get("skip_logging", False) and not (args and args[0]):
                code = frame.f_code
                reason = reasons[0] if reasons else "unable to find recompilation reasons"
                _each("on_recompile", _compile_id() or "-", str(reason).strip(), code.co_filename,
                      int(code.co_firstlineno))
            return reasons
        return wrapper

    def call_user_compiler(original):
        @functools.wraps(original)
        def wrapper(self, gm, example_inputs):
            graph = next(_graph_ids)
            nodes, ops = _count_ops(gm)
            reason = getattr(gm, "compile_subgraph_reason", None)
            ended_by = None
            if reason is not None and reason.graph_break:
                ended_by = (getattr(_tls, "breaks", None) or {}).get(id(reason))
                if ended_by is None:  # a break recorded before the watch opened
                    ended_by = parse_graph_break(str(reason.reason))
            _each("on_dynamo_graph", _compile_id() or "-", graph, nodes, ops, ended_by)
            outer = getattr(_tls, "dynamo_graph", None)
            _tls.dynamo_graph = graph
            try:
                return original(self, gm, example_inputs)
            finally:
                _tls.dynamo_graph = outer
        return wrapper

    def backend_helper(original):
        # openxla = aot_autograd(fw_compiler=openxla_eval_boxed): forward, backward and
        # inference graphs all end here; AOT's own name for the graph tells which.
        @functools.wraps(original)
        def wrapper(model, fake_tensor_inputs, *args, **kwargs):
            name = str(get_graph_being_compiled() or "")
            m = _AOT_NAME.search(name)
            kind = m.group(2) if m else "dynamo"  # openxla_eval: Dynamo's graph, no AOTAutograd
            cid = _compile_id() or "-"
            graph = getattr(_tls, "dynamo_graph", None)
            if m:
                if kind == "backward":
                    graph = _aot_owner.get(m.group(1), graph)
                elif graph is not None:
                    _aot_owner[m.group(1)] = graph
            _aot_graphs[model] = (cid, name if m else f"dynamo_graph_{graph}", kind)
            _each("on_aot_graph", cid, graph, name if m else f"dynamo_graph_{graph}", kind, _count_ops(model)[0])
            return original(model, fake_tensor_inputs, *args, **kwargs)
        return wrapper

    def extract_compiled_graph(original):
        @functools.wraps(original)
        def wrapper(xla_model, xla_args):
            key = next(_bridge_ids)
            info = _aot_graphs.get(xla_model)
            _each("on_bridge_start", key, info[1] if info else None, info[0] if info else None,
                  _count_ops(xla_model)[0], _now())
            stack = getattr(_tls, "bridge", None)
            if stack is None:
                stack = _tls.bridge = []
            stack.append(key)
            try:
                out = original(xla_model, xla_args)
            except BaseException as e:
                _each("on_bridge_end", key, _now(), _first_line(e))
                raise
            finally:
                stack.pop()
            _each("on_bridge_end", key, _now(), None)
            return out
        return wrapper

    def current_bridge() -> int | None:
        stack = getattr(_tls, "bridge", None)
        return stack[-1] if stack else None

    def get_unsupported_nodes(original):
        @functools.wraps(original)
        def wrapper(self):
            nodes = original(self)
            key = current_bridge()
            for node in nodes:
                op = aten_op_name(node.target) if node.op == "call_function" else None
                if op is not None:
                    _each("on_fallback_node", key, op)
                else:  # an input, constant or output holding a non-XLA tensor
                    _each("on_eager_node", key, f"{node.op} {node.name}")
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
            nodes = _count_ops(xla_model)[0]
            _tls.last_hash = None
            t0 = _now()
            out = original(xla_model)
            _each("on_partition", current_bridge(), nodes, _hex(getattr(_tls, "last_hash", None)), t0, _now())
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
            t0 = _now()
            out = original(*args, **kwargs)
            _each("on_bridge_compile", _hex(getattr(_tls, "last_hash", None)), t0, _now())
            return out
        return wrapper

    _patch(_convert_frame, "_compile", compile_frame)
    _patch(_convert_frame, "get_and_maybe_log_recompilation_reasons", recompile_reasons)
    _patch(_symbolic_convert, "log_graph_break", log_graph_break)
    _patch(_output_graph.GraphCompileReason, "__post_init__", post_init)
    _patch(_dynamo_exc.Unsupported, "add_to_stats", unsupported_raised)
    _patch(_output_graph.OutputGraph, "call_user_compiler", call_user_compiler)
    _patch(_xla_backend, "xla_backend_helper", backend_helper)
    # The openxla backend looks the function up on torch_xla.core.dynamo_bridge at call time.
    _patch(_core_bridge, "extract_compiled_graph", extract_compiled_graph)
    _patch(_bridge.UnsupportedNodesCollector, "get_unsupported_nodes", get_unsupported_nodes)
    _patch(_bridge.UnsupportedNodesCollector, "run_node", run_node)
    _patch(_bridge, "extract_internal", extract_internal)
    _patch(torch_xla._XLAC, "_get_graph_hash", get_graph_hash)
    _patch(torch_xla._XLAC, "_xla_warm_up_cache", warm_up_cache)
    _execute_tap = _core.Tap(torch_xla._XLAC._run_cached_graph, "execute", replica_fn=replica,
                             on_error=_explain_bridge_error)
    _patch(torch_xla._XLAC, "_run_cached_graph", lambda original: _execute_tap.stand_in())


def _uninstall() -> None:
    global _execute_tap
    while _saved:
        owner, name, original = _saved.pop()
        setattr(owner, name, original)
    _execute_tap = None
    _aot_owner.clear()


def _set_tap_ledgers() -> None:
    if _execute_tap is not None:
        _execute_tap.set_ledgers([ledger for s in _sinks for ledger in s.ledgers()])


def _hex(h: Any) -> str:
    if h is None:
        return ""
    return h.hex() if isinstance(h, (bytes, bytearray)) else str(h)


_LRU_MISS = "Failed to get computation by hash"


def _explain_bridge_error(exc: BaseException) -> None:
    """Raises TorchXlaBridgeBug for torch_xla 2.9's never-compiled cached graph; returns for
    anything else (the Tap then re-raises the original)."""
    if isinstance(exc, RuntimeError) and _LRU_MISS in str(exc):
        raise TorchXlaBridgeBug(
            "torch_xla 2.9's openxla bridge has no compiled computation for a graph it runs (\""
            + str(exc).strip().splitlines()[-1] + "\"). This is a torch_xla bug, not torch_xla_ext's: it is "
            "seen when a compiled graph only passes an input through, e.g. a training step ending in "
            "`return loss.detach()` (loss.backward() splits the step, and the last graph only detaches "
            "the loss). Return a computed tensor instead (`loss.detach() * 1.0`), or return nothing and "
            "read the loss outside the compiled function."
        ) from exc


class BridgeWatch:
    """Reports Dynamo, AOTAutograd and bridge events to ``sink`` while open (nestable, any
    number at once); cached-graph executions go to ``sink.ledgers()`` through a C++ Tap."""

    def __init__(self, sink: BridgeSink):
        self._sink = sink

    def __enter__(self) -> "BridgeWatch":
        global _sinks
        with _lock:
            if not _sinks:
                _install()
            _sinks = [*_sinks, self._sink]
            _set_tap_ledgers()
        return self

    def __exit__(self, *exc: Any) -> None:
        global _sinks
        with _lock:
            rest = list(_sinks)
            rest.remove(self._sink)
            _sinks = rest
            _set_tap_ledgers()
            if not _sinks:
                _uninstall()


# ---- a mode that failed: what, where, whose, what to try -----------------------------------------

# Failures of torch_xla's stack met on real models, each with the workaround verified on them:
# (aten op, text of the upstream message we match, what happens, what to try). The message text is
# torch_xla's; tests/graph_breaks/findings_test.py runs the real failure and checks it still reads so.
KNOWN_FAILURES: tuple[dict[str, str], ...] = (
    {"aten_op": "aten::adaptive_avg_pool2d", "message": "Expected XLA tensor",
     "cause": "While AOTAutograd traces aten::adaptive_avg_pool2d on an input that is not in the default "
              "contiguous layout (a channels_last input, or what the permute/LayerNorm/permute blocks before "
              "ConvNeXt's and Swin's final pooling leave), the op restrides its output with aten::as_strided_, "
              "and torch_xla's kernel for that is handed AOTAutograd's functional tensor instead of an XLA "
              "tensor. Lazy mode never traces, so it runs the same model.",
     "workaround": "For an output size of 1 (global average pooling, nn.AdaptiveAvgPool2d(1)), compute the same "
                   "value as `x.mean((-2, -1), keepdim=True)` (e.g. replace `model.avgpool` with a module that "
                   "does that): checked under torch.compile(backend='openxla') on torchvision's convnext_tiny "
                   "and swin_t, and on a channels_last input."},
)

# The layers a Python frame belongs to, by the path of its file (the innermost match names whose
# code raised).
_LAYERS = (
    ("/torch_xla/_dynamo/", "torch_xla's openxla bridge"),
    ("/torch_xla/core/dynamo_bridge", "torch_xla's openxla bridge"),
    ("/torch/_dynamo/backends/torchxla", "torch_xla's openxla bridge"),
    ("/torch/_functorch/", "AOTAutograd"),
    ("/torch/_dynamo/", "Dynamo"),
    ("/torch_xla/", "torch_xla"),
    ("/torch/", "PyTorch"),
)
_STACK_ENTRY = re.compile(r'File "([^"]+)", line (\d+), in (\S+)(?:\n[ \t]+(.*))?')
_XLAC_CALL = re.compile(r"_XLAC\.(\w+)")


def _layer(path: str) -> str | None:
    p = path.replace("\\", "/")
    return next((name for part, name in _LAYERS if part in p), None)


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc``, what it wraps (Dynamo's ``inner_exception``) and its causes, outermost first."""
    out: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in out and len(out) < 16:
        out.append(e)
        e = getattr(e, "inner_exception", None) or e.__cause__ or (None if e.__suppress_context__ else e.__context__)
    return out


def _frames(exc: BaseException) -> list[Any]:
    """Every Python frame the exception and what it wraps passed through, outermost first (a
    wrapper is raised where it caught what it wraps, so the innermost exception's frames are the
    deepest); torch_xla_ext's own frames (our wrappers call through) are left out."""
    seen: list[Any] = []
    for e in _chain(exc):
        tb = e.__traceback__
        while tb is not None:
            if "/torch_xla_ext/" not in tb.tb_frame.f_code.co_filename.replace("\\", "/"):
                seen.append((tb.tb_frame, tb.tb_lineno))
            tb = tb.tb_next
    return seen


def _target_name(target: Any) -> str:
    op = aten_op_name(target)
    if op is not None:
        return op
    if isinstance(target, str):
        return target
    mod = getattr(target, "__module__", None)
    qual = getattr(target, "__qualname__", None) or getattr(target, "__name__", "")
    return f"{mod}.{qual}" if mod else str(qual or target)


def _user_line(stack_trace: str | None) -> dict[str, Any] | None:
    """The innermost entry of an FX node's ``meta['stack_trace']`` (Python's traceback format)."""
    if not stack_trace:
        return None
    entries = _STACK_ENTRY.findall(stack_trace)
    if not entries:
        return None
    file, line, func, code = entries[-1]
    return {"file": file, "line": int(line), "function": func, "code": (code or "").strip()}


def describe_failure(exc: BaseException) -> dict[str, Any]:
    """What a failed compiled (or lazy) step tells a user, from the exception itself: the
    exception's first line, whose code raised it (the innermost layer among torch_xla's openxla
    bridge, AOTAutograd, Dynamo, torch_xla and the model's code; torch_xla's C++ kernel of an
    aten op; torch_xla's C++ runtime or XLA when the innermost Python frame is a call into
    ``_XLAC``), the FX node being run and its aten op, the model's source line, and a known
    workaround (:data:`KNOWN_FAILURES`) where there is one.

    The node and the op come from the frames the exception passed through (the FX interpreter's
    ``run_node(n)``, the operator being called), not from the message text.

    Example:
        >>> import torch, torch_xla
        >>> def pool(x):
        ...     return torch.nn.functional.adaptive_avg_pool2d(x.contiguous(memory_format=torch.channels_last), 1)
        >>> try:
        ...     torch.compile(pool, backend="openxla")(torch.randn(1, 8, 4, 4, device="xla"))
        ... except Exception as e:
        ...     f = describe_failure(e)
        >>> f["aten_op"], f["layer"], f["known"]["aten_op"]
        ('aten::adaptive_avg_pool2d', 'torch_xla', 'aten::adaptive_avg_pool2d')
    """
    chain = _chain(exc)
    inner = chain[-1]
    for e in chain:  # Dynamo's wrapper says only "backend='openxla' raised": report what it wraps
        if not isinstance(e, _dynamo_exc.TorchDynamoException) or isinstance(e, _dynamo_exc.Unsupported):
            inner = e
            break
    node = op = op_on_xla = None
    ops: list[str | None] = []
    deepest = None
    layers: list[str] = []
    for frame, lineno in _frames(exc):
        f_locals = frame.f_locals
        for key in ("n", "node"):
            v = f_locals.get(key)
            if isinstance(v, torch.fx.Node):
                node = v
        for key in ("self", "func", "op"):
            v = f_locals.get(key)
            if isinstance(v, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
                op = aten_op_name(v)
                ops.append(op)
                args = f_locals.get("args") or ()
                op_on_xla = any(isinstance(a, torch.Tensor) and a.device.type == "xla"
                                for a in (args if isinstance(args, (tuple, list)) else ()))
        layer = _layer(frame.f_code.co_filename)
        if layer and layer not in layers:
            layers.append(layer)
        deepest = (frame.f_code.co_filename, lineno, frame.f_code.co_name)
    deepest_layer = _layer(deepest[0]) if deepest else None
    node_op = None
    if node is not None and node.op == "call_function":
        # The node's own aten op: its target (an AOT graph's node), or the aten op a torch
        # function of the same name dispatches to (torch.nn.functional.adaptive_avg_pool2d).
        node_op = aten_op_name(node.target)
        name = getattr(node.target, "__name__", None)
        if node_op is None and isinstance(name, str) and hasattr(torch.ops.aten, name):
            node_op = f"aten::{name}"
    if deepest and deepest[0].replace("\\", "/").endswith("/torch/_ops.py") and op and op_on_xla:
        during = next((ly for ly in reversed(layers) if ly not in ("torch_xla", "PyTorch")), None)
        what = f" {node_op}" if node_op and node_op != op else " the graph"
        raised_by = f"torch_xla's C++ kernel for {op}" + (f", called while {during} traced{what}" if during else "")
        layer_key = "torch_xla"
    elif deepest_layer is not None:
        raised_by, layer_key = deepest_layer, deepest_layer
        # A torch_xla frame calling into its C++ runtime (_XLAC): compiling or running through XLA.
        call = _XLAC_CALL.search(linecache.getline(deepest[0], deepest[1]) or "") if deepest_layer != "Dynamo" else None
        if call is not None and deepest_layer != "AOTAutograd":
            raised_by = (f"torch_xla's C++ runtime or XLA beneath it (_XLAC.{call.group(1)}, called by "
                         f"{deepest_layer})")
            layer_key = "XLA runtime"
        raised_by += f" ({os.path.basename(deepest[0])}:{deepest[1]} in {deepest[2]})"
    else:
        raised_by, layer_key = "the model's code", "model"
    source = None
    node_info = None
    if node is not None:
        node_info = {"name": node.name, "op": node.op, "target": _target_name(node.target)}
        source = _user_line(node.meta.get("stack_trace"))
    if source is None:
        frame = getattr(exc, "innermost_user_frame_summary", None) or (getattr(exc, "real_stack", None) or [None])[-1]
        if frame is not None:
            source = {"file": frame.filename, "line": int(frame.lineno or 0), "function": frame.name,
                      "code": (frame.line or "").strip()}
    text = str(inner).strip()
    first = text.splitlines()[0] if text else ""
    if len(first) > 400:  # Dynamo's fake-tensor errors put every argument on the first line
        first = first[:400] + " ..."
    known = next((k for k in KNOWN_FAILURES if k["aten_op"] in (node_op, op) and k["message"] in text), None)
    return {
        "exception": f"{type(inner).__name__}: {first}",
        "exception_type": f"{type(inner).__module__}.{type(inner).__qualname__}",
        "raised_by": raised_by,
        "layer": layer_key,
        "layers": layers,
        "node": node_info,
        "aten_op": node_op or op,
        "raised_in_op": op,
        "source": source,
        "known": dict(known) if known else None,
        "dynamo_compile_id": str(getattr(exc, "compile_id", "") or "") or None,
    }
