"""The Chrome/Perfetto trace (`write_trace`, `--trace`) read as a trace processor reads it.

Perfetto's own trace processor is not usable here: the registry's `perfetto` package (0.59.1)
installs, but `TraceProcessor` downloads `trace_processor_shell` at first use, which fails on a
machine that reaches only the package registries, and no registry package ships that binary.
So this test reads the Trace Event Format itself, field by field as the format specifies it
(what Perfetto's JSON importer and chrome://tracing accept: `ph`, `name`, `pid`, `tid`, `ts`,
`dur`, `s`, metadata events naming processes and threads, complete events nesting on a thread),
builds the slice table a trace processor would, and queries slices by name and compile id.

Oracle for the compile ids: Dynamo's own `dynamo_start` records in torch's structured trace
(`oracles.TraceLog`), not our report; for executions, the run's design (each XLA graph runs once
per step)."""

import json
import os

import pytest
import torch
import torch_xla

from torch_xla_ext import graph_breaks as gb

from tests.graph_breaks import oracles

STEPS = 3
_PH = {"X", "i", "M"}  # what write_trace emits: complete, instant and metadata events
_META = {"process_name": "name", "process_sort_index": "sort_index", "thread_name": "name",
         "thread_sort_index": "sort_index"}


def _num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def slices_of(trace):
    """Validates a Trace Event Format object field by field; returns the slice table (complete
    and instant events with their process and thread names resolved)."""
    assert isinstance(trace, dict) and isinstance(trace["traceEvents"], list)
    assert trace.get("displayTimeUnit", "ms") in ("ms", "ns")
    json.dumps(trace)  # plain JSON, nothing Python-only
    procs, threads, rows = {}, {}, []
    for i, e in enumerate(trace["traceEvents"]):
        where = f"traceEvents[{i}]"
        assert e["ph"] in _PH, where
        assert isinstance(e["name"], str) and e["name"], where
        assert isinstance(e["pid"], int) and not isinstance(e["pid"], bool), where
        assert isinstance(e.get("args", {}), dict), where
        if e["ph"] == "M":
            assert e["name"] in _META and _META[e["name"]] in e["args"], where
            if e["name"] == "process_name":
                assert isinstance(e["args"]["name"], str)
                procs[e["pid"]] = e["args"]["name"]
            elif e["name"] == "thread_name":
                assert isinstance(e["tid"], int)
                threads[(e["pid"], e["tid"])] = e["args"]["name"]
            continue
        assert isinstance(e["tid"], int) and _num(e["ts"]) and e["ts"] >= 0, where
        assert isinstance(e.get("cat", ""), str), where
        if e["ph"] == "X":
            assert _num(e["dur"]) and e["dur"] > 0, where
        else:
            assert e["s"] in ("g", "p", "t") and "dur" not in e, where
        rows.append(dict(e, dur=e.get("dur", 0)))
    for r in rows:  # every slice's process and thread are named
        r["process"], r["thread"] = procs[r["pid"]], threads[(r["pid"], r["tid"])]
    # Complete events on one thread must nest (a trace processor rejects overlapping ones).
    by_thread = {}
    for r in rows:
        if r["ph"] == "X":
            by_thread.setdefault((r["pid"], r["tid"]), []).append(r)
    for key, evs in by_thread.items():
        stack = []
        for r in sorted(evs, key=lambda r: (r["ts"], -r["dur"])):
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= r["ts"] + 1e-3:
                stack.pop()
            if stack:
                outer = stack[-1]
                assert r["ts"] + r["dur"] <= outer["ts"] + outer["dur"] + 1e-3, \
                    f"{r['name']} overlaps {outer['name']} on thread {threads[key]}"
            stack.append(r)
    return rows


def query(rows, name_prefix=None, compile_id=None, thread=None):
    return [r for r in rows if (name_prefix is None or r["name"].startswith(name_prefix))
            and (compile_id is None or r["args"].get("compile_id") == compile_id)
            and (thread is None or r["thread"] == thread)]


def test_trace_slices_by_name_and_compile_id(tmp_path):
    torch._dynamo.reset()
    dev = torch_xla.device()
    model = gb.example_model(True, True, True, width=24).to(dev)
    x = gb.example_inputs(batch=4, width=24)[0].to(dev)
    torch_xla.sync()
    fn = torch.compile(model, backend="openxla")
    with oracles.TraceLog() as log, gb.account() as ledger:
        for _ in range(STEPS):
            fn(x)
            torch_xla.sync()
            ledger.step()
    dynamo_cids = {f"{f}/{c}" for f, c in log.compile_ids}
    assert len(dynamo_cids) >= 2  # the print and the if split the forward
    report = ledger.report()
    path = gb.write_trace(str(tmp_path / "t.json"), report)
    rows = slices_of(json.loads(open(path).read()))
    assert {r["process"].split(" (")[0] for r in rows} == {f"rank {report.rank.get('rank', 0)}"}

    compile_slices = query(rows, thread="dynamo compile")
    assert {r["args"]["compile_id"] for r in compile_slices} == dynamo_cids
    run_cids = set()
    for cid in dynamo_cids:
        (one,) = query(rows, name_prefix=f"[{cid}] ", thread="dynamo compile")
        assert one["args"]["compile_id"] == cid and one["ph"] == "X"
        extracts = query(rows, name_prefix="extract ", compile_id=cid, thread="bridge")
        runs = query(rows, name_prefix="run ", compile_id=cid)
        if runs:
            run_cids.add(cid)
            hashes = {r["args"]["graph_hash"] for r in runs}
            assert len(runs) == STEPS * len(hashes)  # each XLA graph of the compile once per step
            assert extracts, cid
            for h in hashes:  # the graph was compiled, and the compile slice says for which compile id
                assert query(rows, name_prefix=f"compile {h[:12]}", compile_id=cid), (cid, h)
    # Every compile id that handed a graph to the backend shows its executions.
    assert run_cids == {g["compile_id"] for c in report.joined for g in c["graphs"] if g["aot"]} and run_cids
    # The CPU fallback is on the bridge's track.
    assert query(rows, name_prefix="fallback node aten::digamma", thread="bridge")
    # The same ledger's artifacts reached torch's trace stream (what tlparse reads), one per compile id.
    assert log.kinds["artifact:torch_xla_ext_xla_graphs"] == len(dynamo_cids)
    assert log.kinds["artifact:torch_xla_ext_graph_breaks_summary"] == 1


def test_account_torch_trace_true_needs_a_trace_file():
    assert "TORCH_TRACE" not in os.environ  # this process writes no structured trace file
    with pytest.raises(gb.GraphBreakError, match="TORCH_TRACE"):
        gb.account(torch_trace=True).__enter__()
    with gb.account(torch_trace=False) as ledger:  # asked for none, a region writes none
        pass
    assert ledger.tlparse_compile_ids == []


def test_artifact_records_carry_the_compile_id_and_unparsable_ids_stay_in_the_summary():
    import logging

    from torch._logging._internal import trace_log

    from torch_xla_ext.graph_breaks import tlparse

    got = []

    class Listener(logging.Handler):
        def emit(self, record):
            got.append((record.metadata, record.payload))

    def compile_entry(cid):
        return {"compile_id": cid, "name": "f", "frame": "m.py:1", "ms": 1.0, "error": None,
                "recompile_reason": None, "breaks": [], "graphs": []}

    listener = Listener()
    trace_log.addHandler(listener)
    try:
        # torch's LazyTraceHandler without TORCH_TRACE removes itself at the first record, which
        # makes logging skip the next handler for that record: let it go first.
        torch._logging.trace_structured("artifact", metadata_fn=lambda: {"name": "warm", "encoding": "string"},
                                        payload_fn=lambda: "", expect_trace_id=False)
        got.clear()
        report = gb.GraphBreakReport(rank={"rank": 0}, joined=[compile_entry("3/1"), compile_entry("not-an-id")])
        assert tlparse.emit(report) == ["3/1"]
    finally:
        trace_log.removeHandler(listener)
    (per_compile,) = [(m, p) for m, p in got if m["artifact"]["name"] == tlparse.COMPILE_ARTIFACT]
    assert (per_compile[0]["frame_id"], per_compile[0]["frame_compile_id"]) == (3, 1)  # torch's own fields
    (summary,) = [json.loads(p) for m, p in got if m["artifact"]["name"] == tlparse.SUMMARY_ARTIFACT]
    assert summary["compile_ids"] == ["3/1"] and set(summary["unplaced"]) == {"not-an-id"}


def test_overlapping_slices_go_on_a_further_lane_of_their_thread():
    """torch_xla executes asynchronously: one graph's execution can start before the previous one
    has ended (a CI run saw execute [2083536.192, +1019.072] and [2084321.212, +264.516] on one
    thread). Such slices must land on a second lane, nesting ones stay, nothing is lost."""
    from torch_xla_ext._chrome_trace import nest_on_threads

    meta = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "rank 0"}},
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "xla execute"}},
            {"ph": "M", "name": "thread_sort_index", "pid": 1, "tid": 1, "args": {"sort_index": 1}},
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "dynamo compile"}}]
    slices = [("execute", 1, 2083536.192, 1019.072), ("execute", 1, 2084321.212, 264.516),
              ("execute", 1, 2084400.0, 100.0), ("execute", 1, 2084600.0, 10.0),
              ("frame", 2, 10.0, 50.0), ("inner", 2, 20.0, 5.0), ("next", 2, 60.0, 5.0)]
    events = meta + [{"ph": "X", "name": n, "pid": 1, "tid": t, "ts": ts, "dur": d} for n, t, ts, d in slices]
    events.append({"ph": "i", "s": "t", "name": "mark", "pid": 1, "tid": 1, "ts": 2084321.5})
    with pytest.raises(AssertionError, match="overlaps"):
        slices_of({"traceEvents": events})  # the validator rejects what we were writing
    rows = slices_of({"traceEvents": nest_on_threads(events)})
    # Every slice is still there, unchanged but for its lane.
    assert sorted((r["name"], r["ts"], r["dur"]) for r in rows if r["ph"] == "X") == sorted(
        (n, ts, d) for n, _, ts, d in slices)
    lane = {(r["name"], r["ts"]): r["thread"] for r in rows}
    assert lane[("execute", 2083536.192)] == "xla execute"
    assert lane[("execute", 2084321.212)] == "xla execute (2)"
    assert lane[("execute", 2084400.0)] == "xla execute"  # nests in the first: the first lane takes it
    assert lane[("execute", 2084600.0)] == "xla execute"  # after the first ended: back on the first lane
    assert {lane[(n, ts)] for n, t, ts, _ in slices if t == 2} == {"dynamo compile"}  # nesting kept
    assert lane[("mark", 2084321.5)] == "xla execute"
