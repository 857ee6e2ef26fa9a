"""Dynamo: the one place that calls its internals or reads its message text (torch alone: this
module imports no torch_xla, so the Dynamo half of graph-break accounting and of the script trace
runs wherever torch does). AOTAutograd's openxla backend and torch_xla's bridge are
``_compat/openxla.py``. What the events mean (the graph-break ledger's joins, its sinks, failure
classification) lives in :mod:`torch_xla_ext.graph_breaks`; each entry point here has a canary in
``tests/graph_breaks/compat_canary_test.py``.

:func:`install` wraps these entry points and forwards each call, as plain values, to one
:class:`DynamoListener` (``graph_breaks.watch``); the wrappers call through unchanged:
``convert_frame._compile`` (a frame compile: compile id, code object, outcome),
``symbolic_convert.log_graph_break`` (the structured break message and its user frame; a method
of ``InstructionTranslatorBase`` from torch 2.11),
``exc.Unsupported.add_to_stats`` (every Unsupported raised; "graph_break" is what
``counters["graph_break"]`` counts), ``GraphCompileReason.__post_init__`` (a split),
``get_and_maybe_log_recompilation_reasons`` (a recompile's first failed guard),
``OutputGraph.call_user_compiler`` (a graph handed to the backend).
"""

from __future__ import annotations

import functools
import inspect
import linecache
import re
from typing import Any, Callable, Protocol

import torch
import torch._dynamo.convert_frame as _convert_frame
import torch._dynamo.exc as _dynamo_exc
import torch._dynamo.output_graph as _output_graph
import torch._dynamo.symbolic_convert as _symbolic_convert
import torch._guards

from torch_xla_ext.errors import InternalError

__all__ = [
    "DynamoListener", "EXPECTED_XLA_TENSOR", "LRU_MISS", "aten_op_name", "compile_id_of", "count_ops",
    "current_compile_id", "patch", "restore",
    "exception_chain", "exception_frames", "frame_layer", "frame_locals_call", "install", "is_dynamo_wrapper",
    "is_lru_miss", "is_op_dispatch", "message_has", "node_aten_op", "node_source", "parse_graph_break",
    "reset_dynamo", "split_kind", "target_name", "uninstall", "user_frame", "xlac_call_at",
]


def aten_op_name(target: Any) -> str | None:
    """'aten::digamma' for torch.ops.aten.digamma.default (any operator overload or packet, in
    any namespace: aten, prims, a custom op's); None for anything that is not a torch operator
    (a Python callable such as operator.getitem)."""
    if isinstance(target, torch._ops.OpOverload):
        return str(target._schema.name)
    if isinstance(target, torch._ops.OpOverloadPacket):
        return str(target._qualified_op_name)
    return None


def reset_dynamo() -> None:
    """Fresh Dynamo state: compiled frames, guards and counters forgotten."""
    torch._dynamo.reset()


def count_ops(gm: Any) -> tuple[int, int]:
    """(nodes, call nodes) of an FX graph module."""
    nodes = ops = 0
    for nd in gm.graph.nodes:
        nodes += 1
        if nd.op in ("call_function", "call_method", "call_module"):
            ops += 1
    return nodes, ops


# ---- Dynamo's graph-break message text ----------------------------------------------------------

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


# GraphCompileReason of a split at an instruction whose speculation failed (symbolic_convert's
# step_graph_break): the cause was an Unsupported raised while inlining a call.
_STEP_UNSUPPORTED = "step_unsupported"


def split_kind(reason_text: str) -> str:
    """What a GraphCompileReason's text says split the frame: "jump" (a data-dependent jump in
    the frame's own code, ``generic_jump``), "inherited" (an Unsupported raised inside a call
    Dynamo inlined, ``step_unsupported``: Dynamo neither logs nor counts it) or "break"."""
    head = str(reason_text).splitlines()[0] if reason_text else ""
    if head.startswith("generic_jump"):
        return "jump"
    if head == _STEP_UNSUPPORTED:
        return "inherited"
    return "break"


# ---- torch_xla's error text ------------------------------------------------------------------------

# torch_xla 2.9's bridge runs a cached graph it never compiled (a graph that only passes an input
# through, e.g. a step ending in `return loss.detach()`).
LRU_MISS = "Failed to get computation by hash"
# torch_xla's kernel handed a tensor that is not an XLA tensor (AOTAutograd's functional tensor).
EXPECTED_XLA_TENSOR = "Expected XLA tensor"


def is_lru_miss(exc: BaseException) -> bool:
    """True for torch_xla 2.9's "no compiled computation for this cached graph" RuntimeError."""
    return isinstance(exc, RuntimeError) and LRU_MISS in str(exc)


def message_has(text: str, message: str) -> bool:
    """Whether an upstream exception's text carries ``message`` (one of the constants above)."""
    return message in str(text)


# ---- an exception raised through Dynamo, AOTAutograd, the bridge and torch_xla -----------------------

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


def frame_layer(path: str) -> str | None:
    """Whose code a file is: torch_xla's openxla bridge, AOTAutograd, Dynamo, torch_xla, PyTorch,
    or None (the model's, or anyone else's)."""
    p = path.replace("\\", "/")
    return next((name for part, name in _LAYERS if part in p), None)


def is_op_dispatch(path: str) -> bool:
    """Whether a file is torch's operator dispatch (``torch/_ops.py``: an OpOverload's call)."""
    return path.replace("\\", "/").endswith("/torch/_ops.py")


def xlac_call_at(path: str, line: int) -> str | None:
    """The ``_XLAC`` function a source line calls (torch_xla's C++ runtime), if it calls one."""
    m = _XLAC_CALL.search(linecache.getline(path, line) or "")
    return m.group(1) if m else None


def exception_chain(exc: BaseException) -> list[BaseException]:
    """``exc``, what it wraps (Dynamo's ``inner_exception``) and its causes, outermost first."""
    out: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in out and len(out) < 16:
        out.append(e)
        e = getattr(e, "inner_exception", None) or e.__cause__ or (None if e.__suppress_context__ else e.__context__)
    return out


def is_dynamo_wrapper(e: BaseException) -> bool:
    """Dynamo's own wrapper exceptions (``backend='openxla' raised``), which say nothing of their
    own; an ``Unsupported`` is a message of Dynamo's, not a wrapper."""
    return isinstance(e, _dynamo_exc.TorchDynamoException) and not isinstance(e, _dynamo_exc.Unsupported)


def exception_frames(exc: BaseException, skip_path: str = "/torch_xla_ext/") -> list[tuple[Any, int]]:
    """Every Python (frame, line) the exception and what it wraps passed through, outermost first
    (a wrapper is raised where it caught what it wraps, so the innermost exception's frames are the
    deepest); frames of files under ``skip_path`` (our wrappers call through) are left out."""
    seen: list[Any] = []
    for e in exception_chain(exc):
        tb = e.__traceback__
        while tb is not None:
            if skip_path not in tb.tb_frame.f_code.co_filename.replace("\\", "/"):
                seen.append((tb.tb_frame, tb.tb_lineno))
            tb = tb.tb_next
    return seen


def frame_locals_call(frame: Any) -> tuple[Any, str | None, bool]:
    """(the FX node the frame runs, the aten op it calls, whether that op got an XLA tensor), from
    the locals of torch.fx's interpreter (``run_node(n)``) and torch's operator call."""
    node = op = None
    on_xla = False
    f_locals = frame.f_locals
    for key in ("n", "node"):
        v = f_locals.get(key)
        if isinstance(v, torch.fx.Node):
            node = v
    for key in ("self", "func", "op"):
        v = f_locals.get(key)
        if isinstance(v, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
            op = aten_op_name(v)
            args = f_locals.get("args") or ()
            on_xla = any(isinstance(a, torch.Tensor) and a.device.type == "xla"
                         for a in (args if isinstance(args, (tuple, list)) else ()))
    return node, op, on_xla


def node_aten_op(node: Any) -> str | None:
    """An FX call node's own aten op: its target (an AOT graph's node), or the aten op a torch
    function of the same name dispatches to (torch.nn.functional.adaptive_avg_pool2d)."""
    if node is None or node.op != "call_function":
        return None
    op = aten_op_name(node.target)
    name = getattr(node.target, "__name__", None)
    if op is None and isinstance(name, str) and hasattr(torch.ops.aten, name):
        op = f"aten::{name}"
    return op


def target_name(target: Any) -> str:
    """An FX node target's name: its aten op, its string, or the callable's qualified name."""
    op = aten_op_name(target)
    if op is not None:
        return op
    if isinstance(target, str):
        return target
    mod = getattr(target, "__module__", None)
    qual = getattr(target, "__qualname__", None) or getattr(target, "__name__", "")
    return f"{mod}.{qual}" if mod else str(qual or target)


def node_source(node: Any) -> dict[str, Any] | None:
    """The model's source line of an FX node: the innermost entry of its ``meta['stack_trace']``
    (Python's traceback format)."""
    stack_trace = node.meta.get("stack_trace") if node is not None else None
    if not stack_trace:
        return None
    entries = _STACK_ENTRY.findall(stack_trace)
    if not entries:
        return None
    file, line, func, code = entries[-1]
    return {"file": file, "line": int(line), "function": func, "code": (code or "").strip()}


def user_frame(exc: BaseException) -> dict[str, Any] | None:
    """The user frame Dynamo attached to an exception it raised (``innermost_user_frame_summary``
    or the last of ``real_stack``)."""
    frame = getattr(exc, "innermost_user_frame_summary", None) or (getattr(exc, "real_stack", None) or [None])[-1]
    if frame is None:
        return None
    return {"file": frame.filename, "line": int(frame.lineno or 0), "function": frame.name,
            "code": (frame.line or "").strip()}


def compile_id_of(exc: BaseException) -> str | None:
    """The Dynamo compile id an exception carries, if any."""
    return str(getattr(exc, "compile_id", "") or "") or None


# ---- the wrappers ----------------------------------------------------------------------------------


class DynamoListener(Protocol):
    """What :func:`install` reports to: each call of a wrapped entry point, as plain values.
    ``compile_id`` is Dynamo's current compile id as a string (``"1/0"``), or None outside one."""

    def frame_start(self, compile_id: str, code: Any) -> None: ...
    def frame_end(self, compile_id: str, code: Any, error: BaseException | None) -> None: ...
    def break_logged(self, compile_id: str | None, message: str, frame: Any) -> None: ...
    def break_counted(self, compile_id: str | None) -> None: ...
    def unsupported_raised(self, compile_id: str | None, message: str, stack: list[Any]) -> None: ...
    def split(self, compile_id: str | None, key: int, reason: str, frame: Any) -> None: ...
    def recompile(self, compile_id: str | None, failed_guard: str, file: str, line: int) -> None: ...
    def dynamo_graph_start(self, compile_id: str | None, nodes: int, ops: int, split_key: int | None,
                           split_reason: str | None) -> Any: ...
    def dynamo_graph_end(self, token: Any) -> None: ...


_saved: list[tuple[Any, str, Any]] = []


def current_compile_id() -> str | None:
    """Dynamo's compile id being compiled on this thread (``"1/0"``), or None."""
    cid = torch._guards.CompileContext.current_compile_id()
    return None if cid is None else str(cid)


_compile_id = current_compile_id


def patch(saved: list[tuple[Any, str, Any]], owner: Any, name: str, make: Callable[[Any], Any]) -> None:
    """Replaces ``owner.name`` with ``make(original)``, remembering the original in ``saved``."""
    original = getattr(owner, name)
    saved.append((owner, name, original))
    setattr(owner, name, make(original))


def restore(saved: list[tuple[Any, str, Any]]) -> None:
    """Puts back every entry point :func:`patch` replaced, newest first."""
    while saved:
        owner, name, original = saved.pop()
        setattr(owner, name, original)


def _translator_frame(translator: Any) -> Any:
    """A traceback.FrameSummary of where a Dynamo instruction translator stands (its code object
    and current line), or None."""
    import traceback

    code = getattr(translator, "f_code", None)
    if code is None:
        return None
    return traceback.FrameSummary(code.co_filename, getattr(translator, "lineno", None) or code.co_firstlineno,
                                  code.co_name)


def install(listener: DynamoListener) -> None:
    """Wraps Dynamo's entry points (see the module docstring) to report to ``listener``;
    :func:`uninstall` undoes it."""
    if _saved:
        raise InternalError("torch_xla_ext._compat.dynamo.install: already installed")
    L = listener

    def compile_frame(original):
        @functools.wraps(original)
        def wrapper(code, *args, **kwargs):
            cid = str(kwargs.get("compile_id"))
            L.frame_start(cid, code)
            error = None
            try:
                return original(code, *args, **kwargs)
            except BaseException as e:  # Dynamo's own error, recorded on the frame and re-raised unchanged
                error = e
                raise
            finally:
                L.frame_end(cid, code, error)
        return wrapper

    def log_graph_break(original):
        # The message logged here carries Dynamo's structure even where the GraphCompileReason
        # that follows does not (a data-dependent jump's reason is just "generic_jump ...").
        @functools.wraps(original)
        def wrapper(code_options, reason="", *args, **kwargs):
            stack = kwargs.get("user_stack") or (args[1] if len(args) > 1 else None)
            L.break_logged(_compile_id(), str(reason), stack[-1] if stack else None)
            return original(code_options, reason, *args, **kwargs)
        return wrapper

    def log_graph_break_method(original):
        # torch >= 2.11: InstructionTranslatorBase.log_graph_break(self, code_options, reason, exc),
        # which returns at once for an exception already logged; the user frame is the
        # exception's real_stack, else the translator's own position.
        @functools.wraps(original)
        def wrapper(self, code_options, reason="", exc=None, *args, **kwargs):
            exc = kwargs.get("exc", exc)
            if not getattr(exc, "logged", False):
                stack = getattr(exc, "real_stack", None)
                frame = stack[-1] if stack else _translator_frame(self)
                L.break_logged(_compile_id(), str(reason), frame)
            return original(self, code_options, reason, exc, *args, **kwargs)
        return wrapper

    def unsupported_raised(original):
        # Every Unsupported counts itself as "unimplemented" when raised (many are caught inside
        # Dynamo); "graph_break" is what counters["graph_break"] counts.
        @functools.wraps(original)
        def wrapper(self, category="unimplemented"):
            original(self, category)
            if category == "graph_break":
                L.break_counted(_compile_id())
            if category == "unimplemented":  # the message and the frames, not the exception and its traceback
                L.unsupported_raised(_compile_id(), str(self.msg), list(getattr(self, "real_stack", None) or []))
        return wrapper

    def post_init(original):
        @functools.wraps(original)
        def wrapper(self):
            original(self)
            if self.graph_break:
                L.split(_compile_id(), id(self), str(self.reason), self.user_stack[-1] if self.user_stack else None)
        return wrapper

    def recompile_reasons(original):
        # (cache_entry, frame, skip_logging=False) to torch 2.10; torch 2.11 put the backend
        # before skip_logging: the arguments are read by name.
        signature = inspect.signature(original)

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            reasons = original(*args, **kwargs)
            named = signature.bind(*args, **kwargs).arguments
            if not named.get("skip_logging", False):
                code = named["frame"].f_code
                reason = reasons[0] if reasons else "unable to find recompilation reasons"
                L.recompile(_compile_id(), str(reason).strip(), code.co_filename, int(code.co_firstlineno))
            return reasons
        return wrapper

    def call_user_compiler(original):
        @functools.wraps(original)
        def wrapper(self, gm, example_inputs):
            nodes, ops = count_ops(gm)
            reason = getattr(gm, "compile_subgraph_reason", None)
            split = reason is not None and reason.graph_break
            token = L.dynamo_graph_start(_compile_id(), nodes, ops, id(reason) if split else None,
                                         str(reason.reason) if split else None)
            try:
                return original(self, gm, example_inputs)
            finally:
                L.dynamo_graph_end(token)
        return wrapper

    patch(_saved, _convert_frame, "_compile", compile_frame)
    patch(_saved, _convert_frame, "get_and_maybe_log_recompilation_reasons", recompile_reasons)
    if hasattr(_symbolic_convert, "log_graph_break"):  # torch <= 2.10: a module function
        patch(_saved, _symbolic_convert, "log_graph_break", log_graph_break)
    else:  # torch >= 2.11 moved it (capabilities.MOVED)
        patch(_saved, _symbolic_convert.InstructionTranslatorBase, "log_graph_break", log_graph_break_method)
    patch(_saved, _output_graph.GraphCompileReason, "__post_init__", post_init)
    patch(_saved, _dynamo_exc.Unsupported, "add_to_stats", unsupported_raised)
    patch(_saved, _output_graph.OutputGraph, "call_user_compiler", call_user_compiler)


def uninstall() -> None:
    """Restores every entry point :func:`install` wrapped."""
    restore(_saved)
