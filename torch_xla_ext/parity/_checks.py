"""Argument checks every parity entry point shares (verify, localize's compare, capture)."""

from __future__ import annotations

from typing import Any

from torch_xla_ext.parity.errors import ParityError, ParityTypeError

__all__ = ["check_inputs", "tolerances"]


def check_inputs(inputs: Any, kwargs: Any) -> tuple[tuple, dict]:
    """(positional inputs as a tuple, keyword inputs as a dict); a ParityTypeError names the bad argument."""
    import torch

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
