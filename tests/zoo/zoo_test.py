"""The zoo itself: every entry builds through the one factory contract, is deterministic, keeps its
token ids int64, and trains (its loss reaches every parameter the forward uses)."""

import pytest
import torch

from tests import zoo


@pytest.mark.parametrize("name", zoo.NAMES)
def test_contract_and_determinism(name):
    model, args, kwargs = zoo.build(name)
    assert isinstance(model, torch.nn.Module) and not model.training
    assert isinstance(args, tuple) and isinstance(kwargs, dict)
    leaves = list(args) + list(kwargs.values())
    assert all(isinstance(t, torch.Tensor) for t in leaves)
    with torch.no_grad():
        first = zoo.primary_output(model(*args, **kwargs))
        model2, args2, kwargs2 = zoo.build(name)
        second = zoo.primary_output(model2(*args2, **kwargs2))
    assert torch.equal(first, second), "two builds of the same zoo model differ"
    assert first.abs().max() > 0, "a degenerate (all-zero) output makes every comparison trivial"
    assert torch.isfinite(first).all()


@pytest.mark.parametrize("name", [n for n in zoo.NAMES if zoo.MODELS[n].int_inputs])
def test_token_ids_are_int64(name):
    model, args, kwargs = zoo.build(name)
    named = {"input_ids": args[0], **kwargs}
    for key in zoo.MODELS[name].int_inputs:
        assert named[key].dtype == torch.int64, key


@pytest.mark.parametrize("name", zoo.NAMES)
def test_loss_trains(name):
    model, args, kwargs = zoo.build(name)
    model.train()
    zoo.MODELS[name].loss(model(*args, **kwargs)).backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert sum(g is not None and bool(g.abs().sum() > 0) for g in grads) >= 0.9 * len(grads)


def test_unknown_name_is_named():
    with pytest.raises(KeyError, match="no zoo model 'nope'"):
        zoo.build("nope")
