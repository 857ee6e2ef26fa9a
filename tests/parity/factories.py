"""Model factories for the `torch-xla-ext parity --model module:factory` tests."""

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


def offset_stack():
    torch.manual_seed(0)
    return {"layers": [_OffsetOnXla() for _ in range(3)], "x": torch.randn(2, 16)}


def not_a_model():
    return 42
