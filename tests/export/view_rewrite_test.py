"""torch 2.9's export decompositions (which torch_xla's exporter runs) change the strides of
scaled_dot_product_attention's output, so a later `x.view(-1, n)` (transformers' Conv1D in GPT-2
at batch > 1) no longer fits them (pytorch/pytorch#141107). export() then retries with the
program's views as reshapes: checked against eager PyTorch, shown to change nothing where a view
is expressible, and to leave alone views an in-place op writes through."""

import copy
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from torch_xla_ext import export
from torch_xla_ext._compat import stablehlo as compat
from torch_xla_ext.export import view_rewrite

from tests.export import bounds  # noqa: E402  (JAX's XLA vs torch_xla's: the summation-order bound)


class SdpaThenView(torch.nn.Module):
    """GPT-2's attention output path in miniature: sdpa, merge heads, then Conv1D's view."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Parameter(torch.randn(64, 64) * 0.1)

    def forward(self, x):
        b, s, _ = x.shape
        q = x.view(b, s, 2, 32).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, q, q, is_causal=True)
        o = o.transpose(1, 2).reshape(b, s, -1)
        return o.view(-1, 64) @ self.proj


class ViewsOnly(torch.nn.Module):
    def forward(self, x):
        return torch.tanh(x.view(4, 8)).view(2, 16) * 2


def _args():
    return (torch.randn(2, 16, 64, generator=torch.Generator().manual_seed(0)),)


def test_upstream_decomposition_breaks_the_view():
    """The torch 2.9 bug this works around; when this fails, torch fixed it."""
    ep = torch.export.export(SdpaThenView(), _args())
    with pytest.raises(Exception, match="Cannot view a tensor with shape"):
        ep.run_decompositions()


def test_export_retries_with_reshapes_and_matches_eager():
    torch.manual_seed(0)
    model, args = SdpaThenView(), _args()
    bundle = export.export(model, args)
    (note,) = bundle.manifest.transforms
    assert note.startswith(view_rewrite.VIEW_REWRITE)
    ours = export.run(bundle, args[0].numpy())[0]
    theirs = compat.run_with_torch_xla(bundle.torch_xla_export.graph_module, *args)[0]
    bounds.assert_same_program([ours], [theirs], "run vs torch_xla")
    with torch.no_grad():
        eager = model(*args).numpy()
    np.testing.assert_allclose(ours, eager, rtol=1e-5, atol=1e-6)
    # and in float64 numpy, as an oracle outside both compilers
    x = args[0].double().numpy()
    q = x.reshape(2, 16, 2, 32).transpose(0, 2, 1, 3)
    scores = q @ q.transpose(0, 1, 3, 2) / np.sqrt(32) + np.triu(np.full((16, 16), -np.inf), 1)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    o = (p / p.sum(-1, keepdims=True)) @ q
    want = o.transpose(0, 2, 1, 3).reshape(32, 64) @ model.proj.detach().double().numpy()
    np.testing.assert_allclose(ours, want, rtol=1e-4, atol=1e-5)


def test_no_rewrite_when_export_works():
    bundle = export.export(ViewsOnly(), (torch.randn(32),))
    assert bundle.manifest.transforms == []


def test_reshape_for_an_expressible_view_exports_the_same_program():
    """The soundness claim: where the view is expressible, reshape traces to the same program."""
    ep = torch.export.export(ViewsOnly(), (torch.randn(32),))
    before = compat.export_program(ep).text
    rewritten = copy.deepcopy(ep)
    assert len(view_rewrite.views_as_reshapes(rewritten.graph_module)) == 2
    after = compat.export_program(rewritten).text
    strip = lambda t: re.sub(r"@IrToHlo\.\d+", "@M", t)  # noqa: E731 - torch_xla numbers its modules
    assert strip(after) == strip(before)


def test_views_written_in_place_are_left_alone():
    class InPlace(torch.nn.Module):
        def forward(self, x):
            y = x * 2
            v = y.view(-1)
            v.add_(1)            # writes through the view into y
            w = (x + 1).view(-1)  # nobody writes this one
            return y, w

    ep = torch.export.export(InPlace(), (torch.randn(2, 3),))
    views = [n for n in ep.graph.nodes if n.target is torch.ops.aten.view.default]
    writes = [n for n in ep.graph.nodes if n.target is torch.ops.aten.add_.Tensor]
    assert len(views) == 2 and writes, ep.graph  # torch.export keeps the in-place op in its graph
    rewritten = view_rewrite.views_as_reshapes(ep.graph_module)
    assert len(rewritten) == 1
    kept = next(n for n in ep.graph.nodes if n.name in {v.name for v in views} and n.name not in rewritten)
    assert kept.target is torch.ops.aten.view.default and writes[0].args[0] is kept
