"""The wheels under test: Bazel's //python:wheel (this interpreter's CPython) or
//python:wheel_cp312 ... (`make wheels`), from the test's runfiles under `bazel test`, or built
with Bazel from the checkout under plain pytest, or from $TXE_WHEEL_DIR when set (a directory
`make wheels` filled, dist/) or the file $TXE_WHEEL (this CPython's); and the pins the tests hold
them to."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import packaging.utils
import packaging.version
from packaging.requirements import Requirement

# bazel/python_configure.bzl's WHEEL_PYTHONS, read by the build backend (python/: //python:build_backend,
# tests/conftest.py under plain pytest).
from txe_build_backend import wheel_pythons  # noqa: F401

REPO = pathlib.Path(__file__).resolve().parent.parent.parent


def wheel_tag(python: str | None = None) -> str:
    """'cp312' for "3.12"; this interpreter's tag by default."""
    return "cp" + (python or "%d.%d" % sys.version_info[:2]).replace(".", "")


def built_wheel(python: str | None = None) -> pathlib.Path:
    """The wheel for CPython ``python`` ("3.12"; default: this interpreter's)."""
    tag = wheel_tag(python)
    if os.environ.get("TXE_WHEEL") and tag == wheel_tag():
        return pathlib.Path(os.environ["TXE_WHEEL"])
    if os.environ.get("TXE_WHEEL_DIR"):
        dirs = [pathlib.Path(os.environ["TXE_WHEEL_DIR"])]
    elif "TEST_SRCDIR" in os.environ:
        root = pathlib.Path(os.environ["TEST_SRCDIR"]) / os.environ["TEST_WORKSPACE"] / "python"
        dirs = [root / "wheel", root / f"wheel_{tag}"]
    else:
        subprocess.run(["bazel", "build", f"//python:wheel_{tag}"], cwd=REPO, check=True, capture_output=True,
                       timeout=1800)
        dirs = [REPO / "bazel-bin" / "python" / "wheel", REPO / "bazel-bin" / "python" / f"wheel_{tag}"]
    wheels = sorted({w for d in dirs for w in d.glob(f"*-{tag}-{tag}-*.whl")})
    assert len(wheels) == 1, (tag, dirs, wheels)
    return wheels[0]


def pins(path: pathlib.Path = REPO / "python" / "requirements.txt") -> dict[str, str]:
    """A requirements file read with packaging (not the package's own reader): {canonical name:
    pinned version}; every line must be an exact pin."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", f"{path}: {line}"
            out[packaging.utils.canonicalize_name(req.name)] = spec.version
    return out


def jax_tool_releases() -> dict[str, str]:
    """{tool venv name: its jax version} of python/tool_requirements/jax_*.txt, the JAX-only venvs."""
    found = {p.stem: pins(p)["jax"] for p in (REPO / "python" / "tool_requirements").glob("jax_*.txt")}
    return dict(sorted(found.items(), key=lambda kv: packaging.version.Version(kv[1])))
