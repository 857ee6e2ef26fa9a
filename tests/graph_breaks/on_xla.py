"""Zoo models moved to the XLA device the way a torch_xla user does it, for the graph-break tests."""

import torch_xla

from tests import zoo


def gpt2_loss():
    """(loss, args, kwargs): GPT-2 called with `labels` on the XLA device (weights and inputs
    synced there first), and a function returning its loss. transformers' loss_function logs a
    warning Dynamo cannot trace, which splits GPT-2's forward frame at the call."""
    device = torch_xla.device()
    model, args, kwargs = zoo.build("gpt2")
    kwargs = {**kwargs, "labels": args[0]}
    model = model.to(device)
    args = tuple(a.to(device) for a in args)
    kwargs = {k: v.to(device) for k, v in kwargs.items()}
    torch_xla.sync()

    def loss(*a, **kw):
        return model(*a, **kw).loss

    return loss, args, kwargs
