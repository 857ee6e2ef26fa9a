"""`torch-xla-ext doctor --model tests.zoo:llama` from the command line, as a user runs it on a
real model: int64 token ids and an attention_mask by keyword, a ModelOutput, GQA. Every section
must be ok, and what the report says about the model is checked against the model itself (its
keyword names, its output's fields, torch.export's parameters) rather than against recorded text."""

import json
import os
import subprocess
import sys

import torch

from tests import zoo
from torch_xla_ext import doctor

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_llama_through_the_cli(tmp_path):
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(doctor.__file__)))
    env = dict(os.environ, PJRT_DEVICE="CPU",
               PYTHONPATH=os.pathsep.join(p for p in (pkg_parent, ROOT, os.environ.get("PYTHONPATH")) if p))
    out = tmp_path / "r"
    proc = subprocess.run([sys.executable, "-m", "torch_xla_ext", "doctor", "--model", "tests.zoo:llama",
                           "--out", str(out), "--steps", "2"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=1200)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    data = json.loads((out / "report.json").read_text())
    assert data["ok"] and list(data["sections"]) == ["parity", "export", "graph_breaks"]

    model, args, kwargs = zoo.build("llama")
    with torch.no_grad():
        output = model(*args, **kwargs)
    fields = [k for k, v in output.items() if isinstance(v, torch.Tensor)]

    export = data["sections"]["export"]
    users = [i for i in export["manifest"]["inputs"] if i["kind"] == "user_input"]
    assert [i["name"] for i in users] == ["input_ids"] + list(kwargs)
    assert all(i["dtype"] == "int64" for i in users)  # token ids and mask, never narrowed
    params = {n for n, _ in model.named_parameters()}
    assert {i["name"] for i in export["manifest"]["inputs"] if i["kind"] == "parameter"} == params
    # JAX's XLA vs torch_xla's: within float32 tolerance; "bit-equal" or "max N ulp" is a figure
    assert export["outputs"] and all(o["within_tolerance"] for o in export["outputs"])
    assert export["verdict"] == "bit-equal" or "ulp" in export["verdict"]
    assert os.path.isdir(out / export["bundle_dir"])

    bf16 = data["sections"]["parity"]["bf16"]
    assert [o["path"] for o in bf16["outputs"]] == [f".{k}" for k in fields]
    # the rounded replay ran (bit-equality with XLA is a figure: tests/parity/zoo_checks.py)
    assert bf16["emulation"] in ("matches", "differs") and bf16["verdict"] in ("PASS", "FAIL")
    assert bf16["explanation"].startswith(bf16["verdict"] + ":")

    dynamo = data["sections"]["graph_breaks"]["modes"]["dynamo"]["report"]
    assert dynamo["fx_breaks"] == [] and dynamo["fx_graphs"] == 1  # a forward pass without breaks
    assert (out / "graph_breaks.html").exists() and "graph_breaks.html" in (out / "report.md").read_text()
