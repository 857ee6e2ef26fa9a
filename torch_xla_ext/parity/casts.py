"""The user's model, inputs and tensors cast to a run's dtype and moved to its device.

A model is copied tensor by tensor, each cast straight from the user's own (never a float32 copy
of the whole model first: at real sizes that copy was the largest term of a run's peak memory);
tied weights stay tied. Inputs are cast on the CPU before they move, so XLA receives data already
in the run's dtype rather than a convert. Integer tensors (token ids) are never cast.

Example:
    >>> import torch
    >>> copy = prepare(torch.nn.Linear(2, 2), "cpu", torch_dtype("bf16"))
    >>> copy.weight.dtype
    torch.bfloat16
"""

from __future__ import annotations

import copy
from typing import Any, Callable

import numpy as np
import torch

from torch_xla_ext import _dtypes
from torch_xla_ext._compat.pytree import tree_map
from torch_xla_ext.parity.errors import ParityError, ParityTypeError

__all__ = ["cast_on_cpu", "is_cast", "move", "prepare", "to_numpy", "torch_dtype"]


def torch_dtype(dtype: Any, what: str = "dtype") -> Any:
    """A torch floating dtype from "bf16"/"fp32"/... or a torch.dtype; None stays None.

    Example:
        >>> torch_dtype("bf16"), torch_dtype(None)
        (torch.bfloat16, None)
    """
    if dtype is None:
        return None
    if isinstance(dtype, torch.dtype):
        if not dtype.is_floating_point:
            raise ParityError(f"{what}: expected a floating-point dtype, got {dtype}")
        return dtype
    if not isinstance(dtype, str):
        raise ParityTypeError(f"{what}: expected one of bf16, fp16, fp32, fp64 or a torch.dtype, got "
                              f"{type(dtype).__name__}")
    row = _dtypes.find(dtype.lower())  # names, MLIR types and aliases, with or without "torch."
    if row is None or not row.is_float or row.name.startswith("float8"):
        raise ParityError(f"{what}: expected one of bf16, fp16, fp32, fp64 or a torch.dtype, got {dtype!r}")
    return getattr(torch, row.name)


def move(value: Any, device: Any, dtype: Any) -> Any:
    """Tensors of ``value`` (args tuple, kwargs dict, nested containers) detached, floats cast to
    ``dtype`` on the CPU first (so XLA receives data already in dtype, not a convert), moved."""
    def one(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        t = t.detach()
        if dtype is not None and t.is_floating_point():
            t = t.to("cpu").to(dtype)
        return t.to(device)

    return tree_map(one, value)


def prepare(fn: Any, device: Any, dtype: Any, *, via: Any = None, made: list | None = None,
            given: dict[str, Any] | None = None) -> Callable:
    """A module is copied with its floating parameters and buffers cast to ``via`` (when given)
    and then to ``dtype`` on the CPU, and moved; other callables are kept. ``made`` (a list)
    receives (copy, original) for every tensor cast. ``given``: {parameter name: a float64 numpy
    copy of it} made elsewhere (the exact replay's), used in place of the cast where that cast is
    the same values: a contiguous float32 parameter cast to float64 on the CPU through float32 or
    nothing."""
    if not isinstance(fn, torch.nn.Module):
        return fn

    def cast(t: Any) -> Any:
        return cast_on_cpu(t, dtype, via).to(device)

    made_for: dict[int, Any] = {}
    if given and device == "cpu" and dtype == torch.float64 and via in (None, torch.float32):
        for name, p in fn.named_parameters(remove_duplicate=False):
            copy_ = given.get(name)
            if (copy_ is not None and p.dtype == torch.float32 and p.device.type == "cpu" and p.is_contiguous()
                    and copy_.dtype == np.float64 and tuple(copy_.shape) == tuple(p.shape)):
                made_for[id(p)] = torch.from_numpy(copy_)
    memo: dict[int, Any] = {}
    for p in fn.parameters():
        memo[id(p)] = torch.nn.Parameter(made_for[id(p)] if id(p) in made_for else cast(p),
                                         requires_grad=p.requires_grad)
        if made is not None:
            made.append((memo[id(p)], p))
    for b in fn.buffers():
        memo[id(b)] = cast(b)
        if made is not None:
            made.append((memo[id(b)], b))
    # deepcopy takes every tensor it meets in the memo as already copied.
    return copy.deepcopy(fn, memo)


def is_cast(t: Any) -> bool:
    """Whether :func:`cast_on_cpu` casts ``t`` (what Module.to(dtype) casts); other tensors are
    copied as they are."""
    return t.is_floating_point() or t.is_complex()


def cast_on_cpu(t: Any, dtype: Any, via: Any = None) -> Any:
    """``t`` on the CPU, cast to ``via`` and then ``dtype`` when :func:`is_cast`; :func:`prepare`
    moves this to the device."""
    t = t.detach().to("cpu")
    if is_cast(t):
        for d in (via, dtype):
            if d is not None:
                t = t.to(d)
    return t


def to_numpy(t: Any) -> np.ndarray:
    """A CPU tensor as numpy; ml_dtypes' types (bfloat16, float8) bit for bit (the one conversion).

    Example:
        >>> to_numpy(torch.ones(2, dtype=torch.bfloat16)).dtype
        dtype(bfloat16)
    """
    return _dtypes.numpy_from_tensor(t)
