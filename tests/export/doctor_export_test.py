"""The doctor's export section: ok with the figures on a zoo model; on a comparison beyond float32
tolerance, a SectionFailed that keeps the manifest, the bundle path and every figure.

The failing case is real arithmetic, not an injected fault: a 384-long dot minus its exact
(float64) value leaves only rounding, and JAX's XLA and torch_xla's XLA round a dot of that
length differently (measured on this project's CPU: docs/export.md, "Bit-equality")."""


import numpy as np
import pytest
import torch

from tests import zoo
from torch_xla_ext import doctor, export


class Residual(torch.nn.Module):
    """lin(x) - c, with c the exact product: the output is the dot's rounding error alone."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(384, 256, bias=False)

    def forward(self, x, c):
        return self.lin(x) - c


def test_zoo_model_is_ok_with_figures(tmp_path):
    model, args, kwargs = zoo.build("bert")
    summary, md, data = doctor.export_section(model, args, kwargs, str(tmp_path))
    assert "JAX run vs torch_xla: bit-equal" in summary
    assert data["bundle_dir"] == "bundle" and (tmp_path / "bundle" / "manifest.json").is_file()
    assert [u["name"] for u in export.Manifest.from_dict(data["manifest"]).user_inputs()] == [
        "input_ids", "attention_mask", "token_type_ids"]
    assert [r["mismatched"] for r in data["run_vs_torch_xla"]] == [0, 0]
    assert "output['last_hidden_state']" in md and "output['pooler_output']" in md


def test_comparison_beyond_tolerance_keeps_manifest_and_figures(tmp_path):
    torch.manual_seed(0)
    model = Residual()
    x = torch.randn(16, 384) * 100
    exact = x.double().numpy() @ model.lin.weight.detach().double().numpy().T
    c = torch.from_numpy(exact.astype(np.float32))
    with pytest.raises(doctor.SectionFailed) as e:
        doctor.export_section(model, (x, c), {}, str(tmp_path))
    f = e.value
    assert "beyond float32 tolerance" in f.summary
    (row,) = f.data["run_vs_torch_xla"]
    assert row["mismatched"] > 0 and row["max_ulp"] > 0  # the figures, not just "failed"
    assert f.data["bundle_dir"] == "bundle" and (tmp_path / "bundle" / "module.mlir").is_file()
    m = export.Manifest.from_dict(f.data["manifest"])
    assert [(u["name"], u["used"]) for u in m.user_inputs()] == [("x", True), ("c", True)]
    assert "user_input" in f.markdown and f"{row['mismatched']}/{row['total']}" in f.markdown
