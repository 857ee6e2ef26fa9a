"""The gate on real stacks that differ from the pins (README, "Compatibility"):

* torch 2.9.1, a patch release, beside torch_xla 2.9.0 (which pins no torch: pip installs it
  with --no-deps here, as a user upgrading torch would get it);
* torch_xla 2.9.0 repacked under the local version 2.9.0+gitlocal1, as a fork's build is versioned
  (`wheel unpack`, the dist-info and torch_xla/version.py renamed, `wheel pack`).

Each is an overlay venv: its own site-packages (the changed distribution and this wheel) first,
the project venv's after (a .pth file), so only what differs is installed. There torch_xla must
load, every feature must be accepted (not tested: the versions differ) with the differing
distribution named, and `torch-xla-ext doctor` must run every section. The upstream wheels are
downloaded once into ~/.cache/torch_xla_ext/wheels (torch is 900 MB), so Bazel runs this only when
asked: `bazel test //tests/packaging:stack_variants_test` (about 6 minutes warm).
"""

import json
import os
import pathlib
import pwd
import shutil
import site
import subprocess
import sys

import pytest

from tests.packaging.wheels import built_wheel, pins

pytestmark = pytest.mark.skipif("TEST_SRCDIR" not in os.environ and os.environ.get("TXE_STACK_VARIANTS") != "1",
                                reason="downloads torch 2.9.1: set TXE_STACK_VARIANTS=1 (or bazel test "
                                "//tests/packaging:stack_variants_test)")

PINS = pins()
PATCH = "2.9.1"  # a torch patch release of the pinned torch's series
LOCAL = "+gitlocal1"
CACHE = pathlib.Path(pwd.getpwuid(os.getuid()).pw_dir) / ".cache" / "torch_xla_ext" / "wheels"
PLATFORM = "manylinux_2_28_x86_64"
TAG = "cp%d%d" % sys.version_info[:2]

REPORT = r"""
import json
from torch_xla_ext import _versions
print(json.dumps({"summary": _versions.summary(),
                  "status": {f: _versions.status(f) for f in _versions.FEATURES}}))
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "RUNFILES_DIR", "PYTHONSAFEPATH", "VIRTUAL_ENV", "PYTHONHOME",
                        "TORCH_XLA_EXT_SKIP_VERSION_CHECK")}
    env["PJRT_DEVICE"] = "CPU"
    return env


def _upstream(name: str, version: str) -> pathlib.Path:
    """The upstream wheel of ``name==version`` for this CPython, downloaded once."""
    CACHE.mkdir(parents=True, exist_ok=True)
    found = sorted(CACHE.glob(f"{name.replace('-', '_')}-{version}-{TAG}-{TAG}-{PLATFORM}.whl"))
    if not found:
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"{name}=={version}",
                               "--only-binary", ":all:", "--platform", PLATFORM, "--python-version",
                               "%d.%d" % sys.version_info[:2], "-d", str(CACHE)],
                              capture_output=True, text=True, timeout=1800)
        assert proc.returncode == 0, proc.stderr[-3000:]
        found = sorted(CACHE.glob(f"{name.replace('-', '_')}-{version}-{TAG}-{TAG}-{PLATFORM}.whl"))
    assert len(found) == 1, found
    return found[0]


def _local_build(tmp: pathlib.Path) -> pathlib.Path:
    """torch_xla's pinned wheel under the local version <pin>+gitlocal1, as a fork versions its build."""
    pin = PINS["torch-xla"]
    wheel = _upstream("torch-xla", pin)
    unpack = tmp / "unpacked"
    subprocess.run([sys.executable, "-m", "wheel", "unpack", "-d", str(unpack), str(wheel)], check=True,
                   capture_output=True, timeout=600)
    root = unpack / f"torch_xla-{pin}"
    info = root / f"torch_xla-{pin}{LOCAL}.dist-info"
    (root / f"torch_xla-{pin}.dist-info").rename(info)
    meta = (info / "METADATA").read_text()
    assert f"\nVersion: {pin}\n" in meta
    (info / "METADATA").write_text(meta.replace(f"\nVersion: {pin}\n", f"\nVersion: {pin}{LOCAL}\n"))
    version_py = root / "torch_xla" / "version.py"
    text = version_py.read_text()
    assert f"__version__ = '{pin}'" in text
    version_py.write_text(text.replace(f"__version__ = '{pin}'", f"__version__ = '{pin}{LOCAL}'"))
    subprocess.run([sys.executable, "-m", "wheel", "pack", "-d", str(tmp), str(root)], check=True,
                   capture_output=True, timeout=600)
    (repacked,) = tmp.glob(f"torch_xla-{pin}{LOCAL}-*.whl")
    return repacked


def _overlay(tmp: pathlib.Path, *wheels: pathlib.Path) -> pathlib.Path:
    venv = tmp / "venv"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", str(venv)], check=True,
                   timeout=300)
    (next((venv / "lib").glob("python3.*")) / "site-packages" / "pinned_stack.pth").write_text(
        "\n".join(site.getsitepackages()) + "\n")
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    *map(str, wheels)], check=True, capture_output=True, timeout=1200)
    return venv


TORCH_XLA_FEATURES = {"export.export", "collectives", "jax_call", "parity", "graph_breaks.openxla", "trace.lazy", "doctor.torch_xla"}
TORCH_FEATURES = TORCH_XLA_FEATURES | {"graph_breaks", "trace", "doctor", "doctor.torchax", "export.torchax"}


def _check(venv: pathlib.Path, tmp: pathlib.Path, differs: str, accepted: set[str]) -> None:
    """Every feature of ``accepted`` accepted naming ``differs`` ("torch 2.9.1"), the others tested;
    the doctor runs every section."""
    out = subprocess.run([str(venv / "bin" / "python"), "-c", REPORT], cwd=tmp, env=_env(), capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert differs in report["summary"], report["summary"]
    verdicts = {feature: verdict for feature, (verdict, _) in report["status"].items()}
    assert verdicts == {f: "accepted" if f in accepted else "tested" for f in verdicts}, report["status"]
    for feature in accepted:
        assert f"{differs} (tested" in report["status"][feature][1], report["status"][feature]
    doctor = subprocess.run([str(venv / "bin" / "torch-xla-ext"), "doctor", "--out", "report", "--steps", "2"],
                            cwd=tmp, env=_env(), capture_output=True, text=True, timeout=1500)
    assert doctor.returncode == 0, doctor.stdout[-3000:] + doctor.stderr[-3000:]
    sections = json.loads((tmp / "report" / "report.json").read_text())["sections"]
    assert {name: s["status"] for name, s in sections.items()} == {
        "parity": "ok", "export": "ok", "call_jax": "ok", "graph_breaks": "ok"}, sections


def test_a_torch_patch_release_beside_the_pinned_torch_xla(tmp_path):
    venv = _overlay(tmp_path, _upstream("torch", PATCH), built_wheel())
    _check(venv, tmp_path, f"torch {PATCH}", TORCH_FEATURES)


def test_torch_xla_under_a_local_version(tmp_path):
    venv = _overlay(tmp_path, _local_build(tmp_path), built_wheel())
    _check(venv, tmp_path, f"torch_xla {PINS['torch-xla']}{LOCAL}", TORCH_XLA_FEATURES)
    shutil.rmtree(tmp_path / "unpacked", ignore_errors=True)
