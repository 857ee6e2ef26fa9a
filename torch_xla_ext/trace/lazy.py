"""The lazy-tensor half of the recorder: every step marker, every XLA compile and why.

Per step the recorder pays for one C++ stand-in on torch_xla's step marker (the graph-break Tap,
``_ext.graph_breaks``) that calls :meth:`LazyRecorder.before` and :meth:`LazyRecorder.after`
around it, a read of the ``CompileTime`` count and a look at the size of torch_xla's analysis
file. Neither callback is on the Python stack while torch_xla runs, so torch_xla's own frame
analysis is what it would be without us. Everything else happens only when a graph compiled:

* torch_xla's compile analysis (``_compat.xla_debug``, written to this process's file in the
  trace directory) gives each compile's graph hash, input and output counts and the Python frames
  that triggered it, host reads included; ``CompileTime``'s samples give its duration. Where
  torch_xla writes no analysis (see ``_compat.xla_debug``) the compiles are counted from
  ``CompileTime`` and the sync's own site is known; a host read's is not.
* the tensors in scope at the step marker are named (:mod:`~torch_xla_ext.trace.snapshot`) and
  compared with those at the compile before it at the same site;
* during a *capture window* (the first steps of the process and the steps after a compile) the
  pending graph is read before each sync (``_compat.lazy.pending_graph``) with torch_xla's IR
  debug on, so a compile in the window is compared op by op with the earlier graph of its site
  (:mod:`~torch_xla_ext.trace.graphs`). A compile outside a window (a site stable for longer)
  has the tensor comparison and says its graph was not captured. ``capture="all"`` reads every
  sync's graph (slow), ``"off"`` none.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
from typing import Any, Callable

from torch_xla_ext._compat import hlo_debug, lazy, metrics, trace_log, xla_debug
from torch_xla_ext.trace import advice as _advice
from torch_xla_ext.trace import frames as _frames
from torch_xla_ext.trace import graphs as _graphs
from torch_xla_ext.trace import snapshot as _snapshot
from torch_xla_ext.trace.schema import Compile, Graph, Problem, Step, Trigger, to_json

__all__ = ["LAZY_ARTIFACT", "LazyRecorder", "STEP_KINDS"]

# Step markers that end a step of the user's loop (the Dynamo bridge's own syncs and the one
# torch_xla.compile makes before calling the function do not).
STEP_KINDS = ("sync", "data_loader", "optimizer_step", "torch_xla.compile", "profiler")
WINDOW = 3  # steps captured after the start and after each compile
_HISTORY = 4  # earlier compiles kept per site to compare with
_TRUNCATE_AT = 8 << 20  # bytes of torch_xla's analysis read before the file is emptied
LAZY_ARTIFACT = "torch_xla_ext_lazy_compile"


def _distance(h: dict[str, Any], row: dict[str, Any], sig: Graph | None, look: Any) -> tuple[int, int, int]:
    """How far an earlier graph of a site is from a new one: another number of inputs first, then
    how many inputs (captured graphs) or tensors in scope differ; the latest wins a tie. The
    nearest is the one the new graph is compared with."""
    inputs = 0 if h["inputs"] == row["inputs"] else 1
    if h["sig"] is not None and sig is not None:
        a0, a1 = h["sig"].args, sig.args
        d = sum(x != y for x, y in zip(a0, a1)) + abs(len(a0) - len(a1))
    elif h["look"] is not None and look is not None:
        d = sum(1 for c in _snapshot.diff(h["look"], look, limit=1 << 30) if c["what"] in ("shape", "dtype"))
    else:
        d = 0
    return (inputs, d, -h["k"])


class LazyRecorder:
    """Installed once per process when torch_xla is imported (see the module)."""

    def __init__(self, emit: Callable[[Any], None], now_ms: Callable[[], float],
                 sites: _frames.SiteTable, debug_path: str | None, capture: str = "auto"):
        self._emit = emit
        self._now = now_ms
        self._sites = sites
        self._debug_path = debug_path
        self._debug_fd: int | None = None
        self._debug_offset = 0
        self._debug_rest = ""
        self._capture = capture
        self._lock = threading.RLock()
        self._seen = self._last_count = metrics.compile_count()
        self._k = 0
        self._steps: dict[int, int] = {}
        self._threads: set[int] = set()
        self._executions: list[tuple[str, int, str]] = []
        self._history: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self._window = WINDOW if capture == "auto" else 0
        self._pending: bytes | None = None
        self._before_count = self._seen
        self._capture_failures = 0
        self._paused = False
        self._ir_debug = False
        self._set_ir_debug(self._armed())

    # ---- the step marker's stand-in ------------------------------------------------------------

    def install(self) -> str:
        """Puts the stand-in on torch_xla's step marker; returns how ("tap" or "python")."""
        try:
            # The extension is optional here: an interpreter it was not built for gets a plain wrapper.
            from torch_xla_ext._ext import graph_breaks as core
        except ImportError:
            core = None

        def make(original: Callable[..., Any]) -> Callable[..., Any]:
            if core is not None:
                self._tap = core.Tap(original, "sync", counter_value=metrics.counter_reader(), before=self.before,
                                     after=self.after)
                return self._tap.stand_in()

            def stand_in(*args: Any, **kwargs: Any) -> Any:
                self.before()
                out = original(*args, **kwargs)
                self.after(0, "")
                return out
            return stand_in

        lazy.chain_step_marker(make)
        return "tap" if core is not None else "python"

    def pause(self, paused: bool) -> None:
        """Stops (or resumes) recording at step markers: they then cost one Python call each (what
        bench/trace_bench.py measures the recorder against, in one process)."""
        self._paused = bool(paused)

    def before(self) -> None:
        if self._paused:
            return
        try:
            self._before_count = metrics.compile_count()
            if self._armed() and self._capture_failures < 3:
                self._pending = lazy.pending_graph(lazy.default_device())
        except Exception as e:  # noqa: BLE001 - a best-effort hook on the user's step: it goes on, the problem is recorded
            self._capture_failures += 1
            self._pending = None
            self._problem("reading the pending graph", e)

    def after(self, duration_ns: int, key: str) -> None:
        if self._paused:
            return
        try:
            with self._lock:
                self._after(sys._getframe(1), duration_ns, int(key or 0))
        except Exception as e:  # noqa: BLE001 - a best-effort hook on the user's step: it goes on, the problem is recorded
            self._problem("recording a step", e)
        finally:
            self._pending = None

    # ---- per step --------------------------------------------------------------------------------

    def _armed(self) -> bool:
        return self._capture == "all" or (self._capture == "auto" and self._window > 0)

    def _set_ir_debug(self, on: bool) -> None:
        if on != self._ir_debug:
            try:
                hlo_debug.set_ir_debug(on)
                self._ir_debug = on
            except RuntimeError as e:  # torch_xla refused: recorded, the graphs are then not captured op by op
                self._problem("switching torch_xla's IR debug", e)

    def _after(self, frame: Any, duration_ns: int, launched: int) -> None:
        live = _frames.live_frames(frame)
        trig = _frames.classify(live)
        replica = lazy.replica()
        self._threads.add(threading.get_ident())
        compiled = self.process_compiles(frame, trig, replica)
        # A step marker with nothing to run (the sync after moving a model to the device) ends no step.
        if trig.kind in STEP_KINDS and (launched or compiled or self._executions):
            n = self._steps[replica] = self._steps.get(replica, 0) + 1
            user = _frames.user_frame(live)
            self._emit(Step(n=n, t=self._now(), site=self._sites.id(user), kind=trig.kind, ms=round(duration_ns / 1e6, 3),
                            graphs=launched, replica=replica, executions=self._executions,
                            debug_offset=self.consumed_offset()))
            self._executions = []
        self._window = WINDOW if compiled else max(0, self._window - 1)
        self._set_ir_debug(self._armed())

    def steps(self) -> int:
        return max(self._steps.values(), default=0)

    def compile_time_count(self) -> int:
        """torch_xla's own count of compiles in this process (``CompileTime``)."""
        return metrics.compile_count()

    def forked(self) -> None:
        """In a forked child: torch_xla there still writes its parent's analysis file, which the
        parent reads; the child stops reading it."""
        self._debug_path = None
        self._debug_fd = None
        self._executions = []

    # ---- compiles ---------------------------------------------------------------------------------

    def process_compiles(self, frame: Any = None, sync_trigger: Trigger | None = None, replica: int = 0) -> int:
        """Records the compiles since the last call (and the executions torch_xla's analysis
        listed); returns how many. ``frame`` is the step marker's caller (None at exit)."""
        now = metrics.compile_count()
        if now < self._last_count:  # someone cleared torch_xla's metrics: counting starts again
            self._seen = 0
        self._last_count = now
        d = now - self._seen
        entries = self._read_debug()
        compiles = [e for e in entries if e.kind == "compile"]
        for e in entries:
            if e.kind == "execute":
                t = _frames.classify(e.frames, e.cause)
                user = _frames.user_frame(e.frames)
                self._executions.append((t.kind, self._sites.id(user), e.graph_hash))
        if d <= 0 and not compiles:
            return 0
        look = None
        if frame is not None:
            try:
                look = _snapshot.named_tensors(frame, _frames.is_library)
            except Exception as e:  # noqa: BLE001 - the user's objects in scope may raise anything: recorded, the compile still is
                self._problem("naming the tensors in scope", e)
        n = max(d, len(compiles))
        samples = metrics.compile_samples(n)
        samples = [None] * (n - len(samples)) + samples
        rows: list[dict[str, Any]] = []
        for e in compiles:
            t = _frames.classify(e.frames, e.cause)
            t.cause, t.frames = e.cause, _frames.frame_strings(e.frames)
            rows.append({"trigger": t, "graph_hash": e.graph_hash, "inputs": e.inputs, "outputs": e.outputs,
                         "sizes": e.sizes})
        missing = n - len(rows)
        if missing > 0:
            in_sync = max(0, now - self._before_count) if sync_trigger is not None else 0
            if self._debug_path is None and sync_trigger is not None:
                # No analysis: the compiles inside the sync are its; the others happened between syncs.
                for i in range(missing):
                    mine = i >= missing - in_sync
                    t = dataclasses.replace(sync_trigger) if mine else Trigger(kind="other")
                    rows.append({"trigger": t, "graph_hash": "", "inputs": None, "outputs": None, "sizes": {}})
            else:
                for _ in range(missing):
                    rows.append({"trigger": Trigger(kind="other",
                                                    cause="a compile torch_xla wrote no analysis of (no Python frames)"),
                                 "graph_hash": "", "inputs": None, "outputs": None, "sizes": {}})
        # Advanced by what was recorded, not to `now`: another replica thread's compile may have
        # written its analysis before its CompileTime sample (or the other way round).
        ordinal = self._seen
        self._seen += len(rows)
        step = self.steps() + 1
        for row, sample in zip(rows, samples):
            self._k += 1
            ordinal += 1
            self._compile(row, sample, step, look, replica, sync_trigger, ordinal)
        return len(rows)

    def _compile(self, row: dict[str, Any], sample: Any, step: int, look: dict[str, list[Any]] | None,
                 replica: int, sync_trigger: Trigger | None, ordinal: int) -> None:
        trig: Trigger = row["trigger"]
        sig = None
        if self._pending is not None and sync_trigger is not None and trig.kind == sync_trigger.kind \
                and trig.site == sync_trigger.site:
            try:
                sig = Graph(k=self._k, graph_hash=row["graph_hash"], **lazy.graph_signature(self._pending))
            except Exception as e:  # noqa: BLE001 - jaxlib's MLIR reader may raise anything on an artifact: recorded
                self._problem("reading a captured graph", e)
            self._pending = None
            if sig is not None and row["inputs"] is not None and len(sig.args) != row["inputs"]:
                self._problem("reading a captured graph", f"the captured graph has {len(sig.args)} inputs, the "
                              f"compiled one {row['inputs']}: not used")
                sig = None
        key = (trig.kind, trig.site)
        earlier = self._history.get(key, [])
        changed: list[dict[str, Any]] = []
        previous = None
        same = next((h for h in earlier if row["graph_hash"] and h["graph_hash"] == row["graph_hash"]), None)
        if same is not None:
            # torch_xla's hash of a graph does not name its device: the same graph again is the
            # copy for another device this process drives (xmp.spawn's threads), or a recompile
            # after the compilation cache dropped it.
            previous = same["k"]
            changed = [{"what": "same_graph", "detail": f"the same graph as compile {same['k']} (step {same['step']}): "
                        "compiled again for another device of this process, or after torch_xla's compilation "
                        "cache dropped it"}]
        elif earlier and trig.kind not in ("dynamo",):
            h = min(earlier, key=lambda h: _distance(h, row, sig, look))
            previous, changed = h["k"], self._changes(h, look, sig, row)
        tensors: dict[str, list[Any]] = {}
        roles: dict[str, int] = {}
        if look is not None:
            tensors = dict(list(((n, v) for n, v in look.items() if v[0] in ("user_input", "local")))[:64])
            for v in look.values():
                roles[v[0]] = roles.get(v[0], 0) + 1
        rec = Compile(k=self._k, ordinal=ordinal, step=step, t=self._now(), graph_hash=row["graph_hash"], trigger=trig,
                      ms=round(sample[1] / 1e6, 3) if sample else None, inputs=row["inputs"], outputs=row["outputs"],
                      captured=sig is not None, changed=changed, previous=previous, sizes=row["sizes"],
                      debug_offset=self.consumed_offset(), tensors=tensors, roles=roles, replica=replica)
        rec.advice = _advice.lazy(trig, changed, earlier_at_site=len(earlier))
        self._emit(rec)
        if sig is not None:
            self._emit(sig)
        self._artifact(rec)
        earlier.append({"k": self._k, "step": step, "graph_hash": row["graph_hash"], "look": look, "sig": sig,
                        "inputs": row["inputs"], "outputs": row["outputs"]})
        self._history[key] = earlier[-_HISTORY:]

    @staticmethod
    def _changes(h: dict[str, Any], look: Any, sig: Graph | None, row: dict[str, Any]) -> list[dict[str, Any]]:
        changes: list[dict[str, Any]] = []
        if h["sig"] is not None and sig is not None:
            changes.extend(_graphs.diff(h["sig"], sig, _frames.is_library))
            if look is not None:
                _graphs.name_inputs(changes, dict(look))
        elif h["inputs"] is not None and row["inputs"] is not None and h["inputs"] != row["inputs"]:
            changes.append({"what": "inputs", "old": h["inputs"], "new": row["inputs"], "added": [], "removed": []})
        if h["look"] is not None and look is not None:
            for c in _snapshot.diff(h["look"], look):
                changes.append(dict(c, what="tensor_" + c["what"]))
        if not changes and (h["sig"] is None or sig is None):
            why = ("a host read's graph runs before the trace can read it" if row["trigger"].kind == "host_read"
                   else "the graph was not captured (outside a capture window)")
            changes.append({"what": "not_captured", "detail": f"{why}; no tensor in scope changed shape"})
        return changes

    def _artifact(self, rec: Compile) -> None:
        """The compile as an artifact of torch's structured trace (outside any Dynamo compile id),
        for tlparse, when that trace is written."""
        try:
            if trace_log.active():
                trace_log.artifact(LAZY_ARTIFACT, {k: v for k, v in to_json(rec).items() if k != "ev"}, None)
        except (OSError, ValueError, TypeError) as e:  # torch's logger refused it: recorded, the trace goes on
            self._problem("writing the compile into torch's structured trace", e)

    # ---- torch_xla's analysis file -------------------------------------------------------------------

    def _read_debug(self) -> list[Any]:
        if self._debug_path is None:
            return []
        if self._debug_fd is None:
            try:
                self._debug_fd = os.open(self._debug_path, os.O_RDONLY)
            except FileNotFoundError:
                return []
        size = os.fstat(self._debug_fd).st_size
        if size < self._debug_offset:  # emptied behind us
            self._debug_offset, self._debug_rest = 0, ""
        if size == self._debug_offset:
            return []
        data = os.pread(self._debug_fd, size - self._debug_offset, self._debug_offset)
        self._debug_offset += len(data)
        text = self._debug_rest + data.decode("utf-8", "replace")
        entries, self._debug_rest = xla_debug.parse(text)
        if self._debug_offset >= _TRUNCATE_AT and not self._debug_rest and len(self._threads) <= 1:
            # Read to the end by the only thread that writes it: empty it so it does not grow with the run.
            os.truncate(self._debug_path, 0)
            self._debug_offset = 0
        return entries

    def consumed_offset(self) -> int:
        return self._debug_offset - len(self._debug_rest.encode())

    # ---- problems ----------------------------------------------------------------------------------

    def _problem(self, where: str, e: Any) -> None:
        """Records what went wrong (an exception, or a sentence) as a ``problem`` record; the
        report lists it under its process."""
        self._emit(Problem(t=self._now(), where=where,
                           message=f"{type(e).__name__}: {e}" if isinstance(e, BaseException) else str(e)))
