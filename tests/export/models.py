"""Models for the export tests (also loadable by `torch-xla-ext export --model models:<factory>`).
Each factory returns (module, example_args)."""

import torch

from torch_xla_ext import collectives


class OneAllReduce(torch.nn.Module):
    """Parameters, one all-reduce (sum) with a scale."""

    def __init__(self, scale=1.0):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.scale = scale

    def forward(self, x):
        return collectives.all_reduce("sum", self.lin(x), scale=self.scale)


class TwoAllReduces(torch.nn.Module):
    """Parameters, a buffer, a lifted scalar constant, an unused input, sum then max."""

    def __init__(self, scale=0.5):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("offset", torch.linspace(-1.0, 1.0, 4))
        self.k = torch.tensor(3.0)  # not a buffer: torch.export lifts it as a constant tensor
        self.scale = scale

    def forward(self, x, unused, y):
        h = collectives.all_reduce("sum", self.lin(x) + self.offset, scale=self.scale)
        h = torch.tanh(h * self.k) + y
        return collectives.all_reduce("max", h)


class Mixed(torch.nn.Module):
    """An int64 buffer past 2**31, a complex64 buffer, a list of tensors and a Python float as
    inputs, a dict return value."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("big", torch.tensor([2**40 + 1, -3]))
        self.register_buffer("freqs", torch.polar(torch.ones(2), torch.tensor([0.5, 1.0])))

    def forward(self, ids, pair, scale):
        z = torch.view_as_complex(pair[0]) * self.freqs
        return {"ids": ids + self.big, "h": self.lin(pair[1]) * scale, "z": z}


def _seeded(cls, *args):
    torch.manual_seed(0)
    return cls(*args)


def one_all_reduce():
    return _seeded(OneAllReduce, 1.0), (torch.randn(2, 4),)


def one_all_reduce_half():
    return _seeded(OneAllReduce, 0.5), (torch.randn(2, 4),)


def two_all_reduces():
    m = _seeded(TwoAllReduces, 0.5)
    return m, (torch.randn(2, 4), torch.randn(5), torch.randn(2, 4))


def mixed():
    return _seeded(Mixed), (torch.tensor([2**33, 5]), [torch.randn(2, 2), torch.randn(3, 4)], 0.5)
