"""A forward pass of every zoo model under torch.compile(backend="openxla") (inference, as
users serve: torch.no_grad()), each figure checked against Dynamo's counters, torch's structured
trace, torch._dynamo.explain and torch_xla's metrics."""


import pytest
import torch
import torch._dynamo
import torch_xla
import torch_xla.debug.metrics as met

from tests import zoo
from torch_xla_ext import graph_breaks as gb

from tests.graph_breaks import oracles
from tests.graph_breaks import on_xla

DEVICE = torch_xla.device()


@pytest.mark.parametrize("name", zoo.NAMES)
def test_forward_figures_equal_torch_and_torch_xla_records(name):
    torch._dynamo.reset()
    model, args, kwargs = zoo.build(name)
    model = model.to(DEVICE)
    args = tuple(a.to(DEVICE) for a in args)
    kwargs = {k: v.to(DEVICE) for k, v in kwargs.items()}
    torch_xla.sync()

    def forward(*a, **kw):
        with torch.no_grad():
            return model(*a, **kw)

    compiled = torch.compile(forward, backend="openxla")
    c0 = (met.metric_data("CompileTime") or (0,))[0]
    with oracles.DynamoCounters() as dc, oracles.TraceLog() as tl, gb.account() as ledger:
        for _ in range(2):
            out = compiled(*args, **kwargs)
            torch_xla.sync()
            ledger.step()
        torch_xla._XLAC._xla_wait_device_ops([])
    r = ledger.report()
    assert r.dynamo_compiles == len(tl.compile_ids)
    assert r.fx_graphs == dc.delta["unique_graphs"] == tl.kinds["dynamo_output_graph"]
    # Two figures, two records (report.BREAK_FIGURES): Dynamo's counter, and the breaks it logs. On
    # an MoE they differ upstream (torch 2.9 logs a break nested in an inlined call again in the
    # enclosing frames, and a split at ModuleList[tensor] it does not count).
    assert r.num_counted_breaks == dc.delta["graph_breaks"]
    assert r.num_fx_breaks == tl.kinds["artifact:dynamo_graph_break_reason"]
    if zoo.MODELS[name].data_dependent is not None:
        assert r.num_fx_breaks > r.num_counted_breaks > 0
    assert r.aot_graphs == tl.aot and r.aot_graphs.get("backward", 0) == 0  # no_grad: inference graphs
    assert r.compiles == (met.metric_data("CompileTime") or (0,))[0] - c0
    assert all(op.startswith("aten::") for op in r.fallback_nodes)
    assert r.steps == 2
    assert zoo.primary_output(out).device.type == "xla"
    graphs, ended = oracles.explain(forward, *args, **kwargs)
    assert (r.fx_graphs, r.graphs_ended_by_break) == (graphs, ended)


def test_a_split_inherited_from_an_inlined_call_is_named_by_its_cause():
    """GPT-2 with `labels`: transformers' loss_function logs a warning, which Dynamo cannot trace.
    In GPT-2's forward frame that becomes a split at the loss_function call whose reason says only
    "step_unsupported", and Dynamo neither logs nor counts it. The ledger lists it under the
    logger break that caused it, with the call it split at, and keeps it out of the break count
    so that count stays Dynamo's."""
    torch._dynamo.reset()
    loss, args, kwargs = on_xla.gpt2_loss()
    compiled = torch.compile(loss, backend="openxla")
    with oracles.DynamoCounters() as dc, oracles.TraceLog() as tl, gb.account() as ledger:
        out = compiled(*args, **kwargs)
        torch_xla.sync()
    r = ledger.report()
    assert out.dim() == 0
    assert r.num_fx_breaks == dc.delta["graph_breaks"]
    assert r.num_fx_breaks == tl.kinds["artifact:dynamo_graph_break_reason"]
    graphs, ended = oracles.explain(loss, *args, **kwargs)
    assert (r.fx_graphs, r.graphs_ended_by_break) == (graphs, ended) == (dc.delta["unique_graphs"], ended)
    assert r.num_inherited_splits >= 1
    inherited = [b for b in r.fx_breaks if b["inherited"]]
    assert all(b["gb_type"] != "step_unsupported" for b in r.fx_breaks)
    assert all("Logger" in b["gb_type"] and b["count"] > b["inherited"] for b in inherited)
    assert all(at.endswith(f"modeling_gpt2.py:{at.rsplit(':', 1)[1]}") for b in inherited for at in b["split_at"])
    assert sum(b["count"] for b in r.fx_breaks) == r.num_fx_breaks + r.num_inherited_splits
    assert "inherited" in r.to_markdown()
