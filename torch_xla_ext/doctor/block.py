"""The doctor's embedded example: a small pre-norm transformer block that touches every problem
this project exists for. It all-reduces through :func:`torch_xla_ext.collectives.all_reduce` (with a
scale), calls a JAX function with an unused argument through :func:`torch_xla_ext.jax_call.call_jax`,
has a Dynamo graph break (a ``print``) and a CPU-fallback op (``digamma``).

Example:
    >>> from torch_xla_ext.doctor import block
    >>> model, (x,) = block.example()
    >>> type(model).__name__, tuple(x.shape)
    ('DoctorBlock', (2, 8, 32))
"""

from __future__ import annotations

import math
import os

import torch
import torch.nn.functional as F

from torch_xla_ext import _versions

if _versions.available("graph_breaks") and _versions.available("graph_breaks.openxla"):
    from torch_xla_ext.graph_breaks import DISCARD  # where the block's print goes (a break whatever its file)
else:  # graph_breaks cannot run here (its section says why); the block's print still needs a sink
    DISCARD = open(os.devnull, "w")  # noqa: SIM115 - the process's, like sys.stdout

__all__ = ["DoctorBlock", "SCALE", "WIDTH", "example", "example_inputs", "example_model", "export_variant", "gate"]

WIDTH = 32
SCALE = 0.5  # the all-reduce's scale, e.g. averaging over two micro-batches


def gate(h, x, unused):
    """The JAX part of the block: a sigmoid gate. ``unused`` is never read, so call_jax keeps two
    of its three tensor arguments."""
    import jax

    return h * jax.nn.sigmoid(x)


class DoctorBlock(torch.nn.Module):
    """Pre-norm attention + MLP block; each problematic part can be switched off.

    On XLA the gate runs as JAX through call_jax and the block ends in an all-reduce through our
    wrapper; on the CPU (the reference) the same math runs in torch, and at world size 1 the
    all-reduce is the identity times ``SCALE``.
    """

    def __init__(self, width: int = WIDTH, *, use_jax: bool | None = None, graph_break: bool = True,
                 fallback: bool = True, all_reduce: bool = True):
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.proj = torch.nn.Linear(width, width)
        self.up = torch.nn.Linear(width, 2 * width)
        self.down = torch.nn.Linear(2 * width, width)
        self.register_buffer("unused", torch.ones(width))  # the argument JAX ignores
        if use_jax is None:  # the JAX gate wherever this stack runs call_jax (not on CPython 3.10: no jax 0.7.1)
            use_jax = _versions.available("jax_call")
        self.use_jax, self.graph_break, self.fallback, self.all_reduce = use_jax, graph_break, fallback, all_reduce

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        q, k, v = self.qkv(h).chunk(3, dim=-1)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1) @ v
        x = x + self.proj(att)
        if self.graph_break:
            print("doctor: attention done", file=DISCARD)
        h = self.down(F.gelu(self.up(x)))
        if self.use_jax:
            if x.device.type == "xla":
                from torch_xla_ext import jax_call  # torch_xla and JAX: only on torch_xla's device

                h = jax_call.call_jax(gate, (h, x, self.unused))
            else:
                h = h * torch.sigmoid(x)
        if self.fallback:
            h = h + 0.01 * torch.digamma(h.abs() + 1)  # no XLA lowering: a CPU fallback
        out = x + h
        if self.all_reduce:
            if out.device.type == "xla" or (torch.compiler.is_compiling() and _versions.available("collectives")):
                # torch_xla's collectives, only on its device or traced where torch_xla is installed: the
                # block also runs where torch_xla is absent (torchax on a stack without it).
                from torch_xla_ext import collectives

                # XLA:CPU has no bf16 all-reduce, so reduce in fp32 (exact at world size 1).
                out = collectives.all_reduce("sum", out.float(), scale=SCALE).to(out.dtype)
            else:
                out = out * SCALE
        return out


def example_model() -> DoctorBlock:
    """The embedded block with every part on (seeded weights)."""
    torch.manual_seed(0)
    return DoctorBlock()


def example_inputs() -> tuple[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return (torch.randn(2, 8, WIDTH, generator=g),)


def example() -> tuple[DoctorBlock, tuple[torch.Tensor]]:
    """(model, inputs) of the embedded example: the shape a ``--model`` factory returns."""
    return example_model(), example_inputs()


def export_variant(block: DoctorBlock) -> DoctorBlock:
    """The exported part of the embedded block: neither call_jax (a torch_xla user computation)
    nor digamma (no XLA lowering) has a StableHLO form, so export leaves them out."""
    block.use_jax = False
    block.fallback = False
    return block
