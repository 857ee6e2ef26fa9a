"""Models for the torchax export tests, as torchax users write them (also loadable by
`torch-xla-ext export --frontend torchax --model tests.export.torchax_models:<factory>`). Each
factory returns (module, example_args). Nothing here imports torch_xla.

torchax 0.0.13 lowers the c10d functional collectives (``torch.ops._c10d_functional.all_reduce``
and its ``wait_tensor``) over the axis "torch_dist"; a script runs them inside a JAX program that
binds that axis (``jax.pmap``/``shard_map``).
"""

import torch

REDUCES = ("sum", "avg", "min", "max")


def all_reduce(x, reduce_op):
    """What ``torch.distributed._functional_collectives.all_reduce`` traces to, without a process group."""
    return torch.ops._c10d_functional.wait_tensor(torch.ops._c10d_functional.all_reduce(x, reduce_op, ""))


class FourReduces(torch.nn.Module):
    """A linear layer, then its output reduced over the replicas four ways (sum, avg, min, max)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        y = self.lin(x)
        return tuple(all_reduce(y * (k + 1), op) for k, op in enumerate(REDUCES))


class SumOnly(torch.nn.Module):
    """One sum all-reduce: its program computes for any replica count."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        return all_reduce(torch.tanh(self.lin(x)), "sum")


class Gathered(torch.nn.Module):
    """An all_gather: its result's shape depends on the replica count."""

    def forward(self, x):
        return torch.ops._c10d_functional.wait_tensor(
            torch.ops._c10d_functional.all_gather_into_tensor(x, 2, ""))


class TrainingNorm(torch.nn.Module):
    """A BatchNorm in training mode: the forward pass writes its running statistics in place."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.bn = torch.nn.BatchNorm1d(4)

    def forward(self, x):
        return self.bn(self.lin(x))


class Positions(torch.nn.Module):
    """A non-persistent int64 buffer, a float64 buffer, an int64 constant past 2**31 lifted by
    torch.export, an int64 and a float32 input: dtypes JAX narrows with x64 off."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(16, 4)
        self.register_buffer("position_ids", torch.arange(6).unsqueeze(0), persistent=False)
        self.register_buffer("scale", torch.tensor([0.5, 2.0, 1.0, 3.0], dtype=torch.float64))
        self.offset = torch.tensor(2**33)  # an attribute tensor: torch.export lifts it as a constant

    def forward(self, ids, mask):
        h = self.emb(ids) + self.emb(self.position_ids)
        shifted = ids + self.offset + self.position_ids
        return (h * mask[..., None]).double() + self.scale, shifted


class CountsSoFar(torch.nn.Module):
    """A running count of int32 flags: torch's cumsum of an int32 tensor is int64; torchax 0.0.13's
    lowering keeps int32."""

    def forward(self, flags):
        return torch.cumsum(flags, 0)


def _seeded(cls):
    torch.manual_seed(0)
    return cls().eval()


def four_reduces():
    return _seeded(FourReduces), (torch.randn(2, 4),)


def sum_only():
    return _seeded(SumOnly), (torch.randn(2, 4),)


def gathered():
    return _seeded(Gathered), (torch.randn(2, 4),)


def training_norm():
    torch.manual_seed(0)
    return TrainingNorm().train(), (torch.randn(8, 4),)


def positions():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 16, (2, 6), generator=g)
    return _seeded(Positions), (ids, torch.ones(2, 6))


def counts_so_far():
    return CountsSoFar(), (torch.tensor([1, 0, 1, 1], dtype=torch.int32),)
