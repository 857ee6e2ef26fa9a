"""PEP 517 backend: `pip wheel .` asks Bazel for //python:wheel and hands that wheel to pip.

The wheel is the same artefact `bazel test //tests/packaging:wheel_test` installs, so what the test
checks is what users get. It needs the project venv (`make setup`): the extension is built
against that interpreter's headers and pybind11.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

_ROOT = pathlib.Path(__file__).resolve().parent.parent


def _bazel(*args: str) -> str:
    cmd = ["bazel", *args]
    try:
        done = subprocess.run(cmd, cwd=_ROOT, check=True, stdout=subprocess.PIPE, text=True)
    except FileNotFoundError:
        raise RuntimeError("bazel is not on PATH: run `make setup` first") from None
    return done.stdout.strip()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    if not (_ROOT / ".venv" / "bin" / "python").exists() and not os.environ.get("TXE_PYTHON"):
        raise RuntimeError("no project venv at .venv: run `make setup` first (or set TXE_PYTHON)")
    flags = ["--config=ci"] if os.environ.get("CI") else []
    print("[txe_build_backend] bazel build //python:wheel", file=sys.stderr, flush=True)
    _bazel("build", *flags, "//python:wheel")
    out = pathlib.Path(_bazel("info", *flags, "bazel-bin")) / "python" / "wheel"
    wheels = sorted(out.glob("*.whl"))
    if len(wheels) != 1:
        raise RuntimeError(f"expected one wheel in {out}, found {[w.name for w in wheels]}")
    os.makedirs(wheel_directory, exist_ok=True)
    shutil.copyfile(wheels[0], os.path.join(wheel_directory, wheels[0].name))
    return wheels[0].name


def get_requires_for_build_wheel(config_settings=None):
    return []
