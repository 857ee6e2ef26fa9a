"""Runs one pytest file inside a cached venv of another stack (current torch without torch_xla, ...),
with torch_xla_ext installed there from its wheel the way that route's install line says.

The main of every ``txe_venv_test`` (bazel/txe.bzl), or by hand from the checkout:

    .venv/bin/python tests/stacks/run_in_venv.py --venv torch_2_14_1 --extras torch,jax \\
        tests/stacks/current_torch_test.py [pytest arguments]

1. The venv: ``python/tool_venv.py``'s cached venv of ``python/tool_requirements/<venv>.txt``
   (exact pins, made once per pin file and CPython; from the registry on a cold machine).
2. The wheel of that venv's CPython (``tests/packaging/wheels.py``), installed with
   ``pip install --no-index '<wheel>[<extras>]'``: offline, so the pins must already meet every
   requirement of the route; then ``pip check`` must be clean.
3. If the test file defines ``prepare(out_dir)``, it runs first, here: in this interpreter, the
   project venv with the pinned stack (to export a bundle the other stack then reads, say). The
   test finds what it wrote under ``$TXE_PREPARED``.
4. pytest on the file, in the venv, from a temporary directory with ``--import-mode=importlib``,
   so ``torch_xla_ext`` is the installed wheel and not the checkout (the file imports only the
   package and what the venv has). Its JUnit XML goes where Bazel asks.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import pathlib
import subprocess
import sys
import tempfile
import time

_HERE = pathlib.Path(__file__).resolve().parent
_ROOT = _HERE.parent.parent
for path in (_ROOT, _ROOT / "python"):  # tests.packaging.wheels and tool_venv from a checkout
    if str(path) not in sys.path:
        sys.path.append(str(path))

import tool_venv  # noqa: E402  (python/: //python:tool_venv under Bazel)
from tests.packaging.wheels import built_wheel  # noqa: E402

# What of this process must not reach the venv's interpreter.
_DROP = ("PYTHONPATH", "RUNFILES_DIR", "PYTHONSAFEPATH", "VIRTUAL_ENV", "PYTHONHOME", "TORCH_XLA_EXT_SKIP_VERSION_CHECK")


def _log(msg: str) -> None:
    print(f"[run_in_venv] {msg}", file=sys.stderr, flush=True)


def _venv_python(venv: pathlib.Path) -> str:
    return subprocess.run([str(venv / "bin" / "python"), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                          capture_output=True, text=True, timeout=60, check=True).stdout.strip()


def install(venv: pathlib.Path, extras: str) -> pathlib.Path:
    """The venv's CPython's wheel installed with ``extras``, offline, over an earlier build; raises
    SystemExit with pip's words when the route does not resolve or ``pip check`` is not clean."""
    wheel = built_wheel(_venv_python(venv))
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    subprocess.run(pip + ["uninstall", "-q", "-y", "torch-xla-ext"], capture_output=True, timeout=300)
    spec = f"{wheel}[{extras}]" if extras else str(wheel)
    proc = subprocess.run(pip + ["install", "-q", "--no-index", spec], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"pip install --no-index {spec} failed in {venv}:\n{proc.stderr[-3000:]}")
    check = subprocess.run(pip + ["check"], capture_output=True, text=True, timeout=300)
    if check.returncode != 0:
        raise SystemExit(f"pip check in {venv} after installing {spec}:\n{check.stdout}{check.stderr}")
    return wheel


def prepare(test_file: pathlib.Path, out_dir: pathlib.Path) -> bool:
    """Runs the file's ``prepare(out_dir)`` here, if it has one."""
    spec = importlib.util.spec_from_file_location(f"_txe_prepare_{test_file.stem}", test_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "prepare"):
        return False
    module.prepare(out_dir)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", required=True, help="a pin file's name in python/tool_requirements")
    parser.add_argument("--extras", default="", help="the wheel's extras for this route, e.g. torch,jax")
    parser.add_argument("--timeout", type=float, default=1500.0, help="seconds for the test run")
    parser.add_argument("test_file")
    args, pytest_args = parser.parse_known_args(argv)
    test_file = pathlib.Path(args.test_file).resolve()
    t0 = time.perf_counter()
    venv = tool_venv.ensure(args.venv)
    wheel = install(venv, args.extras)
    _log(f"{venv.name}: {wheel.name}[{args.extras}] installed offline, pip check clean "
         f"({time.perf_counter() - t0:.1f} s)")
    with tempfile.TemporaryDirectory(prefix="txe-venv-test-") as tmp:
        prepared = pathlib.Path(tmp) / "prepared"
        prepared.mkdir()
        t1 = time.perf_counter()
        if prepare(test_file, prepared):
            _log(f"prepare() on the pinned stack: {time.perf_counter() - t1:.1f} s")
        env = {k: v for k, v in os.environ.items() if k not in _DROP}
        env["TXE_PREPARED"] = str(prepared)
        env.setdefault("PJRT_DEVICE", "CPU")
        cmd = [str(venv / "bin" / "python"), "-m", "pytest", str(test_file), "-c", os.devnull,
               f"--rootdir={tmp}", "--import-mode=importlib", "-p", "no:cacheprovider", "-ra", "-q"]
        if os.environ.get("XML_OUTPUT_FILE"):
            cmd.append(f"--junitxml={os.environ['XML_OUTPUT_FILE']}")
        try:
            proc = subprocess.run(cmd + pytest_args, cwd=tmp, env=env, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            _log(f"pytest in {venv.name} timed out after {args.timeout:.0f} s")
            return 1
        _log(f"pytest in {venv.name}: exit {proc.returncode} ({time.perf_counter() - t0:.1f} s in all)")
        return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
