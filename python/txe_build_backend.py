"""PEP 517 backend: `pip wheel .` asks Bazel for the wheel of the CPython pip runs on
(//python:wheel_cp312 ...; //python:wheel for the project venv's) and hands it to pip.

The wheel is the same artefact `bazel test //tests/packaging:wheel_test` installs, so what the test
checks is what users get. It needs the project venv (`make setup`): Bazel runs with it, and builds
each CPython's extension against that CPython's headers (bazel/python_configure.bzl). A CPython
without a wheel (WHEEL_PYTHONS there: those torch_xla's release ships wheels for) is refused
before Bazel starts, naming the CPython, the supported ones and what to do.
"""

from __future__ import annotations

import os
import pathlib
import platform
import re
import shutil
import subprocess
import sys

_ROOT = pathlib.Path(__file__).resolve().parent.parent


def _bazel_env() -> dict[str, str]:
    """The environment Bazel runs with: the caller's, without pip's build isolation. pip (PEP 517)
    puts its temporary build environment's bin folders, new names on every run, in front of PATH
    and points PYTHONPATH there; Bazel keys every action on PATH, so they would rebuild the whole
    C++ core on each `pip wheel .`, and the next `bazel test` again. The build needs nothing from
    them (build-system requires nothing)."""
    env = dict(os.environ)
    for name in ("PATH", "PYTHONPATH"):
        if name in env:
            kept = [p for p in env[name].split(os.pathsep) if "pip-build-env-" not in p]
            if kept:
                env[name] = os.pathsep.join(kept)
            else:
                del env[name]
    return env


def _bazel(*args: str) -> str:
    cmd = ["bazel", *args]
    try:
        done = subprocess.run(cmd, cwd=_ROOT, check=True, stdout=subprocess.PIPE, text=True, env=_bazel_env())
    except FileNotFoundError:
        raise RuntimeError("bazel is not on PATH: run `make setup` first") from None
    return done.stdout.strip()


def wheel_pythons() -> list[str]:
    """The CPythons a wheel is built for ("3.10", ...): bazel/python_configure.bzl's WHEEL_PYTHONS."""
    path = _ROOT / "bazel" / "python_configure.bzl"
    m = re.search(r"^WHEEL_PYTHONS = \[([^\]]*)\]", path.read_text(), re.MULTILINE)
    if not m:
        raise RuntimeError(f"{path} defines no WHEEL_PYTHONS")
    return re.findall(r'"(3\.\d+)"', m.group(1))


def wheel_target(implementation: str, version: tuple[int, int]) -> str:
    """The Bazel target of the wheel for this interpreter; RuntimeError naming the interpreter,
    the CPythons with a wheel and what to do when there is none."""
    pythons = wheel_pythons()
    release = "%d.%d" % version
    if implementation != "CPython" or release not in pythons:
        raise RuntimeError(
            f"torch_xla_ext builds wheels for CPython {', '.join(pythons)} (the CPythons torch_xla's release ships "
            f"wheels for); this is {implementation} {release} ({sys.executable}). Run pip with one of those, e.g. "
            f"`python{pythons[-1]} -m pip wheel .`, or `make wheels` for all of them.")
    return "//python:wheel_cp" + release.replace(".", "")


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    target = wheel_target(platform.python_implementation(), sys.version_info[:2])
    if not (_ROOT / ".venv" / "bin" / "python").exists() and not os.environ.get("TXE_PYTHON"):
        raise RuntimeError("no project venv at .venv: run `make setup` first (or set TXE_PYTHON)")
    flags = ["--config=ci"] if os.environ.get("CI") else []
    print(f"[txe_build_backend] bazel build {target}", file=sys.stderr, flush=True)
    _bazel("build", *flags, target)
    bin_dir = pathlib.Path(_bazel("info", *flags, "bazel-bin")) / "python"
    tag = target.rsplit("_", 1)[1]
    # The project venv's CPython's target is an alias of //python:wheel (its directory is wheel/).
    wheels = sorted({w for d in (bin_dir / "wheel", bin_dir / f"wheel_{tag}") for w in d.glob(f"*-{tag}-{tag}-*.whl")})
    if len(wheels) != 1:
        raise RuntimeError(f"expected one {tag} wheel in {bin_dir}/wheel*, found {[w.name for w in wheels]}")
    os.makedirs(wheel_directory, exist_ok=True)
    shutil.copyfile(wheels[0], os.path.join(wheel_directory, wheels[0].name))
    return wheels[0].name


def get_requires_for_build_wheel(config_settings=None):
    return []
