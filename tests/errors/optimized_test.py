"""The package's own checks hold under ``python -O``, which strips ``assert`` statements: library
code raises our errors instead (read from the source), and a CounterWindow misused in an
optimized interpreter still gets its InternalError (the oracle: a real ``-O`` child process)."""

import ast
import os
import subprocess
import sys

import torch_xla_ext

PACKAGE = os.path.dirname(os.path.abspath(torch_xla_ext.__file__))
# None left (a type narrowing is written as typing.cast or a local, which -O keeps).
LEFT: set[tuple[str, str]] = set()


def _asserts() -> set[tuple[str, str]]:
    found = set()
    for d, dirs, files in os.walk(PACKAGE):
        dirs[:] = [x for x in dirs if x != "__pycache__"]
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(d, f)
                tree = ast.parse(open(path, encoding="utf-8").read(), path)
                found |= {(os.path.relpath(path, PACKAGE), ast.unparse(n)) for n in ast.walk(tree)
                          if isinstance(n, ast.Assert)}
    return found


def test_library_code_does_not_check_with_assert():
    assert _asserts() <= LEFT


def test_a_misused_counter_window_is_an_error_under_O():
    code = ("from torch_xla_ext._compat import metrics\n"
            "from torch_xla_ext.errors import InternalError\n"
            "assert False, 'not stripped'\n"  # proves the child runs optimized
            "try:\n    metrics.CounterWindow().delta()\n"
            "except InternalError as e:\n    print('InternalError:', e)\n")
    out = subprocess.run([sys.executable, "-O", "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PJRT_DEVICE": "CPU"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert "InternalError: CounterWindow.delta: used before __enter__" in out.stdout, out.stdout + out.stderr[-2000:]
