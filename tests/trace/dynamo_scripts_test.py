"""Scripts that compile with torch.compile(backend="openxla"), traced through the CLI; every figure
against the upstream record the report names for it, from an untraced run of the same code:

* compiled_step.py: a compiled training step with a print inside (a graph break) and a smaller
  batch at step 3 (a recompile): XLA compiles against PT_XLA_DEBUG_LEVEL=2 and CompileTime,
  recompiles against TORCH_LOGS=recompiles, graphs and counted breaks against Dynamo's counters;
* dynamo_train.py: a whole training step (SGD inside) of Qwen2, DistilBERT and EfficientNet-B0,
  with and without a data-dependent jump and an .item(): "graphs ended by a break" against
  len(torch._dynamo.explain(...).break_reasons), graphs against explain's graph_count and Dynamo's
  counters (dynamo_oracle.py, in its own process).
"""

import json
import subprocess
import sys

import pytest

from tests.trace import runs


def test_compiled_step_with_a_print_and_a_shape_change(tmp_path):
    name, args = "compiled_step.py", ["--batches", "8,8,6,8"]
    status, out, err, report = runs.traced(tmp_path / "trace", [sys.executable, runs.script(name), *args])
    o = runs.untraced(tmp_path, name, *args)
    assert report is not None, err[-3000:]
    assert status == o["returncode"] == 0 and out == o["stdout"]
    ours = runs.rank_compiles(report)
    assert len(ours) == o["compile_time"] == o["compile_blocks"] > 0
    assert [c["graph_hash"] for c in ours] == o["compile_hashes"]
    dyn = report["dynamo"][0]["figures"]
    assert dyn["graphs"] == o["unique_graphs"]
    assert dyn["breaks_counted"] == o["graph_breaks"]
    assert dyn["recompiles"] == len(o["recompiles"]) == 1
    # The recompile: its failed guard names the batch dimension, and its XLA compiles carry it.
    (cid,) = [c for c in report["dynamo"][0]["compile_ids"] if c["recompile_reason"]]
    assert "size mismatch at index 0" in cid["recompile_reason"] and "expected 8, actual 6" in cid["recompile_reason"]
    redone = [c for c in ours if c["compile_id"] == cid["compile_id"]]
    assert redone and all(c["step"] == 3 and c["kind"] == "dynamo" for c in redone)
    assert all(any(x["what"] == "guard" for x in c["changed"]) for c in redone)
    assert "mark_dynamic" in redone[0]["advice"]
    # The print is a break with Dynamo's structured record.
    (printed,) = [b for b in report["dynamo"][0]["breaks"] if b["gb_type"] == "Failed to trace builtin operator"]
    assert printed["gb_id"] and printed["frame"].endswith(f"{name}:{_line(name, 'print(')}")
    # Every XLA compile of this script is Dynamo's, each tied to the compile id it came from.
    assert all(c["kind"] == "dynamo" for c in ours)
    assert all(c["compile_id"] for c in ours if c["trigger"]["kind"] == "dynamo")


def _line(name, text):
    with open(runs.script(name)) as f:
        return next(n for n, line in enumerate(f, 1) if text in line and not line.lstrip().startswith(('"', "#")))


CASES = [("qwen2", True), ("distilbert", False), ("efficientnet_b0", False)]


@pytest.mark.parametrize("model, jump", CASES, ids=[f"{m}{'-jump' if j else ''}" for m, j in CASES])
def test_break_figures_of_a_whole_training_step_equal_explain(model, jump, tmp_path):
    extra = ["--jump"] if jump else []
    command = [sys.executable, runs.script("dynamo_train.py"), "--model", model, "--steps", "1", *extra]
    status, _, err, report = runs.traced(tmp_path / "trace", command)
    assert status == 0 and report is not None, err[-3000:]
    proc = subprocess.run([sys.executable, str(runs.HERE) + "/dynamo_oracle.py", model, *extra], env=runs.env(),
                          capture_output=True, text=True, timeout=runs.TIMEOUT, cwd=runs.ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    oracle = json.loads(proc.stdout.strip().splitlines()[-1])
    fig = report["dynamo"][0]["figures"]
    assert fig["graphs_ended_by_break"] == len(oracle["break_reasons"])
    assert fig["graphs"] == oracle["graph_count"] == oracle["unique_graphs"]
    assert fig["breaks_counted"] == oracle["graph_breaks"]
    jumps = [r for r in oracle["break_reasons"] if r.startswith("generic_jump")]
    assert bool(jumps) == jump
    # Each XLA graph the bridge compiled is one of torch_xla's compiles, under its compile id.
    partitions = [c for c in report["compiles"] if c["trigger"]["kind"] == "dynamo"]
    assert 0 < len(partitions) <= fig["xla_partitions"]
    assert all(c["compile_id"] for c in partitions)
