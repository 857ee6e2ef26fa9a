"""The script trace of torchax programs written as their users write them, each traced with JAX's
own records of the same process as the oracle (``jax_log_compiles``' "Finished XLA compilation"
lines and ``jax_explain_cache_misses``' explanations, captured inside it by ``oracle_run.py``;
``jax.process_index()``) and the functions' own signatures (``inspect``) for the torch names:

* a GPT-2 serving loop (``torchax.compile``) with varying batch sizes and lengths, position ids
  passed from a late request on, and the next token picked op by op;
* a classifier under ``torchax.train.make_train_step`` with a learning-rate schedule written into
  optax's state (a Python float, then a numpy float) and a DataLoader's short last batch;
* a hand-written SGD step whose momentum state appears at the first step, traced with nothing but
  ``TORCH_XLA_EXT_TRACE`` (``trace --env``);
* two ``jax.distributed`` processes on the CPU, one of which gets longer requests from call 3 on.

Every compile of every process is JAX's k-th compile of the same name, and every "what changed"
says what JAX's explanation of that compile says (``jax_log.check``).
"""

import inspect
import os
import socket
import sys

from tests.trace import jax_log, runs


def _rows(report, rank=0):
    return [c for c in report["compiles"] if c["rank"] == rank]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_gpt2_serving_loop_with_varying_shapes_and_eager_next_token(tmp_path):
    from transformers import GPT2LMHeadModel

    name = "torchax_serve.py"
    requests = "1x8,1x8,2x8,1x12,2x8,4x16,1x8"
    run = runs.traced_jax_script(tmp_path, name, "--requests", requests, "--positions-from", "7")
    assert run.status == 0, run.stderr[-3000:]
    assert "served 7 requests" in run.stdout
    (o,) = run.oracle.values()
    found = jax_log.check(o["jax_log"], _rows(run.report), run.report["ranks"][0])
    # JAX: one program per new (batch, length), one more when position_ids appears.
    calls = jax_log.counts(o["jax_log"])["jit(call_torch)"]
    assert calls == len(set(requests.split(","))) + 1 == len(found)
    assert [a["kind"] for a in found] == ["new", "types", "types", "types", "pytree"]
    (fn,) = run.report["functions"]
    assert fn["name"] == "GPT2LMHeadModel.forward" and fn["calls"] == 7 and fn["compiles"] == calls

    # JAX's args[2] of call_torch is forward's first parameter, by the model's own signature.
    first = list(inspect.signature(GPT2LMHeadModel.forward).parameters)[1]
    call_line = f"{name}:{runs.line_of(name, 'logits = fast(ids)[0]')}"
    kw_line = f"{name}:{runs.line_of(name, 'fast(ids, position_ids=positions)')}"
    jitted = [r for r in _rows(run.report) if not r["eager"]]
    for row, a in zip(jitted, found):
        assert row["trigger"]["function"] == "GPT2LMHeadModel.forward"
        assert row["trigger"]["site"].endswith(kw_line if a["kind"] == "pytree" else call_line)
        if a["kind"] == "types":
            (change,) = row["changed"]
            assert change["jax_name"] == "args[2]" and change["name"] == first and row["advice"]
    (pytree,) = [c for c in jitted[-1]["changed"] if c["what"] == "structure"]
    assert "position_ids" in pytree["added"]

    # The next token is picked op by op at the user's line; every request ran it once.
    argmax = f"{name}:{runs.line_of(name, '.argmax(-1)')}"
    groups = [g for g in run.report["op_by_op"] if g["site"].endswith(argmax)]
    assert any("argmax" in g["op"] for g in groups) and all(g["executions"] == 7 for g in groups)
    assert sum(g["compiles"] for g in run.report["op_by_op"]) == run.report["ranks"][0]["op_by_op"]
    with open(os.path.join(run.dir, "report.md")) as f:
        section = f.read().split("## Op by op", 1)[1].split("\n## ", 1)[0]
    assert f"{argmax} | aten.argmax.default | `next_token = logits[:, -1].argmax(-1)`" in section, section


def test_make_train_step_with_a_learning_rate_schedule_and_a_short_last_batch(tmp_path):
    from torchax import train

    name = "torchax_train.py"
    run = runs.traced_jax_script(tmp_path, name, "--samples", "72", "--batch", "16", "--warmup", "2")
    assert run.status == 0, run.stderr[-3000:]
    (o,) = run.oracle.values()
    found = jax_log.check(o["jax_log"], _rows(run.report), run.report["ranks"][0])
    (fn,) = run.report["functions"]
    assert fn["name"] == "make_train_step.<locals>.step" and fn["calls"] == 5  # ceil(72 / 16)
    assert fn["compiles"] == jax_log.counts(o["jax_log"])["jit(call_torch)"] == 3
    # The step's own parameters name JAX's positions: step(weights, buffers, opt_state, args, label).
    step = train.make_train_step(lambda *a: None, lambda *a: None, None)
    params = list(inspect.signature(step).parameters)
    jitted = {r["k"]: r for r in _rows(run.report) if not r["eager"]}
    by_call = {a["call"]: (a, jitted[a["k"]]) for a in found}
    # warmup's Python floats, then numpy's float64: a weak-typed scalar becomes a strong one
    a, row = by_call[3]
    (change,) = row["changed"]
    ((jax_name, now, before),) = a["jax"][0]
    assert jax_name == "args[2].hyperparams['learning_rate']" and change["jax_name"] == jax_name
    assert change["name"] == f"{params[2]}.hyperparams['learning_rate']" and change["role"] == "optimizer_state"
    assert "weak_type=True" in before and "weak_type=False" in now
    # the DataLoader's short last batch: args[3][0] is the batch, args[4] the label
    a, row = by_call[5]
    assert {n for n, _, _ in a["jax"][0]} == {"args[3][0]", "args[4]"}
    assert {c["name"] for c in row["changed"]} == {f"{params[3]}[0]", params[4]}
    assert "drop_last" in row["advice"]


def test_a_momentum_state_created_at_the_first_step_traced_by_the_variable_alone(tmp_path):
    name = "torchax_train_sgd.py"
    proc, report, oracle = runs.env_traced_jax_script(tmp_path, name, "--steps", "4")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "final loss" in proc.stdout  # the script's own output passes through
    log = oracle["jax_log"]
    found = jax_log.check(log, report["compiles"], report["ranks"][0])
    # JAX: two compiles of the step, the second a pytree change at args[2] (momentum_buffers).
    assert jax_log.counts(log)["jit(call_torch)"] == 2
    assert [a["kind"] for a in found] == ["new", "pytree"] and found[1]["jax"] == ["args[2]"]
    (fn,) = report["functions"]
    assert fn["name"] == "main.<locals>.sgd_step" and fn["calls"] == 4 and fn["compiles"] == 2
    second = next(r for r in report["compiles"] if r["k"] == found[1]["k"])
    (change,) = second["changed"]
    assert change["name"] == "momentum_buffers" and change["what"] == "structure"
    assert second["trigger"]["site"].endswith(f"{name}:{runs.line_of(name, '= step_fn(')}")
    assert second["advice"]
    # the batch drawn outside the step runs op by op, at the user's line
    randn = f"{name}:{runs.line_of(name, 'torch.randn(args.batch')}"
    (group,) = [g for g in report["op_by_op"] if g["site"].endswith(randn)]
    assert group["op"] == "torch.randn" and group["executions"] == 4


def test_two_jax_processes_one_rank_file_each_and_where_they_diverge(tmp_path):
    name = "torchax_two_procs.py"
    argv = [runs.ORACLE, runs.script(name), "--coordinator", f"127.0.0.1:{_free_port()}", "--steps", "4",
            "--diverge-process", "1", "--diverge-step", "3"]
    proc = " ".join([sys.executable, *argv])
    command = ["sh", "-c", f"{proc} --process-id 0 & {proc} --process-id 1; status=$?; wait $! || exit 1; exit $status"]
    run = runs.traced_jax_script(tmp_path, name, command=command, timeout=400)
    assert run.status == 0, run.stderr[-3000:]
    # one rank file per JAX process, named by what jax.process_index() answers in that process
    files = sorted(os.listdir(run.dir))
    assert [f for f in files if f.endswith(".jsonl")] == ["rank-0.jsonl", "rank-1.jsonl"]
    assert sorted(run.oracle) == [0, 1]
    assert all(run.oracle[r]["jax_process_index"] == r for r in (0, 1)), run.oracle
    found = {r: jax_log.check(run.oracle[r]["jax_log"], _rows(run.report, r), run.rank(r)) for r in (0, 1)}
    # JAX: process 0 compiles the forward once; process 1 again for each longer request.
    counts = {r: jax_log.counts(run.oracle[r]["jax_log"])["jit(call_torch)"] for r in (0, 1)}
    assert counts == {0: 1, 1: 3}
    div = run.report["divergence"]
    assert div["world_size"] == 2 and div["ranks_that_differ"] == [1]
    assert div["first_step"] == found[1][1]["call"]  # the call of process 1's first compile process 0 has not
    (detail,) = div["details"]
    ((jax_name, now, before),) = found[1][1]["jax"][0]
    (change,) = detail["differences"]
    assert (change["jax_name"], change["now"], change["before"]) == (jax_name, now, before)
    assert change["name"] == "ids"  # Tagger.forward(self, ids)
    expected = f"ranks diverge at call {div['first_step']} of Tagger.forward: rank 1 runs other graphs"
    assert any(line.strip() == expected for line in run.report["summary"]), run.report["summary"]
