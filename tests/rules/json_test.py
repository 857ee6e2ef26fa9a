"""The one JSON policy (torch_xla_ext/_json.py): every JSON writer of the package goes through it,
its output parses with a strict RFC 8259 parser when the report holds NaN and infinities, and
the readers take back what it wrote."""

import ast
import json
import math
import pathlib

import numpy as np
import pytest

from torch_xla_ext import _json

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "torch_xla_ext"
NAN, INF = float("nan"), float("inf")


def strict(text: str):
    """json.loads that refuses NaN, Infinity and -Infinity (Python's parser takes them by default)."""
    def refuse(c):
        raise ValueError(f"non-standard JSON constant {c}")
    return json.loads(text, parse_constant=refuse)


def same(a, b) -> bool:
    return (math.isnan(a) and math.isnan(b)) if isinstance(a, float) and math.isnan(a) else a == b


def test_no_writer_bypasses_the_policy():
    """No json.dump/json.dumps call in the package outside _json.py (a new writer must use it)."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "_json.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("dump", "dumps") and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "json"):
                offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not offenders, offenders


def test_the_rule():
    obj = {"a": NAN, "b": [INF, -INF, 1.5, np.float32("nan"), np.array([1.0, -np.inf])], 3: (True, None, "nan")}
    text = _json.dumps(obj)
    assert strict(text) == {"a": "nan", "b": ["inf", "-inf", 1.5, "nan", [1.0, "-inf"]], "3": [True, None, "nan"]}
    assert [_json.number(v) for v in ("inf", "-inf", 2, "x")] == [INF, -INF, 2, "x"] and math.isnan(_json.number("nan"))
    with pytest.raises(TypeError):  # no silent str() unless the writer asks for it
        _json.dumps({"x": object()})
    assert strict(_json.dumps({"x": object}, default=str)) == {"x": str(object)}


def test_numerics_report():
    from torch_xla_ext import numerics

    r = numerics.compare(np.float32([np.inf, 1.0]), np.float32([1.0, 1.0]))
    assert math.isinf(r.max_abs_diff)
    d = strict(r.to_json())
    assert d["max_abs_diff"] == "inf" and _json.number(d["max_abs_diff"]) == r.max_abs_diff
    n = numerics.compare(np.float32([np.nan]), np.float32([0.0]))
    assert strict(n.to_json())["max_abs_diff"] == "nan"


def test_graph_break_report_compare_merge_and_trace(tmp_path):
    from torch_xla_ext import graph_breaks
    from torch_xla_ext.graph_breaks.compare import Comparison, ModeResult
    from torch_xla_ext.graph_breaks.report import GraphBreakReport, load_report

    rep = GraphBreakReport(compile_ms=NAN, wall_ms=INF, rank={"rank": 0})
    path = rep.save(str(tmp_path / "gb-rank{rank}.json"))
    strict(pathlib.Path(path).read_text())
    back = load_report(path)
    assert same(back.compile_ms, NAN) and back.wall_ms == INF and back.rank == {"rank": 0}

    # a mode with no timed steps: its median is NaN (compare.py), written as "nan"
    mode = ModeResult("dynamo", rep, rep, [], "in-process")
    assert math.isnan(mode.median_ms)
    cmp = Comparison({"dynamo": mode}, warmup=0, steps=0, model="m")
    d = strict(cmp.to_json())
    assert d["modes"]["dynamo"]["median_ms"] == "nan"
    (tmp_path / "cmp.json").write_text(cmp.to_json(indent=1))
    strict(graph_breaks.merge([str(tmp_path / "cmp.json")]).to_json())  # merge reads what compare wrote
    other = GraphBreakReport(compile_ms=1.0, wall_ms=2.0, rank={"rank": 1}).save(str(tmp_path / "gb-rank{rank}.json"))
    merged = graph_breaks.merge([path, other])
    assert same(merged.reports[0].compile_ms, NAN) and merged.reports[1].compile_ms == 1.0
    strict(merged.to_json())
    trace = graph_breaks.write_trace(str(tmp_path / "t.trace.json"), [rep])
    strict(pathlib.Path(trace).read_text())


def test_manifest_round_trips_non_finite_constants():
    from torch_xla_ext.export.manifest import Collective, Input, Manifest

    m = Manifest(inputs=[Input(0, "user_input", [2], "float32", position=0),
                         Input(1, "constant", [], "float32", name="c", value=-INF, file="c.npy")],
                 collectives=[Collective("all_reduce", "add", [], None, [0], scale=1.0, requested_scale=INF)],
                 outputs=[{"shape": [2], "dtype": "float32"}],
                 unused_inputs=[{"position": 1, "shape": [], "dtype": "python:float", "value": NAN},
                                {"position": 2, "shape": [], "dtype": "python:str", "value": "inf"}],
                 num_user_inputs=3)
    d = strict(m.to_json())
    assert d["inputs"][1]["value"] == "-inf" and d["unused_inputs"][0]["value"] == "nan"
    back = Manifest.from_dict(d)
    assert back.inputs[1].value == -INF and back.collectives[0].requested_scale == INF
    assert math.isnan(back.unused_inputs[0]["value"])
    assert back.unused_inputs[1]["value"] == "inf"  # a str constant stays a str


def test_safetensors_header(tmp_path):
    from torch_xla_ext.export import tensor_file

    tensor_file.write(tmp_path / "w.safetensors", {"x": np.float32([np.nan, np.inf])}, {"k": "v"})
    raw = (tmp_path / "w.safetensors").read_bytes()
    n = int.from_bytes(raw[:8], "little")
    assert strict(raw[8:8 + n].decode())["x"]["dtype"] == "F32"
    _, t = tensor_file.read(tmp_path / "w.safetensors")
    assert np.isnan(t["x"][0]) and t["x"][1] == np.inf


def test_parity_report():
    from torch_xla_ext import numerics
    from torch_xla_ext.parity.report import OutputParity, ParityReport, Verdict

    cmp = numerics.compare(np.float32([np.inf, 1.0]), np.float32([1.0, 1.0]))
    out = OutputParity("[0]", cmp, xla_error=INF, cpu_error=0.0, xla_mean_error=NAN, cpu_mean_error=0.0,
                       closer="cpu", scale=1.0, max_diff_to_scale=INF)
    rep = ParityReport(Verdict.FAIL, "x", "bfloat16", 1.6e-2, 1e-5, outputs=(out,))
    d = strict(rep.to_json())
    assert d["outputs"][0]["xla_error"] == "inf" and d["outputs"][0]["xla_mean_error"] == "nan"
    assert d["outputs"][0]["max_diff_to_scale"] == "inf"


def test_doctor_report(tmp_path):
    pytest.importorskip("torch")
    from torch_xla_ext import doctor

    data = doctor.json_safe({"median_ms": NAN, "err": (INF, -INF), "arr": np.float64([1.0, np.nan]), "obj": object})
    rep = doctor.DoctorReport("m", str(tmp_path), [doctor.Section("parity", "ok", "s", "md", data, 0.5)], [])
    d = strict(rep.to_json())
    assert d["sections"]["parity"]["median_ms"] == "nan" and d["sections"]["parity"]["err"] == ["inf", "-inf"]
    assert d["sections"]["parity"]["arr"] == [1.0, "nan"] and d["sections"]["parity"]["obj"] == str(object)
