"""Reductions over `dim=[]`: PyTorch reduces every dimension, torch_xla 2.9's lowering reduces none
and returns its input unchanged. torch.export's decompositions emit such reductions themselves
(nll_loss -> sum(x, [])), so every cross_entropy loss with reduction="mean" -- a transformers
model called with `labels` -- exported as a vector of per-token losses instead of the loss.

The oracle is CPU eager PyTorch: each op's result and shape there.
"""


import numpy as np
import pytest
import torch
import torch_xla

from tests import zoo
from torch_xla_ext import export
from torch_xla_ext._compat import stablehlo as compat
from torch_xla_ext.export import torch_program, torch_xla_exporter

from tests.export import bounds  # noqa: E402  (JAX's XLA vs torch_xla's: the summation-order bound)

aten = torch.ops.aten

# Each op with dim=[] as torch.export's programs call it (amax's default dim is []).
OPS = {
    "sum.dim_IntList": lambda x: aten.sum.dim_IntList(x, []),
    "sum.dim_IntList keepdim": lambda x: aten.sum.dim_IntList(x, [], True),
    "mean.dim": lambda x: aten.mean.dim(x, []),
    "amax.default": lambda x: aten.amax.default(x),
    "amin.default": lambda x: aten.amin.default(x, []),
    "var.correction": lambda x: aten.var.correction(x, [], correction=1),
    "std.correction": lambda x: aten.std.correction(x, [], correction=0),
    "var_mean.correction": lambda x: aten.var_mean.correction(x, [])[1],
    "std_mean.correction": lambda x: aten.std_mean.correction(x, [])[0],
    "linalg_vector_norm.default": lambda x: aten.linalg_vector_norm.default(x, 2, []),
}


class Op(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x * 2.0)


def _x():
    return torch.randn(3, 5, generator=torch.Generator().manual_seed(0))


def test_every_rewritten_op_is_one_the_decompositions_keep():
    # A name that no longer resolves (an op renamed upstream) would silently drop out of the rewrite.
    for name in torch_xla_exporter.ALL_DIMS_WHEN_EMPTY:
        packet, overload = name.split(".")
        assert getattr(getattr(aten, packet), overload) is not None


@pytest.mark.parametrize("name", sorted(OPS))
def test_upstream_lowering_reduces_nothing(name):
    """The torch_xla 2.9 behaviour the rewrite is for; when this fails, torch_xla fixed the op."""
    x = _x()
    eager = OPS[name](x)
    on_xla = OPS[name](x.to(torch_xla.device())).cpu()
    assert eager.dim() < x.dim() or eager.numel() == 1
    assert on_xla.shape == x.shape


@pytest.mark.parametrize("name", sorted(OPS))
def test_export_reduces_every_dimension_like_eager(name):
    x = _x()
    bundle = export.export(Op(OPS[name]), (x,))
    assert any(t.startswith(torch_xla_exporter.EMPTY_DIMS_REWRITE) for t in bundle.manifest.transforms)
    (ours,) = export.run(bundle, x.numpy())
    with torch.no_grad():
        eager = Op(OPS[name])(x).numpy()
    assert ours.shape == eager.shape
    np.testing.assert_allclose(ours, eager, rtol=1e-5, atol=1e-6)
    (theirs,) = compat.run_with_torch_xla(bundle.torch_xla_export.graph_module, x)
    bounds.assert_same_program([ours], [np.asarray(theirs)], "run vs torch_xla")


def test_a_reduction_with_explicit_dims_is_left_alone():
    x = _x()
    bundle = export.export(Op(lambda t: aten.sum.dim_IntList(t, [1])), (x,))
    assert not any(t.startswith(torch_xla_exporter.EMPTY_DIMS_REWRITE) for t in bundle.manifest.transforms)
    np.testing.assert_allclose(export.run(bundle, x.numpy())[0], (x * 2.0).sum(1).numpy(), rtol=1e-6)


def test_a_lowering_that_changes_an_output_shape_is_refused():
    # torch_xla's own export of the program (no rewrite) against torch.export's output shapes.
    x = _x()
    ep = torch.export.export(Op(OPS["sum.dim_IntList"]), (x,))
    tx = compat.export_program(ep)
    assert tx.output_signature[0][0] == [3, 5]  # torch_xla's wrong shape; eager's is []
    with pytest.raises(export.ExportLoweringError, match=r"output\[0\].*\[3, 5\].*\[\]") as info:
        torch_program.check_outputs(ep, tx.output_signature, ["output[0]"], "torch_xla's")
    assert isinstance(info.value, NotImplementedError)


@pytest.mark.parametrize("name", ["gpt2", "t5"])
def test_transformers_loss_from_labels_is_the_scalar_eager_computes(name):
    """A transformers model called with `labels` returns `loss` first: exported, it is eager's
    scalar (GPT-2: ForCausalLMLoss; T5: CrossEntropyLoss(ignore_index=-100))."""
    model, args, kwargs = zoo.build(name)
    labels = kwargs.get("decoder_input_ids", args[0]).clone()
    labels[0, -2:] = -100  # ignored positions, as padding is labelled
    kwargs = {**kwargs, "labels": labels}
    bundle = export.export(model, args, kwargs)
    names = [o["name"] for o in bundle.manifest.outputs]
    assert names[0] == "output['loss']"
    leaves = list(args) + list(kwargs.values())
    ran = export.run(bundle, *[t.numpy() for t in leaves])
    with torch.no_grad():
        eager = model(*args, **kwargs)
    assert ran[0].shape == ()
    np.testing.assert_allclose(ran[0], eager.loss.numpy(), rtol=1e-5)
    np.testing.assert_allclose(ran[1], eager.logits.numpy(), rtol=1e-4, atol=1e-5)
    theirs = compat.run_with_torch_xla(bundle.torch_xla_export.graph_module, *leaves)
    bounds.assert_same_program(ran[:1], [np.asarray(theirs[0])], "run vs torch_xla")
