"""The recorder of one traced process: its rank file, its code sites, its lazy-tensor and Dynamo
halves, and its end.

The rank file opens at the first event worth a record (a step, a compile, a Dynamo compile, an
uncaught exception), so processes that import torch but do no XLA or Dynamo work (a launcher, a
DataLoader worker) leave none. No method raises into the user's program: a problem becomes a
``problem`` record and the run goes on.
"""

from __future__ import annotations

import atexit
import threading
import traceback
from typing import Any

from torch_xla_ext import _versions
from torch_xla_ext._compat import lazy
from torch_xla_ext.errors import first_line
from torch_xla_ext.trace import frames as _frames
from torch_xla_ext.trace.schema import End, ExceptionInfo, Problem, Runtime
from torch_xla_ext.trace.stream import RankFile

__all__ = ["Recorder"]


class Recorder:
    def __init__(self, directory: str, capture: str, debug_path: str | None, analysis: str):
        self.directory = directory
        self.capture = capture
        self.debug_path = debug_path
        self.analysis = analysis
        self.file = RankFile(directory)
        self.sites = _frames.SiteTable(self.emit)
        self.lazy: Any = None
        self.dynamo: Any = None
        self._runtime = Runtime(t=0.0, compile_analysis=analysis, capture=capture, debug_file=debug_path or "")
        self._exception: ExceptionInfo | None = None
        self._ended = False
        self._lock = threading.RLock()
        self._broken = False

    # ---- records ---------------------------------------------------------------------------------

    def emit(self, record: Any) -> None:
        """Writes one record (a model of ``trace.schema``); the first of the file follows its
        ``runtime`` record."""
        if self._broken:
            return
        with self._lock:
            try:
                if not self.file.opened:
                    self._runtime.t = self.file.now_ms()
                    self.file.write(self._runtime)
                self.file.write(record)
            except OSError:  # a full or vanished disk: stop recording, never stop the run
                self._broken = True

    def now(self) -> float:
        return self.file.now_ms()

    def note(self, text: str) -> None:
        """A note of the ``runtime`` record (what this process records, and what not, and why)."""
        self._runtime.notes.append(text)

    def problem(self, where: str, e: BaseException) -> None:
        """Records what the recorder caught (a ``problem`` record, listed under the process in the
        report); the run goes on."""
        self.emit(Problem(t=self.now(), where=where, message=first_line(e, with_type=True)))

    # ---- import hooks ----------------------------------------------------------------------------

    def on_dynamo(self, module: Any) -> None:
        import torch  # imported already: torch._dynamo's import hook runs this

        self._runtime.torch = str(torch.__version__)
        try:
            _versions.require("trace")
        except _versions.UnsupportedStackError as e:
            self.note(f"Dynamo events not recorded: {first_line(e, with_type=True)}")
        else:
            try:
                # Imports graph_breaks and torch: only once torch._dynamo is imported.
                from torch_xla_ext.trace.dynamo import DynamoRecorder

                self.dynamo = DynamoRecorder(self.emit, self.now)
                self.dynamo.install()
            except Exception as e:  # noqa: BLE001 - a best-effort hook into torch's internals: the user's program runs on, the note says why
                self.note(f"Dynamo events not recorded: {first_line(e, with_type=True)}")
        atexit.register(self.at_exit)  # a torch-only process ends with a record too

    def on_torch_xla(self, module: Any) -> None:
        self._runtime.torch_xla = str(getattr(module, "__version__", ""))
        self.file.set_ordinal(lazy.runtime_ordinal)
        try:
            _versions.require("trace.lazy")
        except _versions.UnsupportedStackError as e:
            self.note(f"lazy-tensor and openxla bridge events not recorded: {first_line(e, with_type=True)}")
            atexit.register(self.at_exit)
            return
        # Imports torch_xla's metrics: only once torch_xla has finished importing.
        from torch_xla_ext.trace.lazy import LazyRecorder

        try:
            self.lazy = LazyRecorder(self.emit, self.now, self.sites, self.debug_path, self.capture)
            how = self.lazy.install()
            if how != "tap":
                self.note("the step marker is wrapped in Python (torch_xla_ext's extension does not load here): "
                          "torch_xla's own cause text of a sync names our wrapper")
        except Exception as e:  # noqa: BLE001 - a best-effort hook into torch_xla's internals: the user's program runs on, the note says why
            self.note(f"lazy-tensor events not recorded: {first_line(e, with_type=True)}")
        if self.dynamo is not None:
            try:
                self.dynamo.install_bridge()
            except Exception as e:  # noqa: BLE001 - a best-effort hook into the openxla bridge: the user's program runs on, the note says why
                self.note(f"openxla bridge events not recorded: {first_line(e, with_type=True)}")
        # After torch_xla's own exit handler is registered, so ours runs first (atexit is LIFO;
        # at_exit runs once, whichever registration comes first).
        atexit.register(self.at_exit)

    # ---- the end ---------------------------------------------------------------------------------

    def note_exception(self, kind: Any, value: Any, tb: Any) -> None:
        site = ""
        for fs in reversed(traceback.extract_tb(tb)):
            if not _frames.is_library(fs.filename):
                site = f"{fs.filename}:{fs.lineno}"
                break
        self._exception = ExceptionInfo(type=getattr(kind, "__name__", str(kind)), message=str(value)[:2000], site=site)

    def at_exit(self) -> None:
        with self._lock:
            if self._ended:
                return
            self._ended = True
        count = None
        if self.lazy is not None:
            try:
                self.lazy.process_compiles(None)
                count = self.lazy.compile_time_count()
            except Exception as e:  # noqa: BLE001 - a best-effort read at the interpreter's exit: recorded, the end record follows
                self.problem("at exit", e)
        if not self.file.opened and self._exception is None:
            return
        steps = self.lazy.steps() if self.lazy is not None else 0
        self.emit(End(t=self.now(), steps=steps, compile_time_count=count, exception=self._exception,
                      debug_offset=self.lazy.consumed_offset() if self.lazy is not None else None))

    def forked(self) -> None:
        """In a forked child: a new file, new sites; the recorders keep their hooks."""
        self.sites.reset()
        self._ended = False
        self._broken = False
        if self.lazy is not None:
            self.lazy.forked()
