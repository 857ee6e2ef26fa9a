"""`torch-xla-ext doctor` on a model whose compiled mode fails in torch_xla's stack: the failure is
a finding, the other mode's figures and every other section stay, and the command exits 0."""

import json
import os

from tests.doctor import doctor_cli

HERE = os.path.dirname(os.path.abspath(__file__))


def test_a_backend_failure_is_a_finding_and_the_doctor_exits_0(tmp_path):
    """torchvision's ConvNeXt (a small config of the architecture) fails under
    torch.compile(backend="openxla") in torch_xla 2.9 and runs lazily: the report keeps the lazy
    figures and every other section, names the failure, and the command exits 0."""
    proc = doctor_cli.run("--model", "user_models:small_convnext", "--out", str(tmp_path / "r"), "--steps", "1", cwd=HERE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "FND graph_breaks" in proc.stdout
    data = json.loads((tmp_path / "r" / "report.json").read_text())
    assert data["exit_code"] == 0 and data["ok"] is False
    sections = data["sections"]
    assert list(sections) == ["parity", "export", "graph_breaks"]
    gbs = sections["graph_breaks"]
    assert gbs["status"] == "finding" and "error" not in gbs
    lazy, dyn = gbs["modes"]["lazy"], gbs["modes"]["dynamo"]
    assert lazy["failure"] is None and lazy["steady"]["executions"] >= 1 and len(lazy["step_ms"]) == 1
    f = dyn["failure"]
    assert f["mode"] == "dynamo" and f["exception"].startswith("RuntimeError: Expected XLA tensor")
    assert f["node"]["target"].endswith("adaptive_avg_pool2d") and f["aten_op"] == "aten::adaptive_avg_pool2d"
    assert f["source"]["file"].endswith("torchvision/models/convnext.py") and "avgpool" in f["source"]["code"]
    assert f["raised_by"].startswith("torch_xla's C++ kernel") and f["known"]["workaround"]
    md = (tmp_path / "r" / "report.md").read_text()
    assert "| graph_breaks | finding |" in md and "Traceback" not in md
    assert "What to try" in md and "lazy mode ran the same forward pass" in md
