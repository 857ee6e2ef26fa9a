"""Scripts that compile with torch.compile(backend="openxla"), each run once, traced through the CLI;
every figure against the upstream record the report names for it, read in the same process
(``runs.traced_script``):

* compiled_step.py: a compiled training step with a print inside (a graph break), a CPU-fallback
  op and a smaller batch at step 3 (a recompile), with lazy syncs between calls: XLA compiles
  against PT_XLA_DEBUG_LEVEL=2 and CompileTime, recompiles against TORCH_LOGS=recompiles, graphs
  and counted breaks against Dynamo's counters, fallback ops against torch_xla's own list;
* dynamo_train.py: whole training steps (SGD inside) of Qwen2 with a data-dependent jump and an
  .item(), DistilBERT and EfficientNet-B0's first stages: per torch.compile, "graphs ended by a
  break" against explain's break_reasons and graphs against its graph count.
"""

from tests.trace import runs


def test_compiled_step_with_a_print_a_fallback_and_a_shape_change(tmp_path):
    name = "compiled_step.py"
    r = runs.traced_script(tmp_path, name, "--batches", "8,8,6,8")
    assert r.status == 0, r.stderr[-3000:]
    ours = runs.check_compiles(r)
    o = r.oracle[0]
    (dyn,) = r.report["dynamo"]
    fig = dyn["figures"]
    assert fig["fx_graphs"] == o["unique_graphs"] > 0
    assert fig["counted_breaks"] == o["graph_breaks"] > 0
    assert fig["recompiles"] == len(runs.recompiles(r.stderr)) > 0
    # The recompiles: each one's failed guard names the batch dimension, and the XLA compiles the
    # bridge made for it carry that compile id, at step 3, with the guard as what changed.
    redone = [c for c in dyn["compile_ids"] if c["recompile_reason"]]
    assert {c["name"] for c in redone} == set(runs.recompiles(r.stderr))
    for cid in redone:
        assert "size mismatch at index 0" in cid["recompile_reason"] and "expected 8, actual 6" in cid["recompile_reason"]
    bridge_compiles = [c for c in ours if c["compile_id"] in {x["compile_id"] for x in redone}]
    assert bridge_compiles and all(c["step"] == 3 and c["kind"] == "dynamo" for c in bridge_compiles)
    assert all(any(x["what"] == "guard" for x in c["changed"]) for c in bridge_compiles)
    assert "mark_dynamic" in bridge_compiles[0]["advice"]
    # Each compile the bridge made is tied to its compile id (and to no other's): its bridge graph
    # is one the bridge compiled under that id.
    partitions = {(cid["compile_id"], p["graph_hash"]) for cid in dyn["compile_ids"] for b in cid["bridges"]
                  for p in b["partitions"]}
    for c in ours:
        if c["trigger"]["kind"] == "dynamo":
            assert c["compile_id"] and (c["compile_id"], c["bridge_hash"]) in partitions
    # The print is a break with Dynamo's structured record, at the print's line.
    (printed,) = [b for b in dyn["breaks"] if b["gb_type"] == "Failed to trace builtin operator"]
    assert printed["gb_id"] and printed["frame"] == runs.site(name, "print(")
    # digamma: the bridge left it out of its XLA graphs, and torch_xla ran it on the CPU.
    assert set(fig["fallback_nodes"]) == set(o["fallback_ops"]) == {"aten::digamma"}
    # The lazy syncs between calls and the compiled step share one report.
    assert all(c["kind"] == "dynamo" for c in ours) and r.rank()["steps"] == 4


def test_graphs_ended_by_a_break_of_whole_training_steps_equal_explain(tmp_path):
    cases = ["qwen2:jump", "distilbert", "efficientnet_b0"]
    r = runs.traced_script(tmp_path, "dynamo_train.py", "--cases", ",".join(cases), explain=True, timeout=900)
    assert r.status == 0, r.stderr[-3000:]
    runs.check_compiles(r)
    o = r.oracle[0]
    (dyn,) = r.report["dynamo"]
    assert dyn["figures"]["fx_graphs"] == o["unique_graphs"] == sum(e["graph_count"] for e in o["explain"])
    assert dyn["figures"]["counted_breaks"] == o["graph_breaks"]
    assert dyn["figures"]["graphs_ended_by_break"] == sum(len(e["break_reasons"]) for e in o["explain"])
    # Per case: the compile ids from one compile of the step function to the next.
    per_case = []
    for c in dyn["compile_ids"]:
        if c["name"] == "train_step":
            per_case.append([])
        per_case[-1].append(c)
    assert len(per_case) == len(cases) == len(o["explain"])
    for case, ids, explained in zip(cases, per_case, o["explain"]):
        graphs = [g for c in ids for g in c["graphs"]]
        assert len(graphs) == explained["graph_count"], case
        assert sum(1 for g in graphs if g["ended_by"]) == len(explained["break_reasons"]) > 0, case
        jumps = [x for x in explained["break_reasons"] if x.startswith("generic_jump")]
        assert bool(jumps) == case.endswith(":jump"), case
