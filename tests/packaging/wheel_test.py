"""The wheel Bazel builds (the one `pip wheel .` hands out) installs into a new venv that sees the
pinned stack, and works from outside the source tree: import, extension, console script."""

import os
import pathlib
import site
import subprocess
import sys
import zipfile

import numpy as np
import pytest

WHEEL_DIR = pathlib.Path(os.environ["TEST_SRCDIR"]) / os.environ["TEST_WORKSPACE"] / "python" / "wheel"


@pytest.fixture(scope="module")
def wheel() -> pathlib.Path:
    wheels = sorted(WHEEL_DIR.glob("*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def venv(tmp_path_factory, wheel) -> pathlib.Path:
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True)
    # The new venv sees the pinned stack through a .pth (no second 7 GB install); a venv's
    # --system-site-packages would see the base interpreter's packages instead.
    (next((root / "lib").glob("python3.*")) / "site-packages" / "pinned_stack.pth").write_text(
        "\n".join(site.getsitepackages()) + "\n"
    )
    subprocess.run(
        [str(root / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index", "--no-deps", str(wheel)],
        check=True,
    )
    return root


def _env():
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RUNFILES_DIR", "PYTHONSAFEPATH")}
    env["PJRT_DEVICE"] = "CPU"
    return env


def test_wheel_contents(wheel):
    assert wheel.name.startswith("torch_xla_ext-0.1.0-cp3")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"torch_xla_ext/__init__.py", "torch_xla_ext/numerics.py", "torch_xla_ext/_ext.so"} <= names
    meta = zipfile.ZipFile(wheel).read("torch_xla_ext-0.1.0.dist-info/METADATA").decode()
    assert "Requires-Dist: torch==2.9.0" in meta and "Requires-Dist: torch-xla==2.9.0" in meta
    assert "Requires-Dist: jax==0.7.1" in meta
    ep = zipfile.ZipFile(wheel).read("torch_xla_ext-0.1.0.dist-info/entry_points.txt").decode()
    assert "torch-xla-ext = torch_xla_ext.cli:main" in ep


def test_imports_from_the_venv_not_the_tree(venv, tmp_path):
    code = "import torch_xla_ext, torch_xla_ext.numerics as n; print(torch_xla_ext.__file__); print(n._core.__file__)"
    out = subprocess.run([str(venv / "bin" / "python"), "-c", code], cwd=tmp_path, env=_env(),
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    pkg, ext = out.stdout.split()
    assert pathlib.Path(pkg).resolve().is_relative_to(venv.resolve())
    assert pathlib.Path(ext).resolve().is_relative_to(venv.resolve())


def test_console_script_compares_files(venv, tmp_path):
    np.save(tmp_path / "a.npy", np.float32([1, 2, 3]))
    np.save(tmp_path / "b.npy", np.float32([1, 2, 3.5]))
    out = subprocess.run([str(venv / "bin" / "torch-xla-ext"), "numerics", "--actual", "a.npy", "--expected", "b.npy"],
                         cwd=tmp_path, env=_env(), capture_output=True, text=True)
    assert out.returncode == 1, out.stderr  # a mismatch is a failed check
    assert "Mismatched elements: 1 / 3 (33.3%)" in out.stdout


def test_console_script_runs_embedded_example(venv, tmp_path):
    out = subprocess.run([str(venv / "bin" / "torch-xla-ext"), "numerics"], cwd=tmp_path, env=_env(),
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "XLA vs CPU, bf16 linear" in out.stdout and "Mismatched elements:" in out.stdout


def test_doctor_runs_from_the_installed_wheel(venv, tmp_path):
    out = subprocess.run([str(venv / "bin" / "torch-xla-ext"), "doctor", "--out", "report", "--steps", "2"],
                         cwd=tmp_path, env=_env(), capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "torch-xla-ext doctor: embedded example" in out.stdout
    for f in ("report.md", "report.json", "graph_breaks.png", "numerics_ulp.png", "bundle/manifest.json"):
        assert (tmp_path / "report" / f).is_file(), f
    assert "[4/4] graph_breaks" in out.stderr  # progress went to stderr
