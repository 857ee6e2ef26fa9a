"""Cross-process capture: one process runs a model on XLA and saves every module's inputs and
outputs and the program it ran to safetensors; another, which never imports torch_xla, compares
that file with CPU runs of the reference, replays the program, and finds the module perturbed on
the XLA side. Bad files raise typed errors."""

import json
import os
import subprocess
import sys

import pytest
import torch


from tests.parity.capture_worker import PLANTED
from torch_xla_ext import parity  # noqa: E402

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "capture_worker.py")


def _run(*argv):
    env = dict(os.environ, PJRT_DEVICE="CPU", PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    done = subprocess.run([sys.executable, WORKER, *argv], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    d = tmp_path_factory.mktemp("capture")
    path = str(d / "llama_xla.safetensors")
    _run("capture", path)
    out = str(d / "report.json")
    _run("compare", path, out)
    with open(out) as f:
        return path, json.load(f)


def test_compare_in_another_process_finds_the_planted_module(captured):
    _, r = captured
    assert r["torch_xla_imported"] is False  # the comparing process never needed XLA
    assert r["first_divergent_module"] == PLANTED
    assert r["verdict"] == "FAIL"
    # The capture's program replayed without torch_xla: XLA ran it faithfully (within the bound),
    # and it is not the reference's math (its down_proj weight is not the reference's).
    assert r["reproduced"] is True and r["hlo_math"] == "differs"
    assert r["rules"] == "xla-cpu" and r["outputs"][0]["cause"] == "real difference"
    mods = {m["path"]: m for m in r["modules"] if m["call"] == 0}
    planted = mods[PLANTED]
    assert planted["diverges"] and planted["own_to_rounding"] > planted["threshold"]
    assert not mods["model.layers.0.mlp.down_proj"]["diverges"]


def test_capture_file_is_safetensors_with_every_module(captured):
    from safetensors import safe_open

    path, _ = captured
    with safe_open(path, framework="pt") as f:
        meta = f.metadata()
        keys = list(f.keys())
    calls = json.loads(meta["calls"])
    assert meta["format"] == "torch_xla_ext.parity.capture/2" and meta["dtype"] == "bfloat16"
    assert meta["device_type"] == "CPU" and json.loads(meta["program"])["format"] == "hlo_proto"
    assert "program/hlo" in keys and f"program/args/{json.loads(meta['program'])['arguments'] - 1}" in keys
    assert any(c["path"] == PLANTED for c in calls)
    assert any(k.startswith("outputs.logits") for k in keys)
    cap = parity.load_capture(path)
    assert [c.path for c in cap.calls] == [c["path"] for c in calls]
    (planted,) = [c for c in cap.calls if c.path == PLANTED]
    assert planted.outputs["" ].dtype == torch.bfloat16


def test_bad_capture_files_raise_typed_errors(tmp_path, captured):
    path, _ = captured
    with pytest.raises(parity.CaptureNotFoundError, match="no such capture file"):
        parity.load_capture(str(tmp_path / "missing.safetensors"))
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}garbage")
    with pytest.raises(parity.CaptureError, match="junk.safetensors"):
        parity.load_capture(str(junk))
    from safetensors.torch import save_file

    other = tmp_path / "other.safetensors"
    save_file({"x": torch.ones(2)}, str(other), metadata={"format": "something else"})
    with pytest.raises(parity.CaptureError, match="'format'"):
        parity.load_capture(str(other))
    listed = tmp_path / "listed.safetensors"
    save_file({"x": torch.ones(2)}, str(listed), metadata={
        "format": "torch_xla_ext.parity.capture/1", "calls": json.dumps([{"path": "a", "call": 0, "depth": 1,
                                                                         "inputs": ["[0][0]"], "outputs": [""]}]),
        "outputs": "[]"})
    with pytest.raises(parity.CaptureError, match=r"entry '0/in\[0\]\[0\]'"):
        parity.load_capture(str(listed))
    nested = tmp_path / "nested.safetensors"
    save_file({"x": torch.ones(2)}, str(nested), metadata={
        "format": "torch_xla_ext.parity.capture/1", "calls": json.dumps([{"path": "a", "call": 0, "depth": 1,
                                                                         "inputs": [], "outputs": [[""]]}]),
        "outputs": "[]"})
    with pytest.raises(parity.CaptureError, match=r"nested.safetensors: metadata: field 'calls\[0\].outputs\[0\]' "
                                                  r"must be str, got list"):
        parity.load_capture(str(nested))
