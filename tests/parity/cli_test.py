"""`torch-xla-ext parity`: the embedded #8747 example, --model factories (the one factory
contract, keyword inputs), --scan-layers, --reference with --localize and --plot, a capture saved
and compared, and argument errors naming the flag."""

import json
import os

import pytest

from torch_xla_ext.cli import main


def test_embedded_example_bf16_explains_rounding(capsys, tmp_path):
    out_json = tmp_path / "r.json"
    assert main(["parity", "--json", str(out_json)]) == 0
    out = capsys.readouterr()
    assert "pytorch/xla#8747" in out.err
    assert out.out.startswith("Parity verdict: FAIL (bfloat16)")
    assert "Rounding placement explains" in out.out and "within what evaluation order can change" in out.out
    d = json.loads(out_json.read_text())
    assert d["reproduced"] is True and d["first_divergent_layer"] is None and len(d["layers"]) == 4


def test_model_factory_with_keyword_inputs(capsys):
    assert main(["parity", "--model", "tests.parity.factories:keyword", "--dtype", "fp32"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Parity verdict: PASS (float32)") and "output ['y']" in out


def test_scan_layers_form_exits_1_and_names_the_layer(capsys):
    assert main(["parity", "--model", "tests.parity.factories:offset_stack", "--scan-layers", "--dtype", "fp32"]) == 1
    out = capsys.readouterr().out
    assert "FAIL: layer 0 of 3 is the first divergent layer" in out


def test_reference_localize_and_plot(capsys, tmp_path):
    plot = tmp_path / "modules.png"
    code = main(["parity", "--model", "tests.parity.factories:mlp_perturbed", "--reference", "tests.parity.factories:mlp", "--localize",
                 "--plot", str(plot), "--dtype", "fp32"])
    assert code == 1
    out = capsys.readouterr().out
    assert "the first divergent module is 2" in out and "<- first divergent" in out
    assert plot.read_bytes()[:4] == b"\x89PNG"


def test_capture_then_compare(capsys, tmp_path):
    path = tmp_path / "run.safetensors"
    assert main(["parity", "--model", "tests.parity.factories:mlp_perturbed", "--capture", str(path)]) == 0
    assert path.exists()
    assert main(["parity", "--model", "tests.parity.factories:mlp_perturbed", "--reference", "tests.parity.factories:mlp",
                 "--compare-capture", str(path)]) == 1
    out = capsys.readouterr().out
    assert "first divergent module is 2" in out and "a real difference" in out  # the capture's program replayed


@pytest.mark.parametrize("argv, message", [
    (["--model", "tests.parity.factories"], "module:factory"),
    (["--model", "no_such_module_xyz:f"], "cannot import"),
    (["--model", "tests.parity.factories:missing"], "no callable 'missing'"),
    (["--model", "tests.parity.factories:not_a_model"], "must return"),
    (["--model", "tests.parity.factories:linear", "--scan-layers"], "nn.ModuleList"),
    (["--scan-layers"], "needs --model"),
    (["--model", "tests.parity.factories:linear", "--plot", "x.png"], "--plot: needs a per-module localisation"),
    (["--model", "tests.parity.factories:linear", "--compare-capture", "/no/such/file"], "no such capture file"),
    (["--model", "tests.parity.factories:linear", "--rules", "tpu-lowest"], "rules: expected one of xla-cpu, tpu-default"),
])
def test_bad_arguments_are_errors_naming_the_flag(argv, message, capsys):
    assert main(["parity", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err


def test_explorer_prints_the_command_that_opens_it_and_markdown_html(capsys, tmp_path):
    d = tmp_path / "explorer dir"
    md, page = tmp_path / "r.md", tmp_path / "r.html"
    main(["parity", "--model", "tests.parity.factories:mlp", "--explorer", str(d), "--markdown", str(md), "--html", str(page)])
    out = capsys.readouterr().out
    (cmd,) = [line for line in out.splitlines() if line.startswith("model-explorer ")]
    import shlex

    argv = shlex.split(cmd)  # the directory has a space: the command must quote it
    assert argv[1] == str(d / "program.mlir") and argv[2] == f"--node_data_paths={d / 'node_data.json'}"
    assert os.path.isfile(argv[1]) and os.path.isfile(d / "node_data.json")
    report = json.loads((d / "node_data.json").read_text())
    assert report["main"]["results"]
    text = md.read_text()
    assert text.startswith("# Parity: ") and "\n## Outputs\n" in text
    assert "<h2>Outputs</h2>" in page.read_text()
