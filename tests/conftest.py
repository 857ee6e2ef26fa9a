"""Plain `pytest tests/<component>` from a checkout (after `make develop`), as Bazel runs it.

Bazel runs every test file in its own process with PJRT_DEVICE=CPU. Here the same holds for the
files that need it: a test file that changes process-wide state when it is imported (an
environment variable JAX or torch_xla reads once, SPMD mode, the number of CPU devices) says so
with a module-level ``OWN_PROCESS = "<why>"``, and this file runs it in a child pytest process
instead of importing it next to the others; the child's result is one test here, with its output
on failure. Bazel does not ship this file, so there such files simply run in their process.

Imports are as under Bazel: the repository root is on sys.path (pyproject's pythonpath; Bazel's
runfiles root), so tests import their helpers as ``from tests.<component> import <helper>`` (each
helper a py_library in its BUILD), and ``python/`` is put on it here as //python:tool_venv's
``imports`` does under Bazel.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

# Every test runs on the CPU (Bazel sets the same through --test_env).
os.environ.setdefault("PJRT_DEVICE", "CPU")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

_CHILD = "TXE_PYTEST_OWN_PROCESS"  # set in the child to the file it runs
_DECLARES = re.compile(r"^OWN_PROCESS\s*=", re.MULTILINE)
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if os.path.join(_ROOT, "python") not in sys.path:
    sys.path.append(os.path.join(_ROOT, "python"))  # tool_venv
OWN_PROCESS_TIMEOUT_S = 1800  # a whole test file; Bazel's own timeouts for the same files are shorter


def pytest_pycollect_makemodule(module_path, parent):
    if os.environ.get(_CHILD) == str(module_path):
        return None  # the child: collect the file normally
    try:
        source = module_path.read_text(encoding="utf-8")
    except OSError:
        return None
    if not _DECLARES.search(source):
        return None
    return OwnProcessFile.from_parent(parent, path=module_path)


class OwnProcessFile(pytest.File):
    def collect(self):
        yield OwnProcessItem.from_parent(self, name="own_process")


class OwnProcessFailed(Exception):
    pass


class OwnProcessItem(pytest.Item):
    """Runs the whole file with `python -m pytest` in a fresh interpreter."""

    def runtest(self) -> None:
        env = dict(os.environ, **{_CHILD: str(self.path)})
        cmd = [sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", str(self.path)]
        try:
            proc = subprocess.run(cmd, cwd=_ROOT, env=env, capture_output=True, text=True, timeout=OWN_PROCESS_TIMEOUT_S)
        except subprocess.TimeoutExpired as e:
            raise OwnProcessFailed(f"{' '.join(cmd)} gave no result within {OWN_PROCESS_TIMEOUT_S} s\n"
                                   f"--- stdout (tail) ---\n{(e.stdout or b'')[-6000:]!r}") from None
        if proc.returncode != 0:  # failures, errors, or no test run at all (5)
            raise OwnProcessFailed(
                f"{' '.join(cmd)} exited with {proc.returncode}\n--- stdout (tail) ---\n{proc.stdout[-6000:]}\n"
                f"--- stderr (tail) ---\n{proc.stderr[-3000:]}")

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, OwnProcessFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, f"{self.path.name} (in its own process)"
