"""Running a user's command under the recorder: ``torch-xla-ext trace --out DIR -- COMMAND ...``.

The command runs unchanged as a child process with the terminal's stdin, stdout and stderr, and
its exit status becomes ours (a shell's 127 for a command that does not exist, 126 for one that
cannot run, 128+N for one killed by signal N). What it gets in its environment:
``PYTHONPATH`` starting with ``trace/site`` (whose ``sitecustomize`` starts the recorder in every
Python process the command starts, and chains to any other ``sitecustomize``),
``TORCH_XLA_EXT_TRACE=DIR``, where this torch_xla_ext lives, the capture policy, and
``TORCH_TRACE=DIR/torch_trace`` for tlparse (unless set, or ``torch_trace=False``).

``--out`` is checked before the command starts: it must be a directory we can write, and one that
holds a trace already is refused unless ``overwrite`` (which removes that trace's files, nothing
else). ``run.json`` in it keeps the command, its environment knobs and its exit status.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Sequence

import torch_xla_ext
from torch_xla_ext import _json
from torch_xla_ext.trace import startup
from torch_xla_ext.trace.schema import SCHEMA_VERSION, RunManifest, TraceError

__all__ = ["RUN_FILE", "TRACE_FILES", "child_environment", "prepare_out", "resolve_command", "run"]

RUN_FILE = "run.json"
# What a trace directory holds (what --overwrite removes): rank files, torch_xla's analysis, torch's
# structured trace, the reports.
TRACE_FILES = ("rank-*.jsonl", "proc-*.jsonl", RUN_FILE, "report.md", "report.json", "report.html",
               "trace.perfetto.json", "startup-error-*.txt", startup.DEBUG_DIR, "torch_trace")
EXIT_NOT_FOUND, EXIT_NOT_EXECUTABLE = 127, 126


class CommandError(Exception):
    """A command that cannot start, with the shell's exit status for it."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


def _existing_trace(path: str) -> list[str]:
    return sorted(os.path.basename(p) for pattern in TRACE_FILES for p in glob.glob(os.path.join(path, pattern)))


def prepare_out(out: str, overwrite: bool = False) -> str:
    """The absolute trace directory, created and checked writable; raises :class:`TraceError`
    naming ``--out`` when it cannot be, or when it holds a trace and ``overwrite`` is False."""
    path = os.path.abspath(out)
    if os.path.exists(path) and not os.path.isdir(path):
        raise TraceError(f"--out {out}: exists and is not a directory")
    if os.path.isdir(path):
        old = _existing_trace(path)
        if old and not overwrite:
            raise TraceError(f"--out {out} already holds a trace ({', '.join(old[:4])}{' ...' if len(old) > 4 else ''}); "
                             "pass --overwrite to replace it, or choose another directory")
        for name in old:
            p = os.path.join(path, name)
            try:
                shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.remove(p)
            except OSError as e:
                raise TraceError(f"--out {out}: cannot remove the old trace's {name}: {e.strerror or e}") from None
    try:
        os.makedirs(path, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-probe-", dir=path)
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        raise TraceError(f"--out {out}: not a directory we can write ({e.strerror or e})") from None
    return path


def resolve_command(command: Sequence[str], env: dict[str, str]) -> str:
    """The executable of ``command`` as the shell would find it; :class:`CommandError` (127 or 126)
    otherwise."""
    if not command:
        raise CommandError("no command given after --", 2)
    name = command[0]
    if os.sep in name or (os.altsep and os.altsep in name):
        if not os.path.exists(name):
            raise CommandError(f"{name}: No such file or directory", EXIT_NOT_FOUND)
        if os.path.isdir(name) or not os.access(name, os.X_OK):
            raise CommandError(f"{name}: Permission denied" if not os.path.isdir(name) else f"{name}: Is a directory",
                               EXIT_NOT_EXECUTABLE)
        return name
    found = shutil.which(name, path=env.get("PATH", os.defpath))
    if found is None:
        raise CommandError(f"{name}: command not found", EXIT_NOT_FOUND)
    return found


def site_directory() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "site")


def package_parent() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(torch_xla_ext.__file__)))


def child_environment(out: str, environ: dict[str, str] | None = None, capture: str = "auto",
                      torch_trace: bool = True) -> dict[str, str]:
    """The environment the traced command runs with (see the module)."""
    env = dict(os.environ if environ is None else environ)
    env["PYTHONPATH"] = os.pathsep.join([site_directory()] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env[startup.TRACE_ENV] = out
    env[startup.PACKAGE_ENV] = package_parent()
    env[startup.CAPTURE_ENV] = capture
    env.pop(startup.OWNS_ENV, None)
    if torch_trace and "TORCH_TRACE" not in env:
        env["TORCH_TRACE"] = os.path.join(out, "torch_trace")
    return env


def run(command: Sequence[str], out: str, *, overwrite: bool = False, capture: str = "auto",
        torch_trace: bool = True) -> tuple[int, str | None]:
    """Runs ``command`` traced into ``out``; returns (its exit status as a shell gives it, the
    trace directory). Bad input raises :class:`TraceError` before anything starts; a command that
    cannot start returns (127 or 126, None) after saying why on stderr."""
    if capture not in startup.CAPTURE_POLICIES:
        raise TraceError(f"--capture must be one of {', '.join(startup.CAPTURE_POLICIES)}, got {capture!r}")
    path = prepare_out(out, overwrite)
    env = child_environment(path, capture=capture, torch_trace=torch_trace)
    try:
        executable = resolve_command(command, env)
    except CommandError as e:
        print(f"torch-xla-ext trace: {e}", file=sys.stderr, flush=True)
        return e.status, None
    manifest = RunManifest(schema_version=SCHEMA_VERSION, command=list(command), executable=executable,
                           cwd=os.getcwd(), capture=capture, start_wall=time.time(),
                           torch_trace=env.get("TORCH_TRACE") if torch_trace else None)
    _write_manifest(path, manifest)
    status = _run_child(list(command), env)
    manifest.end_wall = time.time()
    manifest.exit_code, manifest.signal = _exit_fields(status)
    _write_manifest(path, manifest)
    return (128 - status if status < 0 else status), path


def _exit_fields(status: int) -> tuple[int | None, str | None]:
    """(exit code, signal name) of a child's status (negative: killed by that signal)."""
    if status < 0:
        try:
            return None, signal.Signals(-status).name
        except ValueError:
            return None, f"signal {-status}"
    return status, None


def _write_manifest(path: str, manifest: RunManifest) -> None:
    tmp = os.path.join(path, RUN_FILE + ".tmp")
    with open(tmp, "w") as f:
        _json.dump(manifest, f, indent=1)
    os.replace(tmp, os.path.join(path, RUN_FILE))


def _run_child(command: list[str], env: dict[str, str]) -> int:
    """Runs the command with our stdio; SIGTERM and SIGHUP sent to us go to it, and Ctrl-C (which
    the terminal sends to it as well) does not stop us before it ends."""
    proc = subprocess.Popen(command, env=env)
    forwarded = {}

    def forward(signum: int, _frame: Any) -> None:
        try:
            proc.send_signal(signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGTERM, signal.SIGHUP):
        forwarded[sig] = signal.signal(sig, forward)
    forwarded[signal.SIGINT] = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        while True:
            try:
                return proc.wait()
            except InterruptedError:
                continue
    finally:
        for sig, handler in forwarded.items():
            signal.signal(sig, handler)
