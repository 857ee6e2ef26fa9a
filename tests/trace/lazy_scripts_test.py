"""Lazy-tensor training scripts as people write them, each run once, traced through the CLI, with
torch_xla's own records of the same process as the oracle (``runs.traced_script``): every compile
counted once (``CompileTime``, ``PT_XLA_DEBUG_LEVEL=2``'s analysis blocks), with torch_xla's graph
hash, in torch_xla's order; and what the report says changed at each recompile is what the script
changed. One script is also run untraced: tracing changes neither its graphs nor its output.

* gpt2_finetune.py: transformers GPT-2, sequence lengths vary, loss.item() before the sync;
* cnn_loader.py: a torchvision ResNet through MpDeviceLoader, the DataLoader's last batch short;
* sched_accum.py: gradient accumulation and an LR schedule warming up from 0 (and untraced);
* crash_at.py --how oom: step 3 runs out of memory on the device (torch_xla raises).
"""

import resource

from tests.trace import runs


def test_gpt2_varying_lengths_with_item_logging(tmp_path):
    r = runs.traced_script(tmp_path, "gpt2_finetune.py", "--lengths", "16,16,24,16")
    assert r.status == 0, r.stderr[-3000:]
    ours = runs.check_compiles(r)
    item, sync = runs.site("gpt2_finetune.py", "{loss.item():"), runs.site("gpt2_finetune.py", "torch_xla.sync()")
    assert {(c["trigger"]["kind"], c["trigger"]["site"]) for c in ours} == {("host_read", item), ("sync", sync)}
    assert all(c["trigger"]["op"] == "item" for c in ours if c["trigger"]["kind"] == "host_read")
    assert "host read" in ours[0]["advice"].lower()
    # The second step's graph is the first with the optimizer's state among its inputs.
    sync2 = next(c for c in ours if c["step"] == 2)
    grown = next(x for x in sync2["changed"] if x["what"] == "inputs")
    assert grown["new"] > grown["old"] and grown["role"] == "optimizer_state"
    assert "optimizer" in sync2["advice"]
    # Step 3 has the longer batch: both graphs of that step compile again; the sync's graph names
    # the input that changed, the tensor it is, its shapes, and the first op on other shapes.
    at3 = [c for c in ours if c["step"] == 3]
    assert {c["trigger"]["kind"] for c in at3} == {"host_read", "sync"}
    sync3 = next(c for c in at3 if c["trigger"]["kind"] == "sync")
    change = next(x for x in sync3["changed"] if x["what"] == "input")
    assert (change["old"], change["new"], change["names"], change["role"]) == ([2, 16], [2, 24], ["ids"], "user_input")
    op = next(x for x in sync3["changed"] if x["what"] == "op")
    assert "16" in op["old"] and "24" in op["new"]
    assert (op.get("new_site") or op["first_with_source"]["site"]).rpartition(":")[0].endswith(".py")
    assert "pad" in sync3["advice"] and sync3["previous_step"] == 2
    # Step 4 is length 16 again: graphs compiled before run, nothing compiles.
    assert max(c["step"] for c in ours) == 3
    assert r.rank()["steady"].startswith("no new graphs after step 3")
    # Where it syncs: the item() host read runs a graph every step, and so does the sync.
    syncs = {(s["kind"], s["site"]): s for s in r.report["sync_points"]}
    assert syncs[("host_read", item)]["steps"] == syncs[("sync", sync)]["steps"] == 4
    assert len(r.report["summary"]) <= 20 and r.report["summary"][0].startswith("torch-xla-ext trace")
    assert "\n".join(r.report["summary"]) in r.stderr  # the summary on stderr at exit


def test_cnn_short_last_batch_through_mp_device_loader(tmp_path):
    r = runs.traced_script(tmp_path, "cnn_loader.py", "--samples", "10", "--batch", "4", "--epochs", "2")
    assert r.status == 0, r.stderr[-3000:]
    ours = runs.check_compiles(r)
    loader = runs.site("cnn_loader.py", "MpDeviceLoader(loader")
    loop = [c for c in ours if c["trigger"]["site"] == loader]
    assert loop and all(c["trigger"]["kind"] == "data_loader" for c in loop)
    # Batches of 4, 4, 2: the third step of the first epoch compiles for the short batch.
    short = next(c for c in loop if any(x["what"] == "input" and x["new"][:1] == [2] for x in c["changed"]))
    x = next(x for x in short["changed"] if x["what"] == "input" and x.get("names") == ["x"])
    assert (x["old"], x["new"]) == ([4, 3, 16, 16], [2, 3, 16, 16])
    assert "drop_last" in short["advice"]
    # The second epoch compiles nothing: the short batch's graph is cached.
    assert max(c["step"] for c in ours) <= 4
    assert "no new graphs after step" in r.rank()["steady"]


def test_lr_schedule_and_gradient_accumulation_untraced_alike(tmp_path):
    args = ("--micro", "8", "--accum", "2")
    r = runs.traced_script(tmp_path, "sched_accum.py", *args)
    assert r.status == 0, r.stderr[-3000:]
    ours = runs.check_compiles(r)
    step_line = runs.site("sched_accum.py", "optimizer.step()")
    # Micro-batches alternate between two code paths (accumulate; accumulate + step); the rate
    # warms up from 0, which torch_xla compiles in as a constant, then passes as an input.
    by_step = {c["step"]: c for c in ours}
    assert sorted(by_step) == [1, 2, 4]
    assert any(x["what"] == "op" for x in by_step[2]["changed"])
    constant = next(x for x in by_step[4]["changed"] if x["what"] == "constant")
    assert constant["old"] in (0.0, -0.0) and constant["new"] == "(an input)" and constant["site"] == step_line
    assert "0 and 1" in by_step[4]["advice"]
    assert r.rank()["steady"].startswith("no new graphs after step 4")
    # Untraced, the script compiles the same graphs (torch_xla's hashes, in order) and prints the same.
    u = runs.untraced(tmp_path, "sched_accum.py", *args)
    assert u["returncode"] == 0 and u["stdout"] == r.stdout
    assert u["compile_hashes"] == [c["graph_hash"] for c in ours]
    assert u["execution_hashes"] == r.analysis[0]["execution_hashes"]


def _cap_memory():  # the 1 TiB the script asks for fails on any machine, whatever its overcommit policy
    resource.setrlimit(resource.RLIMIT_AS, (32 << 30, 32 << 30))


def test_a_script_that_runs_out_of_memory_at_step_3(tmp_path):
    r = runs.traced_script(tmp_path, "crash_at.py", "--how", "oom", "--step", "3", preexec_fn=_cap_memory)
    assert r.status == 1, r.stderr[-3000:]
    assert r.stdout.splitlines()[-1].startswith("step 3 loss")  # what the script printed last
    ours = runs.check_compiles(r)
    rank = r.rank()
    assert rank["exception"]["type"] == "RuntimeError" and "Out of memory" in rank["exception"]["message"]
    assert rank["exception"]["site"] == runs.site("crash_at.py", "activations[0].item()")
    assert rank["steps"] == 3 and "raised RuntimeError" in rank["stopped"] and "after step 3" in rank["stopped"]
    # The loop's step 3 compiled a new graph at its loss read (a bigger batch); the read that died
    # compiled its own graph after step 3's last sync: recorded, in the step that never ended.
    assert (ours[-3]["step"], ours[-3]["trigger"]["site"]) == (3, runs.site("crash_at.py", "{loss.item():"))
    assert (ours[-1]["step"], ours[-1]["trigger"]["site"]) == (rank["steps"] + 1, rank["exception"]["site"])
    assert "Traceback" in r.stderr and "Out of memory" in r.stderr  # the script's own stderr

