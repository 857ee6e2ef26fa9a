"""The wheels installed as a training image gets them: a fresh venv of the oldest and the newest
CPython the wheels are built for (bazel/python_configure.bzl's WHEEL_PYTHONS: 3.10 and 3.13), and
`pip install 'torch_xla_ext-*-cp3XY-*.whl[xla]'`, pip resolving the tested stack (torch,
torch_xla; jax and jaxlib on 3.11+) and the ranges (numpy, pydantic, ...) itself from the
configured registries, without the [plot] extra. `pip check` must be clean and `torch-xla-ext
doctor` must write every section and exit 0:

* on 3.11+ every section is ok;
* on 3.10 there is no jax 0.7.1 (jax 0.7 and later need CPython 3.11), so the extra installs no
  jax: parity, export and call_jax are findings that name it (the gate's refusal), the graph-break
  section runs, and the embedded block leaves its JAX gate out.

pip resolves each venv's stack against the registries with `pip download` into one wheelhouse
for the run (the newest CPython first), then installs from it offline: the wheels every CPython
shares (numpy's pure-Python neighbours, the CUDA libraries torch brings) are fetched once.
Costs several GB and a few minutes per CPython, so Bazel runs it only when asked (`bazel test
//tests/packaging:fresh_venv_test`, as .ci/run does). `TXE_FRESH_PYTHONS=3.11,3.12` picks other
CPythons under plain pytest."""

import json
import os
import pathlib
import pwd
import shutil
import subprocess
import sys
import time

import pytest

from tests.packaging.wheels import built_wheel, pins, wheel_pythons
import tool_venv  # python/ (//python:tool_venv; tests/conftest.py under plain pytest)

# Several GB and minutes: Bazel runs it only as an explicit (manual) target, plain pytest only when
# asked with TXE_FRESH_VENV=1.
pytestmark = pytest.mark.skipif("TEST_SRCDIR" not in os.environ and os.environ.get("TXE_FRESH_VENV") != "1",
                                reason="installs the stack into a fresh venv: set TXE_FRESH_VENV=1 (or bazel test "
                                "//tests/packaging:fresh_venv_test)")

PYTHONS = (os.environ["TXE_FRESH_PYTHONS"].split(",") if os.environ.get("TXE_FRESH_PYTHONS")
           else [wheel_pythons()[-1], wheel_pythons()[0]])  # the newest first: its stack is the superset
SECTIONS = ["parity", "export", "call_jax", "graph_breaks"]
NEEDS_JAX = ("parity", "export", "call_jax")


def _env(**extra: str) -> dict[str, str]:
    # Nothing of this checkout or of the project venv may leak in.
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "RUNFILES_DIR", "PYTHONSAFEPATH", "VIRTUAL_ENV", "PYTHONHOME",
                        "TORCH_XLA_EXT_SKIP_VERSION_CHECK")}
    home = pwd.getpwuid(os.getuid()).pw_dir
    env.setdefault("HOME", home)
    env.setdefault("PIP_CACHE_DIR", os.path.join(home, ".cache", "pip"))  # reuse pip's cache
    env["PJRT_DEVICE"] = "CPU"
    env.update(extra)
    return env


def _log(msg: str) -> None:
    print(f"[fresh_venv_test] {msg}", file=sys.stderr, flush=True)


def _has_jax(python: str) -> bool:
    return tuple(map(int, python.split("."))) >= (3, 11)


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory) -> pathlib.Path:
    return tmp_path_factory.mktemp("wheelhouse")


@pytest.fixture(scope="module", params=PYTHONS)
def venv(request, wheelhouse, tmp_path_factory):
    python = request.param
    wheel = built_wheel(python)
    root = tmp_path_factory.mktemp(f"fresh{python}") / "venv"
    subprocess.run([tool_venv.find_python(python), "-m", "venv", str(root)], check=True, timeout=300)
    pip = [str(root / "bin" / "python"), "-m", "pip"]
    t0 = time.perf_counter()
    # pip resolves the stack from the registries (what it already has in the wheelhouse, it keeps) ...
    proc = subprocess.run(pip + ["download", "-q", "-d", str(wheelhouse), f"{wheel}[xla]"],
                          env=_env(), capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-4000:]
    t1 = time.perf_counter()
    # ... and installs what it resolved, offline; without byte-compiling the stack's ~7 GB up front
    # (minutes of CPU the second tier's tests run beside; Python compiles what it imports).
    proc = subprocess.run(pip + ["install", "-q", "--no-compile", "--no-index", "--find-links", str(wheelhouse),
                                 f"{wheel}[xla]"],
                          env=_env(), capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-4000:]
    _log(f"CPython {python}: pip download {wheel.name}[xla] (resolving the stack) {t1 - t0:.0f} s, "
         f"pip install from it {time.perf_counter() - t1:.0f} s")
    yield python, root
    shutil.rmtree(root, ignore_errors=True)  # several GB


def _run(venv: pathlib.Path, *cmd: str, cwd: pathlib.Path, timeout: int = 1200):
    return subprocess.run([str(venv / "bin" / cmd[0]), *cmd[1:]], cwd=cwd, env=_env(), capture_output=True,
                          text=True, timeout=timeout)


def test_pip_resolved_a_consistent_stack_without_matplotlib(venv, tmp_path):
    python, root = venv
    out = _run(root, "python", "-m", "pip", "check", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    code = ("import importlib.metadata as m, importlib.util as u, sys\n"
            "def v(n):\n    try:\n        return m.version(n)\n    except m.PackageNotFoundError:\n        return '-'\n"
            "print('%d.%d' % sys.version_info[:2], v('torch'), v('torch_xla'), v('jax'), v('jaxlib'), "
            "u.find_spec('matplotlib') is None)")
    out = _run(root, "python", "-c", code, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    got_python, torch_v, xla_v, jax_v, jaxlib_v, no_mpl = out.stdout.split()
    want = pins()
    jax_want = (want["jax"], want["jaxlib"]) if _has_jax(python) else ("-", "-")
    assert (got_python, torch_v.split("+")[0], xla_v, (jax_v, jaxlib_v), no_mpl) == (
        python, want["torch"], want["torch-xla"], jax_want, "True")


def test_doctor_exits_0_and_names_what_it_skipped(venv, tmp_path):
    python, root = venv
    t0 = time.perf_counter()
    out = _run(root, "torch-xla-ext", "doctor", "--out", "report", "--steps", "2", cwd=tmp_path)
    _log(f"CPython {python}: torch-xla-ext doctor: {time.perf_counter() - t0:.0f} s, exit {out.returncode}")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-6000:]
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    sections = report["sections"]
    assert list(sections) == SECTIONS
    if _has_jax(python):
        assert report["ok"] is True and all(s["ok"] for s in sections.values()), sections
    else:
        for name in NEEDS_JAX:  # refused by the gate, naming jax: a finding, not an error
            s = sections[name]
            assert s["status"] == "finding" and s["error_type"].endswith("UnsupportedStackError"), s
            assert "jax is not installed" in s["summary"], s["summary"]
        assert sections["graph_breaks"]["ok"] and "call_jax gate left out" in report["model"], report["model"]
        md = (tmp_path / "report" / "report.md").read_text()
        assert "pip install 'torch-xla-ext[jax]'" in md and "CPython 3.11+" in md
    # Every section that ran computed and wrote its numbers; only the pictures are missing.
    assert (tmp_path / "report" / "bundle" / "manifest.json").is_file() == _has_jax(python)
    assert not list((tmp_path / "report").glob("*.png"))
    skipped = report["plots_skipped"]
    expected = {"numerics_ulp.png", "parity_modules.png", "graph_breaks.png"} if _has_jax(python) else {
        "graph_breaks.png"}
    assert {p.split()[1] for p in skipped} == expected, skipped
    assert all("pip install 'torch-xla-ext[plot]'" in p for p in skipped)
    assert "pip install 'torch-xla-ext[plot]'" in out.stdout  # the summary says it too
    md = (tmp_path / "report" / "report.md").read_text()
    assert "graph_breaks.png skipped" in md
