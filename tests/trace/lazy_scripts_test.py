"""Lazy-tensor training scripts as people write them, traced through the CLI and compared with an
untraced run of the same script under torch_xla's own reporting (PT_XLA_DEBUG_LEVEL=2, the
CompileTime metric): every compile counted once, with torch_xla's graph hash, in torch_xla's order;
the script's output and exit status unchanged; and what the report says changed at each recompile
is what the script changed.

* gpt2_finetune.py: transformers GPT-2, sequence lengths vary, loss.item() before the sync;
* cnn_loader.py: a torchvision ResNet through MpDeviceLoader, the DataLoader's last batch short;
* sched_accum.py: gradient accumulation and an LR schedule warming up from 0;
* crash_at.py --how raise: the loop raises at step 3.
"""

import os
import sys

import pytest

from tests.trace import runs



def line_of(name, text):
    with open(runs.script(name)) as f:
        for n, line in enumerate(f, 1):
            if text in line:
                return n
    raise AssertionError(f"{text!r} not in {name}")


def site(name, text):
    return f"{runs.script(name)}:{line_of(name, text)}"


@pytest.fixture(scope="module")
def runs_of(tmp_path_factory):
    cache = {}

    def get(name, *args):
        key = (name, args)
        if key not in cache:
            tmp = tmp_path_factory.mktemp(name.split(".")[0])
            status, out, err, report = runs.traced(tmp / "trace", [sys.executable, runs.script(name), *args])
            cache[key] = {"status": status, "stdout": out, "stderr": err, "report": report, "dir": tmp / "trace",
                          "oracle": runs.untraced(tmp, name, *args)}
        return cache[key]
    return get


def check_against_oracle(r, status=0):
    o, report = r["oracle"], r["report"]
    assert report is not None, r["stderr"][-3000:]
    assert r["status"] == o["returncode"] == status, r["stderr"][-3000:]
    assert r["stdout"] == o["stdout"]  # the script printed the same, traced or not
    ours = runs.rank_compiles(report)
    # One entry per compile: torch_xla's metric and its analysis blocks of the untraced run.
    assert len(ours) == o["compile_blocks"] == len(o["compile_hashes"]) > 0
    if o["compile_time"] is not None:
        assert len(ours) == o["compile_time"]
    # The same graphs, in the same order, under torch_xla's own hash.
    assert [c["graph_hash"] for c in ours] == o["compile_hashes"]
    rank = report["ranks"][0]
    if rank["torch_xla_compile_count"] is not None:  # the traced process's own metric at its exit
        assert rank["torch_xla_compile_count"] == len(ours)
    # The executions torch_xla reported, in order, are the ones the steps list.
    executions = [h for s in report_steps(r) for _, _, h in s.get("executions", [])]
    assert executions == o["execution_hashes"][:len(executions)]
    return ours


def report_steps(r):
    import json

    steps = []
    for name in os.listdir(r["dir"]):
        if name.startswith("rank-") and name.endswith(".jsonl"):
            with open(r["dir"] / name) as f:
                steps += [rec for rec in map(json.loads, f) if rec["ev"] == "step"]
    return steps


def test_gpt2_varying_lengths_with_item_logging(runs_of):
    r = runs_of("gpt2_finetune.py", "--lengths", "16,16,24,16")
    ours = check_against_oracle(r)
    item = site("gpt2_finetune.py", "{loss.item():")
    sync = site("gpt2_finetune.py", "torch_xla.sync()")
    assert {(c["trigger"]["kind"], c["trigger"]["site"]) for c in ours} == {("host_read", item), ("sync", sync)}
    assert all(c["trigger"]["op"] == "item" for c in ours if c["trigger"]["kind"] == "host_read")
    # Step 3 has the longer batch: both graphs of that step compile again, and the sync's graph
    # names the input that changed, the tensor it is, and its shapes.
    at3 = [c for c in ours if c["step"] == 3]
    assert {c["trigger"]["kind"] for c in at3} == {"host_read", "sync"}
    sync3 = next(c for c in at3 if c["trigger"]["kind"] == "sync")
    change = next(x for x in sync3["changed"] if x["what"] == "input")
    assert (change["old"], change["new"], change["names"], change["role"]) == ([2, 16], [2, 24], ["ids"], "user_input")
    assert "pad" in sync3["advice"] and sync3["previous_step"] == 2
    # The second step's graph is the first with the optimizer's state among its inputs.
    sync2 = next(c for c in ours if c["step"] == 2)
    grown = next(x for x in sync2["changed"] if x["what"] == "inputs")
    assert grown["new"] > grown["old"] and grown["role"] == "optimizer_state"
    assert "optimizer" in sync2["advice"]
    # Step 4 is length 16 again: graphs compiled before run, nothing compiles.
    assert max(c["step"] for c in ours) == 3
    assert r["report"]["ranks"][0]["steady"].startswith("no new graphs after step 3")
    # Where it syncs: the item() host read runs a graph every step, and so does the sync.
    syncs = {(s["kind"], s["site"]): s for s in r["report"]["sync_points"]}
    assert syncs[("host_read", item)]["steps"] == syncs[("sync", sync)]["steps"] == 4
    assert "host read" in ours[0]["advice"].lower()


def test_cnn_short_last_batch_through_mp_device_loader(runs_of):
    r = runs_of("cnn_loader.py", "--samples", "10", "--batch", "4", "--epochs", "2")
    ours = check_against_oracle(r)
    loader = site("cnn_loader.py", "MpDeviceLoader(loader")
    loop = [c for c in ours if c["trigger"]["site"] == loader]
    assert loop and all(c["trigger"]["kind"] == "data_loader" for c in loop)
    # Batches of 4, 4, 2: the third step of the first epoch compiles for the short batch.
    short = next(c for c in loop if any(x["what"] == "input" and x["new"][:1] == [2] for x in c["changed"]))
    x = next(x for x in short["changed"] if x["what"] == "input" and x.get("names") == ["x"])
    assert (x["old"], x["new"]) == ([4, 3, 16, 16], [2, 3, 16, 16])
    assert "drop_last" in short["advice"]
    # The second epoch compiles nothing: the short batch's graph is cached.
    epoch_steps = 3
    assert max(c["step"] for c in ours) <= 1 + epoch_steps
    assert "no new graphs after step" in r["report"]["ranks"][0]["steady"]


def test_lr_schedule_and_gradient_accumulation(runs_of):
    r = runs_of("sched_accum.py", "--micro", "8", "--accum", "2")
    ours = check_against_oracle(r)
    step_line = site("sched_accum.py", "optimizer.step()")
    # Micro-batches alternate between two code paths (accumulate; accumulate + step); the rate
    # warms up from 0, which torch_xla compiles in as a constant, then passes as an input.
    by_step = {c["step"]: c for c in ours}
    assert sorted(by_step) == [1, 2, 4]
    constant = next(x for x in by_step[4]["changed"] if x["what"] == "constant")
    assert constant["old"] in (0.0, -0.0) and constant["new"] == "(an input)" and constant["site"] == step_line
    assert "0 and 1" in by_step[4]["advice"]
    assert r["report"]["ranks"][0]["steady"].startswith("no new graphs after step 4")


def test_a_script_that_raises_at_step_3(runs_of):
    r = runs_of("crash_at.py", "--how", "raise", "--step", "3")
    ours = check_against_oracle(r, status=1)
    rank = r["report"]["ranks"][0]
    assert rank["exception"]["type"] == "RuntimeError"
    assert rank["exception"]["site"] == site("crash_at.py", "raise RuntimeError")
    assert rank["steps"] == 2 and "raised RuntimeError" in rank["stopped"] and "after step 2" in rank["stopped"]
    # The step that raised compiled its new graph first (a bigger batch): recorded, at step 3.
    assert ours[-1]["step"] == 3 and ours[-1]["trigger"]["kind"] == "host_read"
    assert "Traceback" in r["stderr"] and "diverged at step 3" in r["stderr"]  # the script's own stderr
