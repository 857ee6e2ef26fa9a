"""The arguments every parity entry point shares, checked once: a bad one raises a ParityError
(a ValueError; ParityTypeError is also a TypeError) naming it, never a verdict.

Example:
    >>> import torch
    >>> check_inputs(torch.ones(2), None)[0][0].shape, tolerances(None, None)
    (torch.Size([2]), {})
"""

from __future__ import annotations

from typing import Any

import torch

from torch_xla_ext.parity.errors import ParityError, ParityTypeError

__all__ = ["check_callable", "check_inputs", "check_seed", "tolerances"]


def check_inputs(inputs: Any, kwargs: Any) -> tuple[tuple, dict]:
    """(positional inputs as a tuple, keyword inputs as a dict); a ParityTypeError names the bad argument."""
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    if isinstance(inputs, list):
        inputs = tuple(inputs)
    if not isinstance(inputs, tuple):
        raise ParityTypeError(f"inputs: expected a tuple of positional inputs (or one tensor), got "
                              f"{type(inputs).__name__}")
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise ParityTypeError(f"kwargs: expected a dict of keyword inputs with str keys, got {type(kwargs).__name__}")
    return inputs, dict(kwargs)


def tolerances(rtol: Any, atol: Any) -> dict[str, float]:
    """numerics.compare's rtol/atol keywords ({} for the dtype's defaults); both or neither."""
    if (rtol is None) != (atol is None):
        raise ParityError("rtol and atol go together: pass both or neither")
    if rtol is None:
        return {}
    for name, v in (("rtol", rtol), ("atol", atol)):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
            raise ParityError(f"{name}: expected a non-negative number, got {v!r}")
    return {"rtol": float(rtol), "atol": float(atol)}


def check_callable(value: Any, name: str) -> None:
    """A callable or an nn.Module (``fn``, ``reference``)."""
    if not callable(value):
        raise ParityTypeError(f"{name}: expected a callable or an nn.Module, got {type(value).__name__}")


def check_seed(seed: Any) -> None:
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ParityTypeError(f"seed: expected an int, got {type(seed).__name__}")
