"""Model factories for the `torch-xla-ext parity --model module:factory` tests (the one contract:
``(model, args)`` or ``(model, args, kwargs)``)."""

import torch


class _OffsetOnXla(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 16)

    def forward(self, x):
        y = self.lin(x)
        return y + 0.25 if x.device.type == "xla" else y


def linear():
    torch.manual_seed(0)
    return torch.nn.Linear(16, 16), (torch.randn(4, 16),)


class _Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 16)

    def forward(self, x, *, scale):
        return {"y": self.lin(x) * scale}


def keyword():
    torch.manual_seed(0)
    return _Scaled(), (torch.randn(4, 16),), {"scale": torch.tensor(0.5)}


def offset_stack():
    """For --scan-layers: the layers as an nn.ModuleList, args (x,)."""
    torch.manual_seed(0)
    return torch.nn.ModuleList([_OffsetOnXla() for _ in range(3)]), (torch.randn(2, 16),)


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 16)), (torch.randn(4, 16),)


def mlp_perturbed():
    model, args = mlp()
    with torch.no_grad():
        model[2].weight.mul_(1.5)
    return model, args


def not_a_model():
    return 42
