"""The wheel under test: Bazel's //python:wheel, from the test's runfiles under `bazel test`, or
built with Bazel from the checkout under plain pytest, or the file $TXE_WHEEL when set (a wheel
`make wheel` already built)."""

from __future__ import annotations

import os
import pathlib
import subprocess

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
