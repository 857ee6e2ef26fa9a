"""account() on real torch_xla (PJRT CPU) over the example model's variants, forward passes in
lazy and dynamo mode, each figure checked against what torch and torch_xla record themselves:
Dynamo's counters, torch's structured trace, torch._dynamo.explain, torch_xla's metrics, and
torch's graph-break registry for the GB ids.

Each case uses its own layer width, so no case hits another's XLA compile cache."""

import inspect
import json
import os

import pytest
import torch
import torch._dynamo
import torch_xla
import torch_xla.debug.metrics as met

from torch_xla_ext import errors
from torch_xla_ext import graph_breaks as gb
from torch_xla_ext._ext import graph_breaks as _core

from tests.graph_breaks import oracles

DEVICE = torch_xla.device()
VARIANTS = {  # (print, data-dependent if, digamma)
    "print": (True, False, False),
    "if": (False, True, False),
    "digamma": (False, False, True),
    "all": (True, True, True),
    "none": (False, False, False),
}
REGISTRY = json.load(open(os.path.join(os.path.dirname(torch._dynamo.__file__), "graph_break_registry.json")))
GB_IDS = {e["Gb_type"]: k for k, v in REGISTRY.items() for e in v}


def make(name, mode, width, batch=4):
    torch._dynamo.reset()
    model = gb.example_model(*VARIANTS[name], width=width).to(DEVICE)
    x = gb.example_inputs(batch=batch, width=width)[0].to(DEVICE)
    torch_xla.sync()
    fn = torch.compile(model, backend="openxla") if mode == "dynamo" else model

    def step(inp=x):
        y = fn(inp)
        if mode == "lazy":
            torch_xla.sync()
        return y

    return step, model, x


class XlaMetrics:
    """torch_xla's metric sample counts over a region (metrics survive counter clears)."""

    NAMES = ("CompileTime", "ExecuteTime", "TransferFromDeviceTime")

    def __enter__(self):
        torch_xla._XLAC._xla_wait_device_ops([])
        self._start = {n: (met.metric_data(n) or (0,))[0] for n in self.NAMES}
        self._mark = oracles.xla_counter("MarkStep")
        return self

    def __exit__(self, *exc):
        torch_xla._XLAC._xla_wait_device_ops([])
        self.delta = {n: (met.metric_data(n) or (0,))[0] - self._start[n] for n in self.NAMES}
        self.syncs = oracles.xla_counter("MarkStep") - self._mark


def source_line(text):
    lines, start = inspect.getsourcelines(gb.example_model)
    return start + next(i for i, ln in enumerate(lines) if text in ln)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_dynamo_figures_equal_torch_and_torch_xla_records(name):
    step, model, x = make(name, "dynamo", width=20 + list(VARIANTS).index(name))
    with oracles.DynamoCounters() as dc, oracles.TraceLog() as tl, XlaMetrics() as xm, gb.account() as first:
        step()
    with XlaMetrics() as xm_steady, gb.account() as steady:
        for _ in range(3):
            step()
            steady.step()
    r = first.report()
    # Dynamo: compile ids, graphs handed to the backend, breaks (data-dependent jumps are not in
    # counters['graph_break'], but torch logs every break it takes as a structured artifact).
    assert r.dynamo_compiles == len(tl.compile_ids)
    assert r.fx_graphs == dc.delta["unique_graphs"] == tl.kinds["dynamo_output_graph"]
    assert r.num_fx_breaks == tl.kinds["artifact:dynamo_graph_break_reason"]
    assert sum(b["count"] for b in r.fx_breaks if b["gb_type"] != "Data-dependent branching") == \
        dc.delta["graph_breaks"]
    # AOTAutograd: every Dynamo graph went through it. Its forward graphs reach the backend at
    # compile time; the backward graphs it traced alongside are compiled lazily, at the first
    # backward pass, which a forward pass never runs.
    assert dc.delta["aot_autograd"] == r.fx_graphs
    assert (r.aot_graphs.get("forward"), r.aot_graphs.get("inference")) == (tl.aot.get("forward"), tl.aot.get("inference"))
    assert r.aot_graphs.get("backward", 0) == 0 < tl.aot.get("backward", 0)
    # XLA: torch_xla's own metric samples (its counters are cleared by the bridge meanwhile).
    assert (r.compiles, r.executions, r.transfers_to_host) == (
        xm.delta["CompileTime"], xm.delta["ExecuteTime"], xm.delta["TransferFromDeviceTime"])
    s = steady.report()
    assert (s.fx_graphs, s.compiles, s.recompiles, s.dynamo_compiles) == (0, 0, 0, 0)
    assert s.executions == xm_steady.delta["ExecuteTime"] and s.steps == 3
    # Each XLA partition runs once per step.
    assert all(h["executions"] == 3 for h in s.per_graph_hash.values())
    assert len(s.per_graph_hash) == r.xla_partitions
    # explain() on the same model (its own Dynamo pass): graphs, and graphs that a break ended.
    graphs, ended = oracles.explain(model, x)
    assert (r.fx_graphs, r.graphs_ended_by_break) == (graphs, ended)


def test_breaks_carry_dynamos_structured_record_and_the_user_frame():
    step, _, _ = make("all", "dynamo", width=40)
    with gb.account() as ledger:
        step()
    r = ledger.report()
    file = inspect.getsourcefile(gb.example_model)
    by_frame = {b["frame"]: b for b in r.fx_breaks}
    assert set(by_frame) == {f"{file}:{source_line('print(')}", f"{file}:{source_line('if h.sum() > 0')}"}
    jump = by_frame[f"{file}:{source_line('if h.sum() > 0')}"]
    assert jump["gb_type"] == "Data-dependent branching"
    assert jump["dynamo_reason"].startswith("generic_jump")  # what GraphCompileReason alone says
    for b in r.fx_breaks:
        assert b["gb_id"] == GB_IDS[b["gb_type"]]  # torch's own registry
        assert b["explanation"] and b["hints"] and b["count"] == 1 and "forward" in b["function"]
    # The joined view: three Dynamo graphs; the bridge splits the third around digamma.
    graphs = [g for c in r.joined for g in c["graphs"]]
    assert [g["ended_by"] is not None for g in graphs] == [True, True, False]
    bridge = [br for g in graphs for a in g["aot"] for br in a["bridge"]]
    assert [(len(br["partitions"]), br["fallback_nodes"]) for br in bridge] == [(1, []), (1, []), (2, ["aten::digamma"])]
    hashes = {p["graph_hash"] for br in bridge for p in br["partitions"]}
    assert hashes == set(r.per_graph_hash) and all(r.per_graph_hash[h]["compiles"] == 1 for h in hashes)


def test_fallback_nodes_are_only_ops_torch_xla_fell_back_on():
    step, _, _ = make("digamma", "dynamo", width=41)
    met.clear_all()
    with gb.account() as ledger:
        step()
    r = ledger.report()
    assert r.fallback_nodes == {"aten::digamma": 1}
    assert set(r.fallback_nodes) <= set(met.executed_fallback_ops())
    # Nodes the bridge left to eager that are not ops (inputs, constants, outputs) are apart.
    assert all("::" not in k for k in r.eager_nodes)


@pytest.mark.parametrize("name", ["if", "digamma", "all", "none"])
def test_lazy_figures_equal_torch_xla_metrics(name):
    step, _, _ = make(name, "lazy", width=50 + list(VARIANTS).index(name))
    step()
    with XlaMetrics() as xm, gb.account() as ledger:
        for _ in range(3):
            step()
    r = ledger.report()
    assert (r.fx_graphs, r.xla_partitions, r.num_aot_graphs) == (0, 0, 0)
    assert (r.compiles, r.executions, r.transfers_to_host, r.syncs) == (
        xm.delta["CompileTime"], xm.delta["ExecuteTime"], xm.delta["TransferFromDeviceTime"], xm.syncs)
    # An execution outside a sync is forced by a host read: the `if`'s scalar, digamma's input.
    assert r.forced_executions == sum(r.fallback_ops.values()) == 3 * (VARIANTS[name][1] + VARIANTS[name][2])


def test_shape_change_is_a_recompile_with_its_failed_guard():
    step, _, _ = make("none", "dynamo", width=42)
    step()
    with oracles.TraceLog() as tl, gb.account() as ledger:
        step(gb.example_inputs(batch=8, width=42)[0].to(DEVICE))
    r = ledger.report()
    assert r.recompiles == sum(1 for _, n in tl.compile_ids if n and n > 0) == 1
    (row,) = r.recompile_reasons
    assert "size mismatch" in row["reason"] and row["compile_ids"] == [c["compile_id"] for c in r.joined]
    assert r.joined[0]["recompile_reason"] == row["reason"]


@pytest.mark.parametrize("mode", ["lazy", "dynamo"])
def test_accounting_does_not_change_results(mode):
    plain, _, _ = make("all", mode, width=43)
    outs_plain = [plain().cpu() for _ in range(3)]
    accounted, _, _ = make("all", mode, width=43)
    with gb.account():
        outs_acc = [accounted().cpu() for _ in range(3)]
    for a, b in zip(outs_plain, outs_acc):
        assert torch.equal(a, b)
    eager = gb.example_model(True, True, True, width=43)(gb.example_inputs(width=43)[0])
    torch.testing.assert_close(outs_acc[0], eager, rtol=1e-5, atol=1e-5)


def test_counts_survive_counter_clears():
    step, _, _ = make("none", "lazy", width=44)
    step()
    with XlaMetrics() as xm, gb.account() as ledger:
        step()
        met.clear_counters()
        step()
    r = ledger.report()
    assert (r.cached_compiles, r.executions, r.syncs) == (2, xm.delta["ExecuteTime"], 2)
    assert torch_xla._XLAC._clear_xla_counters.__name__ == "_clear_xla_counters"


def test_native_hooks_land_in_the_region_only():
    _core.on_fallback_op("aten::outside")
    with gb.account() as ledger:
        assert _core.hooks_enabled()
        _core.on_fallback_op("aten::my_op")
        _core.on_graph_break("custom lowering gave up", "lowering.cc", 7)
    assert not _core.hooks_enabled()
    assert ledger.report().native_hooks == {"fallback_op": 1, "graph_break": 1}


def test_report_round_trips_and_renders(tmp_path):
    step, _, _ = make("all", "dynamo", width=45)
    with gb.account() as ledger:
        step()
        partial = ledger.report()
        ledger.step()
    r = ledger.report()
    assert partial.fx_graphs == r.fx_graphs and r.steps == 1
    assert gb.load_report(r.save(str(tmp_path / "r{rank}.json"))) == r
    assert (tmp_path / f"r{r.rank['rank']}.json").is_file()
    md = r.to_markdown()
    assert f"| Dynamo graphs (handed to the backend) | {r.fx_graphs} |" in md and "GB0170" in md
    kinds = [e.kind.name for e in ledger.recent_events()]
    assert kinds.count("fx_graph") == r.fx_graphs and kinds.count("graph_break") == r.num_fx_breaks
    tracks = {ev["track"] for ev in r.timeline}
    assert {"dynamo compile", "bridge", "xla compile", "xla execute", "steps"} <= tracks
    assert all(ev["ts"] >= -1.0 and ev["ts"] <= r.wall_ms * 1e3 + 1e3 for ev in r.timeline)


def test_errors_name_the_argument_and_subclass_the_status_classes(tmp_path):
    with pytest.raises(gb.GraphBreakError, match="ring_capacity"):
        gb.account(ring_capacity=0)
    ledger = gb.account()
    with pytest.raises(gb.GraphBreakError, match="region has not started"):
        ledger.report()
    with ledger:
        pass
    with pytest.raises(gb.GraphBreakError, match="one region"):
        with ledger:
            pass
    assert issubclass(gb.GraphBreakError, errors.InvalidArgumentError)
    assert issubclass(gb.WorkerError, errors.InternalError)
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "torch_xla_ext.graph_breaks.report/2", "fx_graphs": "three"}')
    with pytest.raises(gb.GraphBreakError, match=r"bad.json: field 'fx_graphs' must be int"):
        gb.load_report(str(bad))
    with pytest.raises(FileNotFoundError, match="nope.json"):
        gb.load_report(str(tmp_path / "nope.json"))


def test_nested_regions_each_count_their_own_syncs_and_unwrap_at_the_end():
    step, _, _ = make("none", "lazy", width=46)
    step()
    marker = torch_xla._XLAC._xla_step_marker
    with gb.account() as outer:
        step()
        with gb.account() as inner:
            step()
            step()
        step()
        assert torch_xla._XLAC._xla_step_marker is not marker  # the outer region still wraps
    assert torch_xla._XLAC._xla_step_marker is marker
    assert (outer.report().syncs, inner.report().syncs) == (4, 2)
    assert (outer.report().forced_executions, inner.report().forced_executions) == (0, 0)
    # Each sync is an event keyed by the graphs it launched (1 here), with its duration and replica.
    syncs = [e for e in inner.recent_events() if e.kind == _core.Kind.sync]
    assert [e.key for e in syncs] == ["1", "1"] and all(e.duration_ns > 0 for e in syncs)
    assert {e.replica for e in syncs} == {0}


def test_int_only_record_path_checks_its_arguments():
    ledger = _core.Ledger(ring_capacity=8)
    key = ledger.intern("graph-7")
    assert ledger.intern("graph-7") == key and ledger.lookup(key) == "graph-7"
    ledger.record_ids(int(_core.Kind.execute), int(_core.Stage.bridge), key, 250, 2, replica=3)
    totals = ledger.totals()
    assert totals.count(_core.Kind.execute) == 2 and totals.total_ns(_core.Kind.execute) == 250
    assert totals.count(_core.Kind.sync) == 0 and ledger.count(_core.Kind.execute) == 2
    last = ledger.recent_events()[-1]
    assert isinstance(last, _core.Event) and (last.key, last.replica, last.stage) == ("graph-7", 3, _core.Stage.bridge)
    for bad, match in ((dict(kind=99), "kind"), (dict(stage=99), "stage"), (dict(key=10**6), "not an id"),
                       (dict(replica=-2), "replica")):
        args = dict(kind=int(_core.Kind.execute), stage=0, key=key, duration_ns=0, count=1)
        args.update(bad)
        with pytest.raises(ValueError, match=match):
            ledger.record_ids(**args)


def test_tap_forwards_calls_unchanged_and_records_per_replica():
    calls = []

    def original(graph_hash, inputs, *, flag=False):
        calls.append((graph_hash, inputs, flag))
        if inputs == "boom":
            raise RuntimeError("Failed to get computation by hash 12ab")
        return inputs * 2

    ledger = _core.Ledger()
    tap = _core.Tap(original, "execute", replica_fn=lambda: 5, on_error=_explain)
    stand_in = tap.stand_in()
    assert stand_in(b"\x0f\xa0", 21, flag=True) == 42  # nothing open: a plain call
    tap.set_ledgers([ledger])
    assert stand_in(b"\x0f\xa0", 4) == 8 and calls[-1] == (b"\x0f\xa0", 4, False)
    (row,) = [r for r in ledger.aggregates() if r.kind == _core.Kind.execute]
    assert isinstance(row, _core.Aggregate) and (row.key, row.replica, row.count) == ("0fa0", 5, 1)
    with pytest.raises(gb.WorkerError, match="explained") as info:
        stand_in(b"\x00", "boom")
    assert isinstance(info.value.__cause__, RuntimeError)
    tap_plain = _core.Tap(original, "execute").stand_in()
    with pytest.raises(RuntimeError, match="12ab"):
        tap_plain(b"\x00", "boom")
    with pytest.raises(ValueError, match="mode"):
        _core.Tap(original, "other")
    with pytest.raises(ValueError, match="counter_value"):
        _core.Tap(original, "sync")


def _explain(exc):
    if "computation by hash" in str(exc):
        raise gb.WorkerError("explained") from exc


def test_a_cycle_through_a_tap_and_its_stand_in_is_collected():
    """An object that keeps the stand-in it was patched with, and is the Tap's original: the
    cycle (stand-in -> Tap -> original -> stand-in) is freed by the garbage collector, and a
    stand-in called after its Tap was cleared raises instead of crashing."""
    import gc
    import weakref

    class Entry:  # a torch_xla entry point object that remembers its replacement
        def __call__(self, *args):
            return len(args)

    def cycle():
        original = Entry()
        tap = _core.Tap(original, "execute")
        original.replaced_by = tap.stand_in()
        assert original.replaced_by(b"\x01", 2) == 2
        return weakref.ref(original), weakref.ref(tap)

    gc.collect()
    original, tap = cycle()
    assert original() is not None  # only the cycle holds it
    gc.collect()
    assert original() is None and tap() is None
    # A Tap the collector cleared leaves a surviving stand-in that raises, not one that crashes.
    tap = _core.Tap(Entry(), "execute")
    stand_in = tap.stand_in()
    gc.get_referents(stand_in)  # the stand-in reports its Tap to the collector
    assert any(r is tap for r in gc.get_referents(stand_in))
