"""The wheel installed as a training image gets it: `pip install torch_xla_ext-*.whl` into a fresh
venv, pip resolving the pinned stack (torch, torch_xla, jax) and the ranges (numpy, ml-dtypes,
scipy) itself from the configured registries, without the [plot] extra. Then `torch-xla-ext doctor`
must compute and write every section, exit 0, and say which plots it skipped and how to get them.

Costs several GB and a few minutes (pip's cache makes reruns cheaper), so Bazel runs it only when
asked (`bazel test //tests/packaging:fresh_venv_test`, as .ci/run does)."""

import json
import os
import pathlib
import pwd
import subprocess
import sys
import time

import pytest

from tests.packaging.wheels import built_wheel, pins

# Several GB and minutes: Bazel runs it only as an explicit (manual) target, plain pytest only when
# asked with TXE_FRESH_VENV=1.
pytestmark = pytest.mark.skipif("TEST_SRCDIR" not in os.environ and os.environ.get("TXE_FRESH_VENV") != "1",
                                reason="installs the stack into a fresh venv: set TXE_FRESH_VENV=1 (or bazel test "
                                "//tests/packaging:fresh_venv_test)")


def _env(**extra: str) -> dict[str, str]:
    # Nothing of this checkout or of the project venv may leak in.
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "RUNFILES_DIR", "PYTHONSAFEPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    home = pwd.getpwuid(os.getuid()).pw_dir
    env.setdefault("HOME", home)
    env.setdefault("PIP_CACHE_DIR", os.path.join(home, ".cache", "pip"))  # reuse pip's cache
    env["PJRT_DEVICE"] = "CPU"
    env.update(extra)
    return env


def _log(msg: str) -> None:
    print(f"[fresh_venv_test] {msg}", file=sys.stderr, flush=True)


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> pathlib.Path:
    wheel = built_wheel()
    root = tmp_path_factory.mktemp("fresh") / "venv"
    base = getattr(sys, "_base_executable", sys.executable)  # not the project venv's python
    subprocess.run([base, "-m", "venv", str(root)], check=True, timeout=300)
    t0 = time.perf_counter()
    proc = subprocess.run([str(root / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)],
                          env=_env(), capture_output=True, text=True, timeout=1800)
    _log(f"pip install {wheel.name} (resolving the stack): {time.perf_counter() - t0:.0f} s")
    assert proc.returncode == 0, proc.stderr[-4000:]
    return root


def _run(venv: pathlib.Path, *cmd: str, cwd: pathlib.Path, timeout: int = 1200):
    return subprocess.run([str(venv / "bin" / cmd[0]), *cmd[1:]], cwd=cwd, env=_env(), capture_output=True,
                          text=True, timeout=timeout)


def test_pip_resolved_a_consistent_stack_without_matplotlib(venv, tmp_path):
    out = _run(venv, "python", "-m", "pip", "check", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    code = ("import importlib.metadata as m, importlib.util as u\n"
            "print(m.version('torch'), m.version('torch_xla'), m.version('jax'), u.find_spec('matplotlib') is None)")
    out = _run(venv, "python", "-c", code, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    torch_v, xla_v, jax_v, no_mpl = out.stdout.split()
    want = pins()
    assert (torch_v.split("+")[0], xla_v, jax_v, no_mpl) == (want["torch"], want["torch-xla"], want["jax"], "True")


def test_doctor_exits_0_and_names_the_skipped_plots(venv, tmp_path):
    t0 = time.perf_counter()
    out = _run(venv, "torch-xla-ext", "doctor", "--out", "report", "--steps", "2", cwd=tmp_path)
    _log(f"torch-xla-ext doctor: {time.perf_counter() - t0:.0f} s, exit {out.returncode}")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-6000:]
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["ok"] is True
    assert list(report["sections"]) == ["parity", "export", "call_jax", "graph_breaks"]
    assert all(s["ok"] for s in report["sections"].values())
    # Every section computed and wrote its numbers; only the pictures are missing.
    assert (tmp_path / "report" / "bundle" / "manifest.json").is_file()
    assert not list((tmp_path / "report").glob("*.png"))
    skipped = report["plots_skipped"]
    expected = {"numerics_ulp.png", "parity_modules.png", "graph_breaks.png"}
    assert {p.split()[1] for p in skipped} == expected, skipped
    assert all("pip install 'torch-xla-ext[plot]'" in p for p in skipped)
    assert "pip install 'torch-xla-ext[plot]'" in out.stdout  # the summary says it too
    md = (tmp_path / "report" / "report.md").read_text()
    assert "numerics_ulp.png skipped" in md and "graph_breaks.png skipped" in md
