"""One definition of a graph break: each break figure of the report is tied to the upstream record
that counts the same events (report.BREAK_FIGURES), on forward passes and training steps, with and
without a data-dependent jump and an `.item()`, and on a model we did not design (GPT-2 with a loss,
whose inlined logger call makes a split Dynamo neither logs nor counts).

Oracles: torch._dynamo.utils.counters["graph_break"], torch's structured trace
(dynamo_graph_break_reason artifacts), torch._dynamo.explain's break_reasons."""

import collections
import logging
import os

import pytest
import torch
import torch._dynamo
import torch_xla
from torch._dynamo.utils import counters

from torch_xla_ext import graph_breaks as gb
from torch_xla_ext.graph_breaks.report import BREAK_FIGURES

from tests.graph_breaks import oracles
from tests.graph_breaks import on_xla

DEVICE = torch_xla.device()


class Branchy(torch.nn.Module):
    def __init__(self, jump: bool, item: bool):
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)
        self.jump, self.item = jump, item

    def forward(self, x):
        h = self.a(x)
        if self.jump and h.sum() > 0:  # a data-dependent jump
            h = h * 2
        if self.item:
            h = h + h.mean().item()  # a host read Dynamo cannot trace
        return self.b(h)


class Looped(torch.nn.Module):
    """A break inside a for loop: Dynamo logs it and skips the whole frame."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 8)

    def forward(self, x):
        h = self.a(x)
        for _ in range(2):
            h = h + h.mean().item()
        return h


class SkipLog(logging.Handler):
    """Dynamo's own log line for a frame it gives up on after a break in a loop."""

    def __enter__(self):
        super().__init__(level=logging.INFO)
        self.count = 0
        self._log = logging.getLogger("torch._dynamo.symbolic_convert")
        self._level = self._log.level
        self._log.setLevel(logging.INFO)
        self._log.addHandler(self)
        return self

    def __exit__(self, *exc):
        self._log.removeHandler(self)
        self._log.setLevel(self._level)

    def emit(self, record):
        message = record.getMessage()
        self.count += message.startswith("Skipping frame because there is a graph break in a for/while loop")


def explain_reasons(fn, *args, **kwargs) -> list[str]:
    torch._dynamo.reset()
    return [str(r.reason) for r in torch._dynamo.explain(fn)(*args, **kwargs).break_reasons]


def measure(fn, *args, **kwargs):
    """(ledger report, counter delta, structured-trace breaks, explain's break reasons) of one
    compiled call of fn."""
    torch._dynamo.reset()
    before = sum(counters["graph_break"].values())
    with oracles.TraceLog() as tl, SkipLog() as skips, gb.account() as ledger:
        torch.compile(fn, backend="openxla")(*args, **kwargs)
        torch_xla.sync()
    counted = sum(counters["graph_break"].values()) - before
    r = ledger.report()
    assert r.num_skipped_frames == skips.count
    return r, counted, tl.kinds["artifact:dynamo_graph_break_reason"], explain_reasons(fn, *args, **kwargs)


def check_each_figure(r, counted, logged, reasons):
    figures = {f["figure"]: f for f in r.break_figures()}
    assert list(figures) == [f[0] for f in BREAK_FIGURES]
    assert figures["logged_breaks"]["value"] == r.num_fx_breaks == logged
    assert figures["counted_breaks"]["value"] == r.num_counted_breaks == counted
    assert figures["data_dependent_jumps"]["value"] == sum(x.startswith("generic_jump") for x in reasons)
    assert figures["inherited_splits"]["value"] == sum(x == "step_unsupported" for x in reasons)
    assert figures["graphs_ended_by_break"]["value"] == len(reasons)
    # The definitions hold between the oracles themselves: a logged break is a counted one, a
    # data-dependent jump in the frame's own code, or a break in a loop that skipped its frame.
    assert logged == counted + r.num_data_dependent_jumps + r.num_skipped_frames


@pytest.mark.parametrize("train", [False, True], ids=["forward", "train"])
@pytest.mark.parametrize("jump, item", [(False, False), (True, False), (False, True), (True, True)],
                         ids=["plain", "jump", "item", "jump+item"])
def test_each_break_figure_counts_what_its_upstream_record_counts(train, jump, item, tmp_path):
    torch.manual_seed(0)
    model = Branchy(jump, item).to(DEVICE)
    x = torch.randn(4, 8).to(DEVICE)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    torch_xla.sync()

    def step(x):
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()

    def forward(x):
        with torch.no_grad():
            return model(x)

    r, counted, logged, reasons = measure(step if train else forward, x)
    check_each_figure(r, counted, logged, reasons)
    jumps = [b for b in r.fx_breaks if b["gb_type"] == "Data-dependent branching"]
    items = [b for b in r.fx_breaks if "Tensor.item()" in b["gb_type"]]
    assert bool(jumps) == jump and bool(items) == item
    assert (r.num_data_dependent_jumps >= 1) == jump
    if train:  # zero_grad, backward() and the optimizer step break a training step whatever the model
        assert r.num_counted_breaks >= 2
    elif not (jump or item):
        assert r.num_fx_breaks == r.num_counted_breaks == 0 and r.fx_graphs == 1
    # Each figure and its definition are in the JSON, the Markdown and the HTML.
    d = r.to_dict()
    assert [f["value"] for f in d["break_figures"]] == [f["value"] for f in r.break_figures()]
    md = r.to_markdown()
    import html as html_text

    from torch_xla_ext.graph_breaks import html

    page = html_text.unescape(html.render_report(r))  # the text a reader sees, whatever the escaping
    for _, label, counts, oracle in BREAK_FIGURES:
        assert label in md and oracle in md or not r.fx_breaks
        assert counts in page and oracle in page


def test_inherited_splits_on_a_model_we_did_not_design():
    loss, args, kwargs = on_xla.gpt2_loss()
    r, counted, logged, reasons = measure(loss, *args, **kwargs)
    assert r.num_inherited_splits >= 1
    check_each_figure(r, counted, logged, reasons)
    per_type = collections.Counter(b["gb_type"] for b in r.fx_breaks for _ in range(b["count"] - b["inherited"]))
    assert sum(per_type.values()) == logged


def test_a_break_in_a_loop_skips_the_frame_and_is_logged_not_counted():
    model = Looped().to(DEVICE)
    x = torch.randn(4, 8).to(DEVICE)
    torch_xla.sync()

    def forward(x):
        with torch.no_grad():
            return model(x)

    r, counted, logged, reasons = measure(forward, x)
    check_each_figure(r, counted, logged, reasons)
    assert r.num_skipped_frames == 1
    (row,) = [b for b in r.fx_breaks if b.get("skipped_frames")]
    assert "Tensor.item()" in row["gb_type"] and row["frame"].endswith(f"{os.path.basename(__file__)}:"
                                                                        f"{Looped.forward.__code__.co_firstlineno + 3}")
