"""compare() runs each mode in a fresh process and reports what account() measures in-process;
the CLI and the PNG on top of it."""

import json
import os

import pytest

from torch_xla_ext import graph_breaks as gb
from torch_xla_ext.cli import main


@pytest.fixture(scope="module")
def comparison():
    seen = []
    cmp = gb.compare(gb.example_model, gb.example_inputs, warmup=1, steps=2, progress=seen.append)
    return cmp, seen


def test_each_mode_in_its_own_process_with_exact_counts(comparison):
    cmp, seen = comparison
    lazy, dynamo = cmp.modes["lazy"], cmp.modes["dynamo"]
    assert lazy.isolation == dynamo.isolation == "subprocess"
    # Fresh processes: each mode compiles from scratch (same counts as the in-process first step).
    assert (lazy.report.fx_graphs, lazy.report.xla_partitions, lazy.report.compiles) == (0, 0, 3)
    assert (dynamo.report.fx_graphs, dynamo.report.num_fx_breaks, dynamo.report.xla_partitions,
            dynamo.report.compiles) == (3, 2, 4, 5)
    # Steady steps: lazy runs 3 graphs/step (2 forced by host reads), dynamo 4 partitions/step;
    # both read the host twice per step (the `if` scalar and digamma's CPU input).
    assert (lazy.steady.executions, lazy.steady.forced_executions, lazy.steady.transfers_to_host) == (6, 4, 4)
    assert (dynamo.steady.executions, dynamo.steady.forced_executions, dynamo.steady.transfers_to_host) == (8, 0, 4)
    assert lazy.steady.compiles == dynamo.steady.compiles == 0
    assert len(lazy.step_ms) == len(dynamo.step_ms) == 2 and all(t > 0 for t in lazy.step_ms + dynamo.step_ms)
    assert "lazy: starting a fresh process" in seen and any(s.startswith("dynamo: 2 timed steps") for s in seen)


def test_markdown_json_and_plot(comparison, tmp_path):
    cmp, _ = comparison
    md = cmp.to_markdown()
    assert "| XLA partitions | 0 | 4 |" in md and "| executions / step | 3 | 4 |" in md
    d = json.loads(cmp.to_json())
    assert d["modes"]["dynamo"]["report"]["fx_graphs"] == 3 and d["steps"] == 2
    png = cmp.plot(str(tmp_path / "breaks.png"))
    with open(png, "rb") as f:
        head = f.read(8)
    assert head == b"\x89PNG\r\n\x1a\n" and os.path.getsize(png) > 10000


def test_in_process_isolation_and_argument_errors():
    with pytest.raises(gb.GraphBreakError, match="fn_factory: .* cannot be imported"):
        gb.compare(lambda: gb.example_model(), gb.example_inputs)
    with pytest.raises(gb.GraphBreakError, match="modes"):
        gb.compare(gb.example_model, gb.example_inputs, modes=("eager",))
    with pytest.raises(gb.GraphBreakError, match="steps"):
        gb.compare(gb.example_model, gb.example_inputs, steps=0)
    with pytest.raises(gb.GraphBreakError, match="fn_factory: torch_xla_ext.graph_breaks has no callable 'nope'"):
        gb.compare("torch_xla_ext.graph_breaks:nope", gb.example_inputs)
    with pytest.raises(gb.GraphBreakError, match="inputs: cannot import 'no_such_module_txe'"):
        gb.compare(gb.example_model, "no_such_module_txe:inputs")
    cmp = gb.compare(lambda: gb.example_model(False, False, False, width=12), lambda: gb.example_inputs(width=12),
                     modes=("dynamo",), warmup=1, steps=1, isolation="in-process")
    r = cmp.modes["dynamo"].report
    assert cmp.modes["dynamo"].isolation.startswith("in-process")
    assert (r.fx_graphs, r.num_fx_breaks, r.xla_partitions, r.compiles) == (1, 0, 1, 1)


def test_cli_writes_json_and_plot(tmp_path, capsys):
    j, p = tmp_path / "gb.json", tmp_path / "gb.png"
    rc = main(["graph-breaks", "--modes", "dynamo", "--warmup", "1", "--steps", "1", "--json", str(j), "--plot", str(p)])
    assert rc == 0
    out = capsys.readouterr()
    assert "| FX graphs | 3 |" in out.out
    assert "dynamo: starting a fresh process" in out.err
    assert json.loads(j.read_text())["modes"]["dynamo"]["report"]["xla_partitions"] == 4
    assert p.stat().st_size > 10000
    assert main(["graph-breaks", "--model", "no_colon"]) == 2
