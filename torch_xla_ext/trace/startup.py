"""Starting the recorder in a traced process, when ``TORCH_XLA_EXT_TRACE`` is set: called by
``site/sitecustomize.py`` (``torch-xla-ext trace`` puts that directory on ``PYTHONPATH``), or by
the ``.pth`` file an installed wheel puts in site-packages (:data:`PTH_FILE`, whose one line,
:data:`PTH_LINE`, Python's ``site`` runs at every interpreter start: it reads one environment
variable and imports nothing else while the variable is unset). So setting
``TORCH_XLA_EXT_TRACE=DIR`` alone traces every Python process of an installed torch_xla_ext,
whatever launched it. Imports no torch.

What it does, before the user's code runs:
  * asks torch_xla to write its compile and execution analysis to this process's file in the
    trace directory (``_compat.xla_debug.configure``: only when the user set none of torch_xla's
    debug variables); ``TORCH_XLA_EXT_TRACE_OWNS`` says so, and a child process sets its own file
    in their place. Nothing else of torch_xla's is set: ``XLA_HLO_DEBUG``, for one, changes every
    graph hash;
  * registers import hooks: when ``torch._dynamo`` finishes importing, the Dynamo half of the
    recorder is installed; when ``torch_xla`` does, the lazy-tensor half (and the openxla
    bridge's part of the Dynamo half); when ``jax`` does, the JAX half's compile listener, and
    when ``torchax`` does, its seams on torchax's jit and dispatch. A process that imports none
    of them records nothing and leaves no file;
  * notes an uncaught exception (``sys.excepthook``, chained) for the end record, and gives a
    forked child its own file.

The environment variables (the one copy): ``TORCH_XLA_EXT_TRACE`` (the directory),
``TORCH_XLA_EXT_TRACE_CAPTURE`` (auto, all, off), ``TORCH_XLA_EXT_TRACE_PACKAGE`` (where
torch_xla_ext is, for interpreters that do not have it), ``TORCH_XLA_EXT_TRACE_OWNS``.
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Any, Callable

from torch_xla_ext._compat import xla_debug
from torch_xla_ext.trace.recorder import Recorder

__all__ = ["CAPTURE_ENV", "CAPTURE_POLICIES", "OWNS_ENV", "PACKAGE_ENV", "PTH_FILE", "PTH_LINE", "TRACE_ENV", "PostImport",
           "autostart", "recorder", "start"]

TRACE_ENV = "TORCH_XLA_EXT_TRACE"
CAPTURE_ENV = "TORCH_XLA_EXT_TRACE_CAPTURE"
CAPTURE_POLICIES = ("auto", "all", "off")  # its values (--capture)
PACKAGE_ENV = "TORCH_XLA_EXT_TRACE_PACKAGE"
OWNS_ENV = "TORCH_XLA_EXT_TRACE_OWNS"
DEBUG_DIR = "xla-debug"
STARTUP_ERROR = "startup-error-{pid}.txt"
# The wheel's site-packages hook (python/build_wheel.py writes it): a .pth line that starts with
# "import" is executed by `site` at start-up. Unset, it imports nothing; set, a package that does
# not import (a broken install) prints one line and the interpreter starts as without the hook.
PTH_FILE = "torch_xla_ext_trace.pth"
PTH_LINE = ("import os; os.environ.get('TORCH_XLA_EXT_TRACE') and exec(\"try:\\n __import__('torch_xla_ext.trace.startup', "
            "fromlist=['autostart']).autostart()\\nexcept Exception as e:\\n import sys; print('torch_xla_ext: the "
            "script trace did not start:', type(e).__name__, e, file=sys.stderr)\")\n")

_recorder: Any = None


def autostart() -> None:
    """Starts the recorder from ``os.environ`` at interpreter start-up, never raising: the user's
    program runs whatever happens to the recorder; why it could not start is written to
    ``DIR/startup-error-<pid>.txt``."""
    try:
        start()
    except Exception as e:  # noqa: BLE001 - runs before the user's program, which must start whatever failed here; the file says what
        note_startup_error(e)


def note_startup_error(e: BaseException | str) -> None:
    """Writes why the recorder did not start into the trace directory, where the report reads it
    (``startup-error-<pid>.txt``; never raises: a directory that cannot be written is left)."""
    text = f"{type(e).__name__}: {e}" if isinstance(e, BaseException) else e
    try:
        d = os.environ[TRACE_ENV]
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, STARTUP_ERROR.format(pid=os.getpid())), "a") as f:
            f.write(text + "\n")
    except (KeyError, OSError):
        pass


def recorder() -> Any:
    """This process's recorder (``trace.recorder.Recorder``), or None when the trace is off."""
    return _recorder


def start(environ: dict[str, str] | None = None) -> Any:
    """Starts this process's recorder (once); returns it."""
    global _recorder
    if _recorder is not None:
        return _recorder

    env = os.environ if environ is None else environ
    directory = os.path.abspath(env[TRACE_ENV])
    capture = env.get(CAPTURE_ENV, "auto")
    owns = set(filter(None, env.get(OWNS_ENV, "").split(",")))
    if "analysis" in owns:
        xla_debug.release(env)
    debug_path = os.path.join(directory, DEBUG_DIR, f"{socket.gethostname()}-{os.getpid()}.log")
    if xla_debug.configure(env, debug_path):
        owns.add("analysis")
        analysis = "file"
    else:
        debug_path = None
        analysis = "not read: the user set " + ", ".join(v for v in xla_debug.DEBUG_VARIABLES if v in env)
    if debug_path is not None and not xla_debug.writes_in_this_process(env):
        analysis = "not written: torch_xla writes its analysis only in local process 0"
    env[OWNS_ENV] = ",".join(sorted(owns))
    if debug_path is not None:
        os.makedirs(os.path.dirname(debug_path), exist_ok=True)
    _recorder = Recorder(directory, capture=capture, debug_path=debug_path, analysis=analysis)
    callbacks = {"torch._dynamo": _recorder.on_dynamo, "torch_xla": _recorder.on_torch_xla, "jax": _recorder.on_jax,
                 "torchax": _recorder.on_torchax}
    hooks = PostImport(callbacks, on_error=_recorder.problem)
    sys.meta_path.insert(0, hooks)
    for name in callbacks:  # already imported (a forked child, or a late start)
        if name in sys.modules:
            hooks.run(name, sys.modules[name])
    previous = sys.excepthook

    def excepthook(kind: Any, value: Any, tb: Any) -> None:
        _recorder.note_exception(kind, value, tb)
        previous(kind, value, tb)

    sys.excepthook = excepthook
    os.register_at_fork(after_in_child=_recorder.forked)
    return _recorder


class PostImport:
    """A meta-path finder that runs a callback once a module finished importing (it wraps the
    module's loader; the module keeps its own loader). A callback that raises does not fail the
    import: ``on_error(where, exception)`` records it."""

    def __init__(self, callbacks: dict[str, Callable[[Any], None]],
                 on_error: Callable[[str, BaseException], None]):
        self._callbacks = dict(callbacks)
        self._on_error = on_error
        self._busy: set[str] = set()

    def run(self, name: str, module: Any) -> None:
        callback = self._callbacks.pop(name, None)
        if callback is not None:
            try:
                callback(module)
            except Exception as e:  # noqa: BLE001 - a best-effort hook: the user's import succeeded; what failed is recorded
                self._on_error(f"the recorder's hook on importing {name}", e)

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in self._callbacks or name in self._busy:
            return None
        self._busy.add(name)
        try:
            spec = None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
        finally:
            self._busy.discard(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _Loader(spec.loader, name, self)
        return spec


class _Loader:
    def __init__(self, loader: Any, name: str, hooks: PostImport):
        self._loader, self._name, self._hooks = loader, name, hooks

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        module.__loader__ = self._loader
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        self._hooks.run(self._name, module)

    def __getattr__(self, item: str) -> Any:
        return getattr(self._loader, item)
