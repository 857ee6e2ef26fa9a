"""The doctor's export section: ok with the figures on a zoo model; on a comparison beyond float32
tolerance, a SectionFailed that keeps the manifest, the bundle path and every figure.

Whether JAX's XLA and torch_xla's XLA round a given dot alike depends on the CPU (Eigen's blocking:
docs/export.md, "Bit-equality"), so neither case asserts a bit pattern. The ok case asserts the
summation-order bound of tests/export/bounds.py and reports bit-equality as a figure. The failing
case is a real difference between the two compilers that holds on every CPU: a child process whose
torch_xla client starts with XLA's defaults and whose JAX client then reads
``--xla_cpu_enable_fast_math=true`` (each build parses XLA_FLAGS once, when its client starts).
Under fast math LLVM may assume no infinities or NaNs, so ``x - x`` at an infinite ``x`` folds to
0 where IEEE arithmetic gives NaN: an output that differs beyond any tolerance."""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

from tests import zoo
from torch_xla_ext import doctor, export

CHILD_TIMEOUT_S = 600


class Cancel(torch.nn.Module):
    """x - x and x * 2: IEEE gives NaN at an infinite x in the first output; the second is plain."""

    def forward(self, x):
        return x - x, x * 2


def _child(out_dir: str) -> None:
    import torch_xla  # noqa: F401  (starts torch_xla's client before JAX's reads the flag)

    dev = torch_xla.device()
    (torch.ones(2, device=dev) * 2).cpu()
    os.environ["XLA_FLAGS"] = "--xla_cpu_enable_fast_math=true"
    x = torch.randn(256)
    x[3] = float("inf")
    try:
        doctor.export_section(Cancel(), (x,), {}, out_dir)
    except doctor.SectionFailed as f:
        print(json.dumps({"summary": f.summary, "markdown": f.markdown, "data": f.data}, default=str))
        return
    print(json.dumps({"summary": "no SectionFailed"}))


def test_zoo_model_is_ok_with_figures(tmp_path):
    model, args, kwargs = zoo.build("bert")
    summary, md, data = doctor.export_section(model, args, kwargs, str(tmp_path))
    rows = data["run_vs_torch_xla"]
    # two XLA builds: within float32 tolerance on every CPU; bit-equality is a figure of this one
    assert all(o["within_tolerance"] for o in data["outputs"]), summary
    differ = sum(r["mismatched"] for r in rows)
    assert summary.endswith("JAX run vs torch_xla: " + ("bit-equal" if differ == 0 else data["verdict"]))
    print(f"bit-equal elements: {sum(r['total'] for r in rows) - differ}/{sum(r['total'] for r in rows)}")
    assert data["bundle_dir"] == "bundle" and (tmp_path / "bundle" / "manifest.json").is_file()
    assert [u["name"] for u in export.Manifest.from_dict(data["manifest"]).user_inputs()] == [
        "input_ids", "attention_mask", "token_type_ids"]
    assert [r["total"] for r in rows] == [int(np.prod(t.shape)) for t in zoo_outputs(model, args, kwargs)]
    assert "output['last_hidden_state']" in md and "output['pooler_output']" in md


def zoo_outputs(model, args, kwargs):
    with torch.no_grad():
        out = model(*args, **kwargs)
    return [out[k] for k in out.keys()] if hasattr(out, "keys") else list(out)


def _child_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # each client's own defaults
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


def test_comparison_beyond_tolerance_keeps_manifest_and_figures():
    out_dir = tempfile.mkdtemp()
    proc = subprocess.run([sys.executable, __file__, out_dir], capture_output=True, text=True,
                          timeout=CHILD_TIMEOUT_S, env=_child_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    f = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "beyond float32 tolerance" in f["summary"], f["summary"]
    first, second = f["data"]["run_vs_torch_xla"]
    # output 0 holds the folded NaN: at least that element differs; its figures, not just "failed"
    assert first["mismatched"] >= 1 and f"{first['mismatched']}/{first['total']}" in f["markdown"]
    assert [o["within_tolerance"] for o in f["data"]["outputs"]] == [False, True]
    assert f["data"]["bundle_dir"] == "bundle" and os.path.isfile(os.path.join(out_dir, "bundle", "module.mlir"))
    m = export.Manifest.from_dict(f["data"]["manifest"])
    assert [(u["name"], u["used"]) for u in m.user_inputs()] == [("x", True)]
    assert "user_input" in f["markdown"]


if __name__ == "__main__":
    _child(sys.argv[1])
