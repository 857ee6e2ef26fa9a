"""`torch-xla-ext doctor` on the embedded example and on a --model factory: the report directory,
its sections and the facts each component establishes about the model."""

import io
import json
import math
import os

import PIL.Image
import pytest

from torch_xla_ext import doctor

from tests.doctor import doctor_cli

HERE = os.path.dirname(os.path.abspath(__file__))


def _png_facts(data: bytes) -> tuple[int, int, int]:
    """(width, height, distinct colours) of a PNG, decoded by Pillow with every chunk's CRC checked
    (`verify`): a picture that was drawn, not just a file that starts like one."""
    with PIL.Image.open(io.BytesIO(data)) as img:
        assert img.format == "PNG", img.format
        img.verify()
    with PIL.Image.open(io.BytesIO(data)) as img:
        rgba = img.convert("RGBA")
        return rgba.width, rgba.height, len(rgba.getcolors(maxcolors=rgba.width * rgba.height))


def test_json_safe_keeps_strings_and_makes_non_finite_values_strict_json():
    data = {"msg": "NaN and Infinity stay text", "v": [math.nan, math.inf, -math.inf, 1.5], (1, 2): ("a", None)}
    safe = doctor.json_safe(data)
    assert safe == {"msg": "NaN and Infinity stay text", "v": ["nan", "inf", "-inf", 1.5], "(1, 2)": ["a", None]}
    assert json.loads(json.dumps(safe, allow_nan=False)) == safe


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    out = tmp_path_factory.mktemp("doctor")
    lines = []
    report = doctor.run(str(out), steps=3, progress=lines.append)
    return out, report, lines


def test_report_directory(embedded):
    out, report, lines = embedded
    for f in ("report.md", "report.json", "numerics_ulp.png", "graph_breaks.png", "bundle/manifest.json",
              "bundle/module.mlir", "bundle/module.mlirbc"):
        assert (out / f).is_file(), f
    for png in ("numerics_ulp.png", "graph_breaks.png"):
        width, height, distinct = _png_facts((out / png).read_bytes())
        assert width >= 300 and height >= 200, (png, width, height)
        assert distinct >= 8, f"{png}: only {distinct} distinct colours: a blank picture"
    assert report.ok, report.summary()
    assert [s.name for s in report.sections] == ["parity", "export", "call_jax", "graph_breaks"]
    assert any(line.startswith("[4/4] graph_breaks") for line in lines)  # progress while it runs
    md = (out / "report.md").read_text()
    assert "![graph breaks, lazy vs dynamo](graph_breaks.png)" in md and "## call_jax" in md


def test_sections_state_what_each_component_found(embedded):
    out, _, _ = embedded
    data = json.loads((out / "report.json").read_text())["sections"]
    # parity: fp32 agrees with CPU eager; bf16 gets a verdict with an explanation either way.
    assert data["parity"]["fp32"]["verdict"] == "PASS"
    assert data["parity"]["bf16"]["verdict"] in ("PASS", "FAIL") and data["parity"]["bf16"]["explanation"]
    # The device's own rules (rules="auto", parity's default): XLA:CPU's, read from this CPU.
    assert all(data["parity"][dt]["rules"] == "xla-cpu" and data["parity"][dt]["rules_source"].startswith(
        "read from the device (CPU)") for dt in ("fp32", "bf16"))
    # export: the all-reduce's token is typed, the scale is recorded, the JAX run is within float32
    # tolerance of torch_xla's (two XLA builds: bit-equality is a figure, summation order may differ).
    m = data["export"]["manifest"]
    assert [i["kind"] for i in m["inputs"]].count("collective_token") == 1
    (c,) = m["collectives"]
    assert (c["op"], c["reduce"], c["scale"], c["requested_scale"]) == ("all_reduce", "sum", 0.5, 0.5)
    assert data["export"]["outputs"] and all(o["within_tolerance"] for o in data["export"]["outputs"])
    assert all(r["max_ulp"] is not None for r in data["export"]["run_vs_torch_xla"])  # the figure is reported
    assert data["export"]["stripped_inputs"] == len(m["inputs"]) - 1
    # call_jax: the gate ignores its third argument, so 2 of 3 leaves reach the HLO module.
    assert data["call_jax"]["num_hlo_params"] == 2 and data["call_jax"]["dropped"] == ["args[2]"]
    # graph breaks: lazy mode has no FX graph; dynamo breaks at the print and at the JAX call.
    lazy, dyn = data["graph_breaks"]["modes"]["lazy"]["report"], data["graph_breaks"]["modes"]["dynamo"]["report"]
    assert lazy["fx_graphs"] == 0 and dyn["fx_graphs"] >= 3
    reasons = " ".join(b["reason"] for b in dyn["fx_breaks"]).lower()
    assert "print" in reasons
    assert dyn["xla_partitions"] >= dyn["fx_graphs"]


def test_user_model_through_the_cli(tmp_path):
    proc = doctor_cli.run("--model", "user_models:tiny", "--out", str(tmp_path / "r"), "--steps", "2", cwd=HERE,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "torch-xla-ext doctor: user_models:tiny" in proc.stdout
    data = json.loads((tmp_path / "r" / "report.json").read_text())
    assert list(data["sections"]) == ["parity", "export", "graph_breaks"]  # no JAX call to explain
    assert data["sections"]["parity"]["fp32"]["verdict"] == "PASS"
    kinds = [i["kind"] for i in data["sections"]["export"]["manifest"]["inputs"]]
    assert sorted(kinds) == ["parameter"] * 4 + ["user_input"]
    assert data["sections"]["graph_breaks"]["modes"]["dynamo"]["report"]["fx_breaks"] == []


@pytest.mark.parametrize("spec, message", [
    ("user_models", "--model: expected module:factory"),
    ("no_such_module:f", "--model: cannot import 'no_such_module'"),
    ("user_models:missing", "--model: user_models has no callable 'missing'"),
    ("user_models:not_a_pair", "user_models:not_a_pair() must return (model, args) or (model, args, kwargs)"),
])
def test_bad_model_spec_names_the_flag(tmp_path, spec, message):
    proc = doctor_cli.run("--model", spec, "--out", str(tmp_path / "r"), cwd=HERE, timeout=900)
    assert proc.returncode == 2
    assert message in proc.stderr


def test_exit_code_follows_the_section_statuses():
    def report(*statuses):
        return doctor.DoctorReport("m", ".", [doctor.Section(f"s{i}", st, "", "", {}, 0.0)
                                              for i, st in enumerate(statuses)], [])

    assert report("ok", "ok").exit_code == 0 and report("ok", "ok").ok
    assert report("ok", "finding").exit_code == 0 and not report("ok", "finding").ok
    assert report("finding", "error").exit_code == 1
