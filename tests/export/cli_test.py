"""`torch-xla-ext export --model module:factory --out DIR` and `torch-xla-ext inspect DIR`."""

import json
import os
import subprocess
import sys

import numpy as np

from torch_xla_ext import export

HERE = os.path.dirname(os.path.abspath(__file__))


def _cli(*argv, cwd=HERE):
    env = dict(os.environ, PJRT_DEVICE="CPU", PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    return subprocess.run([sys.executable, "-m", "torch_xla_ext", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_export_then_inspect(tmp_path):
    out = tmp_path / "bundle"
    proc = _cli("export", "--model", "models:two_all_reduces", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["#", "kind", "shape", "dtype", "name/position/value"]
    assert any(line.split()[:4] == ["0", "collective_token", "scalar", "float32"] for line in lines)
    assert any(line.split()[:3] == ["0", "all_reduce", "sum"] and line.split()[-2:] == ["0.5", "0.5"] for line in lines)
    bundle = export.load(out)
    assert len(bundle.manifest.collectives) == 2

    proc = _cli("inspect", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines()[0] == f"{out}: format_version {export.FORMAT_VERSION}, 7 arguments of main, 3 user inputs"
    assert "unused user_input" in proc.stdout

    proc = _cli("inspect", str(out), "--json")
    assert json.loads(proc.stdout) == bundle.manifest.to_dict()


def test_export_options_and_errors(tmp_path):
    out = tmp_path / "plain"
    proc = _cli("export", "--model", "models:one_all_reduce_half", "--out", str(out), "--strip-tokens", "--inline-weights")
    assert proc.returncode == 0, proc.stderr[-2000:]
    bundle = export.load(out)
    assert [i.kind for i in bundle.manifest.inputs] == ["user_input"]
    assert bundle.manifest.transforms == ["strip_tokens", "inline_constants(weights=True)"]
    x = np.ones((2, 4), np.float32)
    assert export.run(out, x)[0].shape == (2, 3)

    proc = _cli("export", "--model", "models", "--out", str(tmp_path / "x"))
    assert proc.returncode == 2 and "--model: expected module:factory" in proc.stderr
    proc = _cli("export", "--model", "models:nope", "--out", str(tmp_path / "x"))
    assert proc.returncode == 2 and "has no callable 'nope'" in proc.stderr

    os.remove(out / "manifest.json")
    proc = _cli("inspect", str(out))
    assert proc.returncode == 2 and "manifest.json: missing" in proc.stderr
