"""compare() runs each mode in a fresh process under the one --model contract (forward pass or
training step); its worker timeout fires; the CLI writes JSON, HTML, a trace and a PNG."""

import json

import pytest

from torch_xla_ext import graph_breaks as gb
from torch_xla_ext.cli import main

TOKENS = "tests.graph_breaks.factories:token_mlp"


@pytest.fixture(scope="module")
def comparison():
    seen = []
    cmp = gb.compare("torch_xla_ext.graph_breaks:example", warmup=1, steps=2, progress=seen.append)
    return cmp, seen


def test_each_mode_in_its_own_process(comparison):
    cmp, seen = comparison
    lazy, dynamo = cmp.modes["lazy"], cmp.modes["dynamo"]
    assert lazy.isolation == dynamo.isolation == "subprocess"
    assert (lazy.report.fx_graphs, lazy.report.xla_partitions, lazy.report.num_aot_graphs) == (0, 0, 0)
    # A fresh process compiles from scratch: the same figures as explain() of the model here.
    import torch._dynamo

    model, (x,) = gb.example()
    explained = torch._dynamo.explain(model)(x)
    assert dynamo.report.fx_graphs == explained.graph_count
    assert dynamo.report.graphs_ended_by_break == len(explained.break_reasons)
    # Forward passes under no_grad: AOT inference graphs, one per Dynamo graph.
    assert dynamo.report.aot_graphs == {"inference": explained.graph_count}
    # Steady steps: every partition once per step, no compile.
    assert dynamo.steady.executions == 2 * dynamo.report.xla_partitions
    assert lazy.steady.compiles == dynamo.steady.compiles == 0 and dynamo.steady.steps == 2
    assert len(lazy.step_ms) == len(dynamo.step_ms) == 2 and all(t > 0 for t in lazy.step_ms + dynamo.step_ms)
    assert "lazy: starting a fresh process" in seen and any(s.startswith("dynamo: 2 timed steps") for s in seen)
    # One median: a worker's progress line says what the comparison reports (an even step count
    # takes the mean of the middle two).
    import statistics

    for name, mode in cmp.modes.items():
        (line,) = [s for s in seen if s.startswith(f"{name}: 2 timed steps")]
        assert mode.median_ms == statistics.median(mode.step_ms)
        assert line.endswith(f"median {mode.median_ms:.3f} ms"), (line, mode.step_ms)


def test_markdown_json_html_and_plot(comparison, tmp_path):
    cmp, _ = comparison
    md = cmp.to_markdown()
    assert f"| Dynamo graphs | 0 | {cmp.modes['dynamo'].report.fx_graphs} |" in md
    d = json.loads(cmp.to_json())
    assert d["modes"]["dynamo"]["report"]["fx_graphs"] == cmp.modes["dynamo"].report.fx_graphs and d["steps"] == 2
    page = open(cmp.write_html(str(tmp_path / "cmp.html"))).read()
    assert "Data-dependent branching" in page and "GB0170" in page
    png = cmp.plot(str(tmp_path / "breaks.png"))
    assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_training_step_with_keyword_inputs_through_the_cli(tmp_path, capsys):
    j, h, t, p = (tmp_path / f for f in ("gb.json", "gb.html", "gb.trace.json", "gb.png"))
    rc = main(["graph-breaks", "--model", TOKENS, "--train", "--modes", "dynamo", "--warmup", "1", "--steps", "1",
               "--json", str(j), "--html", str(h), "--trace", str(t), "--plot", str(p)])
    assert rc == 0
    out = capsys.readouterr()
    assert "training step of " + TOKENS in out.out and "dynamo: starting a fresh process" in out.err
    d = json.loads(j.read_text())
    rep = d["modes"]["dynamo"]["report"]
    assert d["train"] is True
    # zero_grad, backward() and the optimizer break the step; the forward has a backward graph.
    assert rep["aot_graphs"]["forward"] == rep["aot_graphs"]["backward"] == 1
    assert "Unsupported Tensor.backward() call" in {b["gb_type"] for b in rep["fx_breaks"]}
    assert "Unsupported Tensor.backward() call" in h.read_text()
    events = json.loads(t.read_text())["traceEvents"]
    assert {e["args"]["name"] for e in events if e.get("name") == "thread_name"} >= {"dynamo compile", "xla execute"}
    assert all(e["ph"] in ("M", "X", "i") for e in events)
    assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_worker_timeout_fires_and_kills_the_worker():
    import time

    t0 = time.monotonic()
    cmp = gb.compare("tests.graph_breaks.factories:sleepy", modes=("lazy",), steps=1, timeout_s=3)
    assert time.monotonic() - t0 < 60  # the factory sleeps 300 s
    f = cmp.modes["lazy"].failure  # a finding about the mode, not an error of the tool
    assert f["kind"] == "timeout" and "timed out after 3 s and was killed" in f["exception"]


def test_in_process_isolation_and_argument_errors():
    with pytest.raises(gb.GraphBreakError, match="model: .* cannot be imported"):
        gb.compare(lambda: gb.example())
    with pytest.raises(gb.GraphBreakError, match="modes"):
        gb.compare(gb.example, modes=("eager",))
    with pytest.raises(gb.GraphBreakError, match="steps"):
        gb.compare(gb.example, steps=0)
    with pytest.raises(gb.GraphBreakError, match="timeout_s"):
        gb.compare(gb.example, timeout_s=0)
    with pytest.raises(gb.GraphBreakError, match="model: torch_xla_ext.graph_breaks has no callable 'nope'"):
        gb.compare("torch_xla_ext.graph_breaks:nope")
    with pytest.raises(TypeError):
        gb.compare(gb.example_model, gb.example_inputs)  # the old two-callable form is gone
    with pytest.raises(gb.GraphBreakError, match="must return \\(model, args\\)"):
        gb.compare("tests.graph_breaks.factories:not_a_pair", modes=("lazy",), steps=1)  # from the worker
    cmp = gb.compare(lambda: (gb.example_model(False, False, False, width=12), gb.example_inputs(width=12)),
                     modes=("dynamo",), warmup=1, steps=1, isolation="in-process")
    r = cmp.modes["dynamo"].report
    assert cmp.modes["dynamo"].isolation.startswith("in-process")
    assert (r.fx_graphs, r.num_fx_breaks, r.xla_partitions) == (1, 0, 1)
    assert main(["graph-breaks", "--model", "no_colon"]) == 2
