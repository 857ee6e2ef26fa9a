"""Small models for parity under torchax: a residual MLP stack (rounding only, or a planted bug)
and a model that builds sinusoidal positions in float64 at a large offset (JAX's x64 mode off
computes them in float32), with its fp64 numpy oracle."""

from __future__ import annotations

import math

import numpy as np
import torch

OFFSET = 200_000  # far enough that float32 positions lose the angle's low bits


class Block(torch.nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.fc1 = torch.nn.Linear(d, 4 * d)
        self.fc2 = torch.nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(x))))


class Stack(torch.nn.Module):
    def __init__(self, d: int = 32, n: int = 3):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(d) for _ in range(n)])
        self.head = torch.nn.Linear(d, 8)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def stack() -> tuple[torch.nn.Module, tuple]:
    torch.manual_seed(0)
    return Stack().eval(), (torch.randn(2, 5, 32),)


class Sinusoidal(torch.nn.Module):
    """x plus sinusoidal positions built in float64 starting at ``offset``, then a projection."""

    def __init__(self, dim: int = 32, offset: int = OFFSET):
        super().__init__()
        self.dim, self.offset = dim, offset
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, x):
        pos = torch.arange(x.shape[1], dtype=torch.float64, device=x.device) + self.offset  # positions line
        rate = torch.arange(0, self.dim, 2, dtype=torch.float64, device=x.device) * (-math.log(10000.0) / self.dim)
        angle = pos[:, None] * torch.exp(rate)[None, :]
        pe = torch.cat([torch.sin(angle), torch.cos(angle)], dim=-1).to(x.dtype)
        return self.proj(x + pe)


def sinusoidal() -> tuple[torch.nn.Module, tuple]:
    torch.manual_seed(0)
    return Sinusoidal().eval(), (torch.randn(2, 8, 32),)


def sinusoidal_numpy(model: Sinusoidal, x: torch.Tensor, positions_dtype) -> np.ndarray:
    """The model in numpy, in float64 throughout except the positional table, computed in
    ``positions_dtype`` (np.float64: the model as written; np.float32: as JAX's x64 mode off runs it)."""
    n, half = x.shape[1], model.dim // 2
    pos = np.arange(n, dtype=positions_dtype) + positions_dtype(model.offset)
    rate = np.arange(0, model.dim, 2, dtype=positions_dtype) * positions_dtype(-math.log(10000.0) / model.dim)
    angle = pos[:, None] * np.exp(rate)[None, :]
    pe = np.concatenate([np.sin(angle), np.cos(angle)], axis=-1).astype(np.float64)
    assert pe.shape == (n, 2 * half)
    w = model.proj.weight.detach().double().numpy()
    b = model.proj.bias.detach().double().numpy()
    return (x.double().numpy() + pe) @ w.T + b
