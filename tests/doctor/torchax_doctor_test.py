"""`torch-xla-ext doctor --frontend torchax`: parity, export and compiles on the embedded block and on
a user's factory, in one report; each section's figure held against an oracle the doctor does not
make (CPU eager, torchax's own run, JAX's compile log)."""

import json
import os
import re
import subprocess
import sys

import pytest

import torch_xla_ext

from tests.doctor import doctor_cli

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(torch_xla_ext.__file__)))


def _env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join(p for p in (PKG_PARENT, HERE, os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, PYTHONPATH=path, **extra)


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    out = tmp_path_factory.mktemp("doctor_torchax")
    proc = doctor_cli.run("--frontend", "torchax", "--out", str(out), "--steps", "3", cwd=str(out), timeout=1200)
    return out, proc


def test_the_torchax_plan_runs_parity_export_and_compiles(embedded):
    out, proc = embedded
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "under torchax" in proc.stdout and "call_jax gate" not in proc.stdout.splitlines()[0]
    data = json.loads((out / "report.json").read_text())
    assert list(data["sections"]) == ["parity", "export", "compiles"], list(data["sections"])
    statuses = {name: s["status"] for name, s in data["sections"].items()}
    assert set(statuses.values()) == {"ok"}, {n: s["summary"] for n, s in data["sections"].items()}
    md = (out / "report.md").read_text()
    for name in ("parity", "export", "compiles"):
        assert f"## {name}" in md


def test_export_matches_torchax_own_run_and_eager(embedded):
    """The bundle's JAX run against torchax.compile's run of the same block (both JAX's XLA): within
    float32 tolerance, the ULP figure reported; against CPU eager within tolerance too."""
    out, _ = embedded
    ex = json.loads((out / "report.json").read_text())["sections"]["export"]
    assert ex["reference"] == "torchax" and ex["manifest"]["frontend"] == "torchax"
    assert ex["outputs"] and all(o["within_tolerance"] for o in ex["outputs"])
    assert all(r["max_ulp"] is not None for r in ex["run_vs_torchax"])


def test_compiles_agree_with_jax_compile_log(embedded, tmp_path):
    """The doctor's count of JAX compiles equals JAX's own log (``jax_log_compiles``) for the same
    program run untraced beside it: the compiled forward compiles once over the calls."""
    out, _ = embedded
    sec = json.loads((out / "report.json").read_text())["sections"]["compiles"]
    proc = subprocess.run([sys.executable, "-m", "torch_xla_ext.doctor.torchax_steps", "torch_xla_ext.doctor:example",
                           "3"], cwd=str(tmp_path), env=_env(JAX_LOG_COMPILES="1"), capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # JAX's own handler: "WARNING:<time>:<logger>:<line>: message" (jax 0.7) or the bare message (0.12);
    # a root handler (torch_xla's basicConfig) may repeat it as "WARNING:<logger>:message", not counted
    logged = re.findall(r"^(?:WARNING:.*?:\d+: )?Finished XLA compilation of (\S+)", proc.stderr, re.M)
    assert logged, proc.stderr[-2000:]
    assert sec["compiles"] + sec["op_by_op_compiles"] == len(logged), (sec, logged)
    (fn,) = sec["functions"]
    assert fn["calls"] == 3 and fn["compiles"] == 1, fn
    assert (out / "trace" / "report.html").is_file()


def test_torchax_missing_is_refused_with_the_install_line(tmp_path):
    code = ("import sys\n"
            "class Refuse:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'torchax' or name.startswith('torchax.'):\n"
            "            raise ModuleNotFoundError(\"No module named 'torchax'\", name='torchax')\n"
            "sys.meta_path.insert(0, Refuse())\n"
            "from torch_xla_ext import doctor, _versions\n"
            "try:\n"
            "    doctor.run('r', frontend='torchax')\n"
            "except _versions.UnsupportedStackError as e:\n"
            "    print('REFUSED', e)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=str(tmp_path), env=_env(), capture_output=True,
                          text=True, timeout=600)
    assert "REFUSED" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "pip install 'torch-xla-ext[torchax]'" in proc.stdout
    assert not (tmp_path / "r").exists()  # refused before anything ran
