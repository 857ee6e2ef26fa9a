"""The reader process of StableHLO portable artifacts: MLIR's bytecode reader (jaxlib's, through
``_compat.jax_mlir``) run in a process of its own, so a bundle's ``module.mlirbc`` (or torch_xla's
``.bytecode``), which is untrusted input, can crash, overflow its stack or hang there and become a
typed error here.

Example:
    >>> from torch_xla_ext.export import artifact_reader
    >>> try:
    ...     artifact_reader.portable_artifact_to_text(b"ML\\xefR garbage", "module.mlirbc")
    ... except BundleError as e:
    ...     print(str(e).split(" (")[0])
    module.mlirbc: not a StableHLO portable artifact
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import threading
from multiprocessing.connection import Connection
from typing import Any

from torch_xla_ext._compat import jax_mlir
from torch_xla_ext.errors import InternalError
from torch_xla_ext.export.errors import BundleError

__all__ = ["portable_artifact_to_text", "reader_process"]

# MLIR's bytecode reader and printer recurse once per level of type/attribute nesting, and crash
# (SIGSEGV) on some corrupt artifacts: deserializing runs in a reader process of its own (a
# subprocess of this Python, not a fork beside JAX's threads), on a thread with a big stack, so a
# crash, a stack overflow or a hang there is a typed error here. The process is started at the first
# artifact and kept for the next ones (the first request imports jaxlib's MLIR, ~1 s).
_READER_STACK_BYTES = 1 << 30


def portable_artifact_to_text(data: bytes, path: str, timeout: float = 120.0) -> str:
    """The module of a StableHLO portable artifact, as text. MLIR's bytecode reader can crash
    (SIGSEGV) on corrupt input, so it runs in a reader process; a crash, a hang or a rejection
    is a BundleError naming `path`."""
    kind, payload = _READER.request(data, path, timeout)
    if kind == "ok":
        return payload
    if kind == "error":
        raise BundleError(f"{path}: not a StableHLO portable artifact ({payload})")
    raise BundleError(f"{path}: not a StableHLO portable artifact (the bytecode reader {payload})")


class _ReaderProcess:
    """One reader process (``python -c ... serve``) and the two pipes to it, restarted after a
    crash or a timeout. Messages are ``multiprocessing.connection`` frames of raw bytes (never
    pickles): a request is 8 bytes of stack size then the artifact; a reply is a tag byte (T: text,
    E: ValueError's message, X: another exception) then UTF-8."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: Any = None
        self._conn: Any = None
        self._pid = -1  # the process that started it (a forked copy of this object starts its own)

    def request(self, data: bytes, path: str, timeout: float) -> tuple[str, str]:
        """("ok", text), ("error", message) or ("crashed", how)."""
        request = _READER_STACK_BYTES.to_bytes(8, "little") + data
        with self._lock:
            for attempt in (0, 1):
                if self._proc is None or self._pid != os.getpid() or self._proc.poll() is not None:
                    self._start(path)
                try:
                    self._conn.send_bytes(request)
                except OSError:  # it had died before this artifact: a new reader gets it once more
                    self._stop()
                    if attempt:
                        raise InternalError(f"{path}: the bytecode reader process does not take requests") from None
                    continue
                try:
                    if not self._conn.poll(timeout):
                        self._stop(kill=True)
                        return "crashed", f"did not finish in {timeout:g} s"
                    reply = self._conn.recv_bytes()
                except (EOFError, OSError):  # it died reading this artifact
                    return "crashed", self._stop()
                break
        tag, body = reply[:1], reply[1:].decode("utf-8", "surrogateescape")
        return ("ok" if tag == b"T" else "error" if tag == b"E" else "crashed"), body

    def _start(self, path: str) -> None:
        to_child, from_parent = os.pipe()
        to_parent, from_child = os.pipe()
        env = dict(os.environ)
        # The child imports this package from where this process did (tests put it on sys.path);
        # -P keeps the working directory off its sys.path, so another checkout there is not it.
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # above torch_xla_ext/
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        env.pop("PYTHONFAULTHANDLER", None)  # an expected crash is reported here, not dumped there
        try:
            self._proc = subprocess.Popen(
                [sys.executable, *(["-P"] if sys.version_info >= (3, 11) else []), "-c",
                 "import sys; from torch_xla_ext.export import artifact_reader; "
                 "artifact_reader.serve(int(sys.argv[1]), int(sys.argv[2]))", str(to_child), str(from_child)],
                pass_fds=(to_child, from_child), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, env=env)
        except OSError as e:
            os.close(to_parent)
            os.close(from_parent)
            raise InternalError(f"{path}: cannot start the bytecode reader process {sys.executable!r} ({e})") from None
        finally:
            os.close(to_child)
            os.close(from_child)
        self._conn = _Duplex(Connection(to_parent, writable=False), Connection(from_parent, readable=False))
        self._pid = os.getpid()

    def _stop(self, kill: bool = False) -> str:
        """Ends the process (``kill``: now, it hangs); how it ended (for the error)."""
        proc, self._proc = self._proc, None
        self._conn.close()
        if kill:
            proc.kill()
        try:
            code = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        if code < 0:
            try:
                return f"crashed with {signal.Signals(-code).name}"
            except ValueError:
                return f"crashed with signal {-code}"
        return f"exited with status {code} and no result"

    def forget_after_fork(self) -> None:
        """In a forked child: the parent's reader is not this process's (its lock may even be
        held by a thread the fork did not copy); the next artifact starts a reader of its own."""
        self._lock = threading.Lock()
        if self._conn is not None:
            self._conn.close()
        self._proc = self._conn = None

    def close(self) -> None:
        with self._lock:
            if self._proc is not None and self._pid == os.getpid():
                self._conn.close()  # the reader sees the end of its input and exits
                try:
                    self._proc.wait(timeout=5)
                except Exception:  # noqa: BLE001 - at exit: never hang or raise
                    self._proc.kill()
                self._proc = None


class _Duplex:
    """A reading and a writing ``Connection`` (one pipe each) as one."""

    def __init__(self, reader: Any, writer: Any) -> None:
        self.reader, self.writer = reader, writer

    def send_bytes(self, data: bytes) -> None:
        self.writer.send_bytes(data)

    def poll(self, timeout: float) -> bool:
        return self.reader.poll(timeout)

    def recv_bytes(self) -> bytes:
        return self.reader.recv_bytes()

    def close(self) -> None:
        self.reader.close()
        self.writer.close()


_READER = _ReaderProcess()


def reader_process() -> Any:
    """The artifact reader's running process (a ``subprocess.Popen``), or None before the first
    read or after it ended: for tests and diagnostics."""
    return _READER._proc


def _close_reader() -> None:
    _READER.close()


atexit.register(_close_reader)
os.register_at_fork(after_in_child=_READER.forget_after_fork)


def serve(read_fd: int, write_fd: int) -> None:
    """The reader process's loop (its entry point): answers requests until its input ends. It only
    runs MLIR's reader."""
    requests, replies = Connection(read_fd, writable=False), Connection(write_fd, readable=False)
    while True:
        try:
            request = requests.recv_bytes()
        except EOFError:
            return
        stack, data = int.from_bytes(request[:8], "little"), request[8:]
        try:
            reply = b"T" + _on_big_stack(stack, _deserialize, data).encode("utf-8", "surrogateescape")
        except ValueError as e:
            reply = b"E" + str(e).encode("utf-8", "replace")
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            reply = b"X" + f"raised {type(e).__name__}: {e}".encode("utf-8", "replace")
        replies.send_bytes(reply)


def _on_big_stack(stack_bytes: int, fn, *args):
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - re-raised on the calling thread
            out["error"] = e

    old = threading.stack_size(stack_bytes)
    try:
        thread = threading.Thread(target=run, name="txe-artifact-reader")
        thread.start()
    finally:
        threading.stack_size(old)
    thread.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def _deserialize(data: bytes) -> str:
    """In the reader process: the artifact's text; ValueError(jaxlib's message) if it is not one."""
    try:
        return jax_mlir.portable_artifact_to_text(data)
    except RuntimeError as e:  # jaxlib's XlaRuntimeError (INVALID_ARGUMENT: failed to deserialize)
        raise ValueError(str(e)) from None
