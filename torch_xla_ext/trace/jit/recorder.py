"""Recording JAX's compiles in a traced process, and torchax's calls around them.

What runs where:

* **Every XLA compile** is one call of the ``jax.monitoring`` listener for JAX's backend-compile
  event (:meth:`JitRecorder.listen`, when ``jax`` is imported). Listeners run only while JAX
  traces, lowers or compiles, never when a compiled program runs. The trace events keep a
  per-thread depth, so the recorder knows a compile that follows a finished trace from one made
  while a trace runs, and the trace time of the compile that follows.
* **torchax's compiled calls** (:meth:`JitRecorder.install_torchax`, when ``torchax`` is
  imported): the function torchax returns for ``torchax.compile``/``interop.jax_jit`` is ours
  (``_compat.torchax_interop.install``), and per call it counts the call and pushes (function,
  call, arguments, caller's frame) on a per-thread stack: a compile while it is on the stack, once
  the trace finished, is that function's. Nothing else runs per call. The signature (JAX's cache
  key, named in torch's terms) is read at the compile, against the function's earlier ones.
* **Op by op**: torchax's dispatch, wrapped, marks the outermost op that runs outside any compiled
  call and outside any JAX trace, with the user's line: a compile while it runs is that op's, and
  each such op's executions are counted per (line, op). A compile outside both (JAX library code
  the user's line called, such as ``interop.call_jax(optimizer.init, ...)``) is op by op too,
  named by the library function; one right under ``jax.jit``'s API boundary is the user's own
  jitted function, named by JAX alone.
* **Concretization**: an error of ``jax.errors``' concretization family raised out of a compiled
  call is recorded (the line inside the function that read the value, the op, the call site) and
  re-raised, the same object: the program sees what it would without the trace.
* **Ranks**: ``jax.process_index()`` is read at the first compile (the backends exist then; see
  ``_compat.jax_monitoring``), and names the rank file, which opens at the first record.

No method raises into the user's program: a problem is a ``problem`` record.
"""

from __future__ import annotations

import functools
import sys
import threading
import traceback
from typing import Any, Callable

from torch_xla_ext._compat import jax_cache_key, jax_monitoring, torchax_interop
from torch_xla_ext.errors import first_line
from torch_xla_ext.trace import advice as _advice
from torch_xla_ext.trace import frames as _frames
from torch_xla_ext.trace.jit.functions import Fn, optimizer_state_args
from torch_xla_ext.trace.jit.signatures import digest, nearest
from torch_xla_ext.trace.schema import (Concretization, ExceptionInfo, FunctionCount, JitCompile, JitFunction,
                                        JitSummary, OpCount, Problem)
from torch_xla_ext.trace.stream import RankFile

__all__ = ["JitRecorder"]

MAX_OP_GROUPS = 500  # (line, op) groups written at exit, the most executed first
_MAX_MESSAGE = 300


class JitRecorder:
    """The JAX half of one process's recorder (see the module)."""

    def __init__(self, emit: Callable[[Any], None], now_ms: Callable[[], float], sites: _frames.SiteTable,
                 file: RankFile):
        self._emit = emit
        self._now = now_ms
        self._sites = sites
        self._file = file
        self._tls = threading.local()
        self._lock = threading.Lock()
        self._fns: list[Fn] = []
        self._k = 0
        self._process: tuple[int, int] | None = None
        self._ops: dict[tuple[Any, str], int] = {}  # (user frame, op) -> executions op by op
        self._jax_seen: dict[tuple[str, Any], int] = {}  # (JAX name, site) of the user's own jax.jit -> k
        self._events: Any = None
        self.torchax = False

    # ---- installing -------------------------------------------------------------------------------

    def listen(self) -> None:
        """Registers the compile listener (``jax`` is imported)."""
        self._events = jax_monitoring.events()
        jax_monitoring.listen(self._on_scalar, self._on_duration)

    def install_torchax(self) -> None:
        """Puts the recorder on torchax's jit and dispatch (``torchax`` is imported)."""
        torchax_interop.install(self._make_call, self._wrap_dispatch)
        self.torchax = True

    # ---- jax.monitoring's events: only while JAX traces, lowers or compiles --------------------------

    def _on_scalar(self, event: str, value: float, **kwargs: Any) -> None:
        if event == self._events.trace:
            st = self._tls.__dict__
            st["tracing"] = st.get("tracing", 0) + 1

    def _on_duration(self, event: str, secs: float, **kwargs: Any) -> None:
        ev = self._events
        if event == ev.backend_compile:
            try:
                self._compile(str(kwargs.get("fun_name", "")), secs, sys._getframe(1))
            except Exception as e:  # noqa: BLE001 - a listener inside JAX's compile: the compile goes on, the problem is recorded
                self._problem("recording a JAX compile", e)
            return
        st = self._tls.__dict__
        if event == ev.trace:
            depth = st["tracing"] = max(0, st.get("tracing", 0) - 1)
            if depth == 0:
                st["trace_ms"] = round(secs * 1e3, 3)  # the outermost trace before the compile
        elif event == ev.lower:
            st["lower_ms"] = round(secs * 1e3, 3)

    def _compile(self, jax_name: str, secs: float, frame: Any) -> None:
        st = self._tls.__dict__
        with self._lock:
            self._k += 1
            k = self._k
            if self._process is None:
                self._process = jax_monitoring.process()  # a compile ran: the backends exist
                index, count = self._process
                self._file.set_ordinal(lambda: index, source="jax.process_index", world_size=count)
        rec = JitCompile(k=k, t=self._now(), jax_name=jax_name, kind="op", ms=round(secs * 1e3, 3),
                         trace_ms=st.pop("trace_ms", None), lower_ms=st.pop("lower_ms", None),
                         calls={str(f.id): f.calls for f in self._fns if f.calls},
                         process_index=self._process[0], process_count=self._process[1])
        stack = st.get("stack")
        if stack and not st.get("tracing"):
            self._function_compile(rec, *stack[-1])
        elif st.get("op") is not None:
            where, rec.op = st["op"]
            rec.site = self._sites.id(where)
            rec.entry = self._entry(frame, where)
        else:
            user, callee = _frames.user_live_frame(frame)
            where = _frames.frame_of(user) if user is not None else None
            if callee is not None and jax_monitoring.is_jit_boundary(callee.f_code):
                # The user's line called a function jitted with jax.jit itself: JAX's name only.
                rec.kind, rec.function = "function", jax_name
                seen = self._jax_seen.get((jax_name, where))
                if seen is None:
                    rec.first = True
                else:
                    rec.previous, rec.changed = seen, [{"what": "jax_only", "function": jax_name}]
                    rec.advice = _advice.jit(rec.changed)
                self._jax_seen[(jax_name, where)] = k
            else:
                rec.op = _qualified(callee) or jax_name
            rec.site = self._sites.id(where)
            rec.entry = self._entry(frame, where)
        self._write(rec)

    def _entry(self, frame: Any, where: Any) -> int:
        main = _frames.main_frame(frame)
        return self._sites.id(main) if main is not None and main != where else -1

    def _function_compile(self, rec: JitCompile, fn: Fn, call: int, args: Any, kwargs: Any, caller: Any) -> None:
        rec.kind, rec.fn, rec.function, rec.call = "function", fn.id, fn.name, call
        user, _ = _frames.user_live_frame(caller)
        where = _frames.frame_of(user) if user is not None else None
        rec.site = self._sites.id(where)
        rec.entry = self._entry(caller, where)
        jargs, jkwargs = torchax_interop.jax_values((tuple(args), dict(kwargs)))
        sig = jax_cache_key.signature(jargs, jkwargs, fn.static_argnums, fn.static_argnames)
        rec.signature, rec.sig_hash = sig, digest(sig, fn.name)
        fn.compiles += 1
        if not fn.history:
            rec.first = True
            twin = next((f for f in self._fns if f is not fn and f.name == fn.name and f.target.defined == fn.target.defined
                         and f.compiles), None)
            if twin is not None:
                rec.changed = [{"what": "new_function", "function": fn.name, "previous_fn": twin.id}]
        else:
            rec.previous, rec.previous_call, changes = nearest(sig, fn.history)
            state = optimizer_state_args(args)
            for c in changes:
                c["name"], c["role"] = fn.torch_name(c["jax_name"], state)
            rec.changed = changes or [{"what": "same_signature", "previous_call": rec.previous_call}]
        for c in rec.changed:
            c["advice"] = _advice.jit_change(c)
        rec.advice = _advice.jit(rec.changed)
        fn.remember(rec.k, call, sig)

    # ---- torchax's jit: the hot path of a compiled call ------------------------------------------------

    def _make_call(self, torch_function: Any, jit_kwargs: dict[str, Any], call_jax: Any, jitted: Any) -> Any:
        untraced = functools.partial(call_jax, jitted)  # what torchax itself returns
        try:
            target = torchax_interop.describe(torch_function)
        except Exception as e:  # noqa: BLE001 - naming the function is best effort: torchax's own callable goes back, the problem is recorded
            self._problem("naming a jitted function", e)
            return untraced
        with self._lock:
            fn = Fn(len(self._fns), target, jit_kwargs.get("static_argnums"), jit_kwargs.get("static_argnames"))
            self._fns.append(fn)
        user, _ = _frames.user_live_frame(sys._getframe(1))
        fn.jitted_at = _frames.frame_of(user) if user is not None else None
        tls, raised = self._tls, self._raised

        def compiled(*args: Any, **kwargs: Any) -> Any:
            fn.calls += 1
            try:
                stack = tls.stack
            except AttributeError:
                stack = tls.stack = []
            stack.append((fn, fn.calls, args, kwargs, sys._getframe(1)))
            try:
                return call_jax(jitted, *args, **kwargs)
            except BaseException as e:  # noqa: BLE001 - re-raised unchanged below; only looked at
                if len(stack) == 1:  # the outermost compiled call notes what its trace raised
                    raised(stack[-1], e)
                raise
            finally:
                stack.pop()

        compiled.__wrapped__ = untraced  # type: ignore[attr-defined]  # torchax's own callable (the bench's untraced path)
        return compiled

    def _raised(self, entry: tuple[Any, ...], e: BaseException) -> None:
        """A compiled call raised ``e``: a concretization is recorded (never raises)."""
        st = self._tls.__dict__
        by = st.pop("raised_by", None)
        try:
            if not jax_monitoring.is_concretization(e):
                return
            fn, call, _args, _kwargs, caller = entry
            aten = torchax_interop.op_name(by[1]) if by is not None and by[0] == id(e) else ""
            where = None  # the innermost line of user code the traceback passes: where the value was read
            for fs in traceback.extract_tb(e.__traceback__):
                if not _frames.is_library(fs.filename):
                    where = (fs.name, fs.filename, fs.lineno or 0)
            text = _frames.code_of(where) if where is not None else ""
            op = next((name for name, rx in _frames.HOST_READ_OPS if rx.search(text)), "") if text else ""
            user, _ = _frames.user_live_frame(caller)
            self._write_function(fn)
            site = self._sites.id(where)
            message = first_line(e)
            self._emit(Concretization(
                t=self._now(), fn=fn.id, function=fn.name, call=call, site=site,
                call_site=self._sites.id(_frames.frame_of(user) if user is not None else None),
                op=op or _short_op(aten), aten_op=aten,
                exception=ExceptionInfo(type=type(e).__name__, message=message[:_MAX_MESSAGE],
                                        site=f"{where[1]}:{where[2]}" if where is not None else "")))
        except Exception as problem:  # noqa: BLE001 - never replaces the user's exception; the problem is recorded
            self._problem("recording a concretization", problem)

    # ---- torchax's dispatch: op by op ------------------------------------------------------------------

    def _wrap_dispatch(self, original: Callable[..., Any]) -> Callable[..., Any]:
        tls, ops = self._tls, self._ops
        op_name, user_live_frame, frame_of = torchax_interop.op_name, _frames.user_live_frame, _frames.frame_of

        @functools.wraps(original)
        def dispatch(env: Any, func: Any, types: Any, args: Any, kwargs: Any = None) -> Any:
            st = tls.__dict__
            if st.get("op") is not None or st.get("stack") or st.get("tracing"):
                try:
                    return original(env, func, types, args, kwargs)
                except BaseException as e:  # noqa: BLE001 - re-raised unchanged below; the op that raised is noted
                    if st.get("stack") and st.get("raised_by", (None,))[0] != id(e):
                        st["raised_by"] = (id(e), func)  # the innermost op a concretization came from
                    raise
            user, _ = user_live_frame(sys._getframe(1))
            key = (frame_of(user) if user is not None else None, op_name(func))
            ops[key] = ops.get(key, 0) + 1
            st["op"] = key
            try:
                return original(env, func, types, args, kwargs)
            finally:
                st["op"] = None

        return dispatch

    # ---- records -----------------------------------------------------------------------------------------

    def _write(self, rec: Any) -> None:
        fn = rec.fn if isinstance(rec, JitCompile) else None
        if fn is not None:
            self._write_function(self._fns[fn])
        self._emit(rec)

    def _write_function(self, fn: Fn) -> None:
        if not fn.written:
            fn.written = True
            self._emit(JitFunction(fn=fn.id, t=self._now(), name=fn.name, defined=fn.target.defined,
                                   site=self._sites.id(fn.jitted_at)))

    def _problem(self, where: str, e: BaseException) -> None:
        self._emit(Problem(t=self._now(), where=where, message=first_line(e, with_type=True)))

    def at_exit(self) -> None:
        """The counts only known at the end (each function's calls, each op's executions), when
        this half saw anything."""
        called = [f for f in self._fns if f.calls]
        if not (self._k or called or self._ops):
            return
        for f in called:
            self._write_function(f)
        top = sorted(self._ops.items(), key=lambda kv: -kv[1])[:MAX_OP_GROUPS]
        self._emit(JitSummary(t=self._now(), compiles=self._k,
                              functions=[FunctionCount(fn=f.id, calls=f.calls, compiles=f.compiles) for f in called],
                              ops=[OpCount(site=self._sites.id(where), op=op, executions=n) for (where, op), n in top]))

    def forked(self) -> None:
        """In a forked child: its own counts, and its own JitFunction records in its own file."""
        self._k = 0
        self._ops.clear()
        self._jax_seen.clear()
        self._process = None
        for f in self._fns:
            f.calls = f.compiles = 0
            f.written = False
            f.history.clear()


def _qualified(frame: Any) -> str:
    """``torchax.interop.call_jax``: the module and function of a live frame ("" for None)."""
    if frame is None:
        return ""
    code = frame.f_code
    module = frame.f_globals.get("__name__", "")
    name = getattr(code, "co_qualname", code.co_name)
    return f"{module}.{name}" if module else name


def _short_op(aten: str) -> str:
    """``_local_scalar_dense`` of ``aten._local_scalar_dense.default``."""
    parts = aten.split(".")
    return parts[1] if len(parts) >= 3 and parts[0] == "aten" else aten
