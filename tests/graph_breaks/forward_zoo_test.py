"""A forward pass of every zoo model under torch.compile(backend="openxla") (inference, as
users serve: torch.no_grad()), each figure checked against Dynamo's counters, torch's structured
trace, torch._dynamo.explain and torch_xla's metrics."""

import os
import sys

import pytest
import torch
import torch._dynamo
import torch_xla
import torch_xla.debug.metrics as met

from tests import zoo
from torch_xla_ext import graph_breaks as gb

sys.path.insert(0, os.path.dirname(__file__))
import oracles  # noqa: E402

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
    assert r.num_fx_breaks == dc.delta["graph_breaks"] == tl.kinds["artifact:dynamo_graph_break_reason"]
    assert r.aot_graphs == tl.aot and r.aot_graphs.get("backward", 0) == 0  # no_grad: inference graphs
    assert r.compiles == (met.metric_data("CompileTime") or (0,))[0] - c0
    assert all(op.startswith("aten::") for op in r.fallback_nodes)
    assert r.steps == 2
    assert zoo.primary_output(out).device.type == "xla"
    graphs, ended = oracles.explain(forward, *args, **kwargs)
    assert (r.fx_graphs, r.graphs_ended_by_break) == (graphs, ended)
