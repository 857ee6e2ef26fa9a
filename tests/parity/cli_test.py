"""`torch-xla-ext parity`: the embedded #8747 example, --model factories, and argument errors."""

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from torch_xla_ext.cli import main  # noqa: E402


def test_embedded_example_bf16_explains_rounding(capsys, tmp_path):
    out_json = tmp_path / "r.json"
    assert main(["parity", "--json", str(out_json)]) == 0
    out = capsys.readouterr()
    assert "pytorch/xla#8747" in out.err
    assert out.out.startswith("Parity verdict: FAIL (bfloat16)")
    assert "rounding placement" in out.out and "7680/7680" in out.out
    d = json.loads(out_json.read_text())
    assert d["emulation"] == "matches" and d["first_divergent_layer"] is None and len(d["layers"]) == 4


def test_embedded_example_fp32_passes(capsys):
    assert main(["parity", "--dtype", "fp32"]) == 0
    assert capsys.readouterr().out.startswith("Parity verdict: PASS (float32)")


def test_model_factory_verify(capsys):
    assert main(["parity", "--model", "factories:linear", "--dtype", "fp32"]) == 0
    assert "PASS" in capsys.readouterr().out


def test_model_factory_layers_exit_1_and_name_the_layer(capsys):
    assert main(["parity", "--model", "factories:offset_stack", "--dtype", "fp32"]) == 1
    out = capsys.readouterr().out
    assert "first layer to diverge from CPU eager is layer 0" in out


@pytest.mark.parametrize("spec, message", [
    ("factories", "module:factory"),
    ("no_such_module_xyz:f", "cannot import"),
    ("factories:missing", "no callable 'missing'"),
    ("factories:not_a_model", "must return"),
])
def test_bad_model_is_an_error_naming_the_flag(spec, message, capsys):
    assert main(["parity", "--model", spec]) == 2
    err = capsys.readouterr().err
    assert "--model" in err and message in err
