"""The wheel under test: Bazel's //python:wheel, from the test's runfiles under `bazel test`, or
built with Bazel from the checkout under plain pytest, or the file $TXE_WHEEL when set (a wheel
`make wheel` already built); and the pins the tests hold it to."""

from __future__ import annotations

import os
import pathlib
import subprocess

import packaging.utils
import packaging.version
from packaging.requirements import Requirement

REPO = pathlib.Path(__file__).resolve().parent.parent.parent


def built_wheel() -> pathlib.Path:
    if os.environ.get("TXE_WHEEL"):
        return pathlib.Path(os.environ["TXE_WHEEL"])
    if "TEST_SRCDIR" in os.environ:
        wheel_dir = pathlib.Path(os.environ["TEST_SRCDIR"]) / os.environ["TEST_WORKSPACE"] / "python" / "wheel"
    else:
        subprocess.run(["bazel", "build", "//python:wheel"], cwd=REPO, check=True, capture_output=True, timeout=1800)
        wheel_dir = REPO / "bazel-bin" / "python" / "wheel"
    wheels = sorted(wheel_dir.glob("*.whl"))
    assert len(wheels) == 1, wheels
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
