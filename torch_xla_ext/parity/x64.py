"""64-bit tensors a run computes in 32 bits: JAX's x64 mode off (its default) makes torchax compute a
float64 tensor as float32 and an int64 tensor as int32.

The run's own program cannot say which tensors torch meant to be 64-bit: with x64 off it has none.
So :class:`SixtyFourBit` watches every torch call of the forward on the meta device (torch's own
dtypes, no arithmetic): each call whose result is float64 or int64 is a tensor the run computed
narrower, named by the torch call, the module whose forward made it and the model's line
(:class:`~torch_xla_ext.parity.record.Narrowed`). Where some are float64 (or the forward cannot run
on the meta device), the program is traced again with JAX's x64 mode on (the wide program: float64
and int64 where torch has them), watched the same way.
The wide program's rounded replay is what the run would give with x64 on; the cause rule
(:mod:`.causes`) names x64 when it is as accurate as CPU eager and the run is not.

Example:
    >>> import torch
    >>> watch = SixtyFourBit({})
    >>> with watch:
    ...     _ = torch.arange(3, dtype=torch.float64) * 2
    >>> [(n.dtype, n.op) for n in watch.narrowed]
    [('float64', 'torch.arange'), ('float64', 'Tensor.mul')]
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from torch_xla_ext._compat.torchax import is_aten_op
from torch_xla_ext.parity.leaves import tensor_leaves
from torch_xla_ext.parity.report import Narrowed
from torch_xla_ext.parity.user_code import live_frames, site

__all__ = ["LIMIT", "SixtyFourBit", "call_name"]

# Tensors kept per run (the first, in the order the model made them): a report names a few lines.
LIMIT = 256
_WIDE = {torch.float64: "float64", torch.int64: "int64"}


class SixtyFourBit(torch.overrides.TorchFunctionMode):
    """A TorchFunctionMode that records every torch call whose result holds a float64 or int64 tensor
    (at most :data:`LIMIT`), with the module (``modules``: {id(submodule): path}) and the model's line."""

    def __init__(self, modules: dict[int, str]):
        super().__init__()
        self._modules = modules
        self.narrowed: list[Narrowed] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if len(self.narrowed) < LIMIT:
            wide = next((_WIDE[t.dtype] for _, t in tensor_leaves(out) if t.dtype in _WIDE), None)
            if wide is not None:
                module, source, text = site(live_frames(sys._getframe(1)), self._modules)
                self.narrowed.append(Narrowed(wide, call_name(func), module, source, text))
        return out


def call_name(func: Any) -> str:
    """"torch.arange", "Tensor.mul", "torch.nn.functional.linear": a torch call as a user writes it;
    an aten op by its overload, "aten.gelu.default"."""
    if is_aten_op(func):
        return str(func)
    name = getattr(func, "__name__", None) or repr(func)
    owner = getattr(func, "__objclass__", None)
    if (isinstance(owner, type) and issubclass(torch.Tensor, owner)) or getattr(func, "__qualname__", "").startswith(
            ("Tensor.", "TensorBase.")):
        return f"Tensor.{name.strip('_')}"
    module = getattr(func, "__module__", None) or "torch"
    return f"{_MODULES.get(module, module)}.{name}"


# Where torch's C functions say they live, and where a user calls them.
_MODULES = {"torch._C._VariableFunctions": "torch", "torch._C._nn": "torch.nn.functional",
            "torch._C._linalg": "torch.linalg", "torch._C._fft": "torch.fft", "torch._C._special": "torch.special"}
