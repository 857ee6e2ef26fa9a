"""account() on real torch_xla (PJRT CPU): exact counts for the example model's five variants in
lazy and dynamo mode, measured from torch_xla 2.9.0, plus recompiles, result invariance, counter
clears and the native hooks.

Each case uses its own layer width, so no case hits another's XLA compile cache."""

import inspect

import pytest
import torch
import torch_xla

import torch_xla.debug.metrics as met
from torch_xla_ext import graph_breaks as gb
from torch_xla_ext._ext import graph_breaks as _core

DEVICE = torch_xla.device()
LSD, DIG = "aten::_local_scalar_dense", "aten::digamma"

# (print, data-dependent if, digamma)
MODELS = {
    "a_print": (True, False, False),
    "b_if": (False, True, False),
    "c_digamma": (False, False, True),
    "d_all": (True, True, True),
    "e_none": (False, False, False),
}

# fields: fx_graphs, fx breaks, xla_partitions, compiles, cached_compiles, executions,
# transfers_to_host, syncs, forced_executions, fallback_nodes, fallback_ops
FIELDS = ("fx_graphs", "num_fx_breaks", "xla_partitions", "compiles", "cached_compiles", "executions",
          "transfers_to_host", "syncs", "forced_executions", "fallback_nodes", "fallback_ops")
Z = (0, 0, 0)
# First step (compiles happen here), then 3 steady steps.
EXPECTED = {
    ("a_print", "lazy"): ((*Z, 1, 0, 1, 0, 1, 0, {}, {}), (*Z, 0, 3, 3, 0, 3, 0, {}, {})),
    ("a_print", "dynamo"): ((2, 1, 2, 2, 0, 2, 0, 4, 0, {}, {}), (*Z, 0, 0, 6, 0, 0, 0, {}, {})),
    ("b_if", "lazy"): ((*Z, 2, 0, 2, 1, 1, 1, {}, {LSD: 1}), (*Z, 0, 6, 6, 3, 3, 3, {}, {LSD: 3})),
    ("b_if", "dynamo"): ((2, 1, 2, 2, 0, 2, 1, 4, 0, {}, {LSD: 1}), (*Z, 0, 0, 6, 3, 0, 0, {}, {LSD: 3})),
    ("c_digamma", "lazy"): ((*Z, 2, 0, 2, 1, 1, 1, {}, {DIG: 1}), (*Z, 0, 6, 6, 3, 3, 3, {}, {DIG: 3})),
    ("c_digamma", "dynamo"): ((1, 0, 2, 3, 1, 4, 3, 3, 2, {DIG: 1}, {DIG: 3}), (*Z, 0, 0, 6, 3, 0, 0, {}, {DIG: 3})),
    ("d_all", "lazy"): ((*Z, 3, 0, 3, 2, 1, 2, {}, {LSD: 1, DIG: 1}), (*Z, 0, 9, 9, 6, 3, 6, {}, {LSD: 3, DIG: 3})),
    ("d_all", "dynamo"): ((3, 2, 4, 5, 1, 6, 4, 7, 2, {DIG: 1}, {LSD: 1, DIG: 3}),
                          (*Z, 0, 0, 12, 6, 0, 0, {}, {LSD: 3, DIG: 3})),
    ("e_none", "lazy"): ((*Z, 1, 0, 1, 0, 1, 0, {}, {}), (*Z, 0, 3, 3, 0, 3, 0, {}, {})),
    ("e_none", "dynamo"): ((1, 0, 1, 1, 0, 1, 0, 2, 0, {}, {}), (*Z, 0, 0, 3, 0, 0, 0, {}, {})),
}
CASES = list(EXPECTED)


def make(name, mode, width, batch=4):
    torch._dynamo.reset()
    model = gb.example_model(*MODELS[name], width=width).to(DEVICE)
    x = gb.example_inputs(batch=batch, width=width)[0].to(DEVICE)
    torch_xla.sync()
    fn = torch.compile(model, backend="openxla") if mode == "dynamo" else model

    def step(inp=x):
        y = fn(inp)
        if mode == "lazy":
            torch_xla.sync()
        return y

    return step


def observed(report):
    d = report.to_dict()
    return tuple(d[f] for f in FIELDS)


def source_line(text):
    lines, start = inspect.getsourcelines(gb.example_model)
    return start + next(i for i, ln in enumerate(lines) if text in ln)


@pytest.mark.parametrize("case", CASES, ids=[f"{n}-{m}" for n, m in CASES])
def test_exact_counts(case):
    name, mode = case
    step = make(name, mode, width=20 + CASES.index(case))
    with gb.account() as first:
        step()
    with gb.account() as steady:
        for _ in range(3):
            step()
    want_first, want_steady = EXPECTED[case]
    assert dict(zip(FIELDS, observed(first.report()))) == dict(zip(FIELDS, want_first))
    assert dict(zip(FIELDS, observed(steady.report()))) == dict(zip(FIELDS, want_steady))
    assert first.report().recompiles == 0 and steady.report().recompiles == 0


def test_breaks_name_reason_and_user_frame():
    step = make("d_all", "dynamo", width=40)
    with gb.account() as ledger:
        step()
    r = ledger.report()
    frames = {b["frame"]: b["reason"] for b in r.fx_breaks}
    file = inspect.getsourcefile(gb.example_model)
    print_frame = f"{file}:{source_line('print(')}"
    if_frame = f"{file}:{source_line('if h.sum() > 0')}"
    assert set(frames) == {print_frame, if_frame}
    assert "print" in frames[print_frame]
    assert "generic_jump" in frames[if_frame]  # Dynamo's name for a data-dependent jump
    # Per FX graph: the third holds digamma, split into two XLA partitions around it.
    assert [(g["partitions"], g["fallback_nodes"]) for g in r.graphs] == [(1, []), (1, []), (2, [DIG])]
    # Per graph hash (the bridge's cached graphs): 4 partitions compiled and executed once each.
    assert len(r.per_graph_hash) == 4
    assert all(h["executions"] == 1 and h["compiles"] == 1 for h in r.per_graph_hash.values())


def test_shape_change_counts_as_recompile():
    step = make("e_none", "dynamo", width=41)
    step()
    with gb.account() as ledger:
        step(gb.example_inputs(batch=8, width=41)[0].to(DEVICE))
    r = ledger.report()
    assert r.recompiles == 1
    assert "size mismatch" in r.recompile_reasons[0]["reason"]
    assert r.fx_graphs == 1 and r.compiles == 1
    # Lazy mode: the new shape is a new XLA graph, one uncached compile.
    lazy = make("e_none", "lazy", width=42)
    lazy()
    with gb.account() as ledger:
        lazy(gb.example_inputs(batch=8, width=42)[0].to(DEVICE))
    assert (ledger.report().compiles, ledger.report().cached_compiles) == (1, 0)


@pytest.mark.parametrize("mode", ["lazy", "dynamo"])
def test_accounting_does_not_change_results(mode):
    plain = make("d_all", mode, width=43)
    outs_plain = [plain().cpu() for _ in range(3)]
    accounted = make("d_all", mode, width=43)
    with gb.account():
        outs_acc = [accounted().cpu() for _ in range(3)]
    for a, b in zip(outs_plain, outs_acc):
        assert torch.equal(a, b)
    eager = gb.example_model(True, True, True, width=43)(gb.example_inputs(width=43)[0])
    torch.testing.assert_close(outs_acc[0], eager, rtol=1e-5, atol=1e-5)


def test_counts_survive_counter_clears():
    step = make("e_none", "lazy", width=44)
    step()
    with gb.account() as ledger:
        step()
        met.clear_counters()
        step()
    r = ledger.report()
    assert (r.cached_compiles, r.executions, r.syncs) == (2, 2, 2)
    assert met.clear_counters is not None and torch_xla._XLAC._clear_xla_counters.__name__ == "_clear_xla_counters"


def test_native_hooks_land_in_the_region_only():
    _core.on_fallback_op("aten::outside")
    with gb.account() as ledger:
        assert _core.hooks_enabled()
        _core.on_fallback_op("aten::my_op")
        _core.on_graph_break("custom lowering gave up", "lowering.cc", 7)
    assert not _core.hooks_enabled()
    assert ledger.report().native_hooks == {"fallback_op": 1, "graph_break": 1}


def test_report_json_markdown_and_events():
    step = make("d_all", "dynamo", width=45)
    with gb.account() as ledger:
        step()
        partial = ledger.report()
    r = ledger.report()
    assert partial.fx_graphs == 3
    back = gb.GraphBreakReport.from_dict(__import__("json").loads(r.to_json()))
    assert back == r
    md = r.to_markdown()
    assert "| FX graphs (Dynamo) | 3 |" in md and "| XLA partitions (bridge) | 4 |" in md and "`aten::digamma`" in md
    kinds = [e["kind"] for e in ledger.recent_events()]
    assert kinds.count("fx_graph") == 3 and kinds.count("xla_partition") == 4 and kinds.count("graph_break") == 2
    assert r.wall_ms > 0 and r.compile_ms > 0


def test_errors_name_the_argument():
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
    assert issubclass(gb.GraphBreakError, ValueError)


def test_nested_regions_each_count_their_own_syncs_and_unwrap_at_the_end():
    step = make("e_none", "lazy", width=46)
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
    # Each sync is an event keyed by the graphs it launched (1 here), with its duration.
    syncs = [e for e in inner.recent_events() if e["kind"] == "sync"]
    assert [e["key"] for e in syncs] == ["1", "1"] and all(e["duration_ns"] > 0 for e in syncs)


def test_int_only_record_path_checks_its_arguments():
    ledger = _core.Ledger(ring_capacity=8)
    key = ledger.intern("graph-7")
    assert ledger.intern("graph-7") == key and ledger.lookup(key) == "graph-7"
    ledger.record_ids(int(_core.Kind.execute), int(_core.Stage.bridge), key, 250, 2)
    assert ledger.counts()["execute"] == 2 and ledger.totals_ns()["execute"] == 250
    assert ledger.recent_events()[-1]["key"] == "graph-7"
    with pytest.raises(ValueError, match="kind"):
        ledger.record_ids(99, 0, key, 0, 1)
    with pytest.raises(ValueError, match="stage"):
        ledger.record_ids(0, -1, key, 0, 1)
    with pytest.raises(ValueError, match="not an id from intern"):
        ledger.record_ids(0, 0, key + 1000, 0, 1)
    assert ledger.counts()["execute"] == 2
