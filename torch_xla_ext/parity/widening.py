"""The golden's float mode: a run in float64 (or a shadow in float32) stays in that float, even
where the model narrows on purpose.

Models upcast on purpose (T5's and Llama's RMSNorm compute ``hidden.to(torch.float32)``); in the
fp64 golden that upcast would round to f32, so the golden would carry f32 error the exact replay
(every float f64) does not, and the same math would look like a different one. Under
:func:`default_dtype` (float64) torch's default dtype is float64 (transformers fills
``torch.finfo(dtype).min`` into default-dtype mask tensors) and every request for a narrower
float (``x.to(torch.float32)``, ``x.float()``, ``dtype=torch.float32``) gets float64.

Example:
    >>> import torch
    >>> with default_dtype(torch.float64):
    ...     torch.ones(2).float().dtype
    torch.float64
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["default_dtype", "narrowing", "widened"]

_WIDENING = contextvars.ContextVar("txe_parity_widening", default=False)


def _widening_mode(target: Any, gated: bool) -> TorchFunctionMode:
    """A TorchFunctionMode under which a ``target`` (float64 or float32) run stays in ``target``.
    ``gated``: only while ``_WIDENING`` is set (the golden's own mode, which its CPU shadows
    switch off)."""
    bits = torch.finfo(target).bits
    narrow = {d for d in (torch.float32, torch.float16, torch.bfloat16) if torch.finfo(d).bits < bits}
    to_target = {m for m, d in ((torch.Tensor.float, torch.float32), (torch.Tensor.half, torch.float16),
                                (torch.Tensor.bfloat16, torch.bfloat16)) if d in narrow}
    method = torch.Tensor.double if target == torch.float64 else torch.Tensor.float

    def widen(v: Any) -> Any:
        return target if v in narrow else v

    class Widening(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if gated and not _WIDENING.get():  # parity's own narrow work inside a golden run (a CPU shadow)
                return func(*args, **(kwargs or {}))
            kwargs = dict(kwargs or {})
            if "dtype" in kwargs:
                kwargs["dtype"] = widen(kwargs["dtype"])
            if func in to_target:
                func = method
            elif func in (torch.Tensor.to, torch.Tensor.type) and args:
                rest = []
                for a in args[1:]:
                    if isinstance(a, torch.Tensor) and a.dtype in narrow:  # x.to(other): other's device
                        rest.append(a.device)
                        rest.append(target)
                        continue
                    rest.append(widen(a))
                args = (args[0], *rest)
            return func(*args, **kwargs)

    return Widening()


@contextlib.contextmanager
def default_dtype(dtype: Any):
    """For a float64 run (``dtype`` float64): torch's default dtype float64 for the duration and
    every explicit narrowing to a float32/16 dtype widened to float64. Other dtypes change nothing."""
    if dtype != torch.float64:
        yield
        return
    with _run_widened(torch.float64, gated=True):
        yield


@contextlib.contextmanager
def widened(dtype: Any):
    """Inside a float64 run (:func:`default_dtype`), runs the block in ``dtype`` the way that run
    runs in float64: for float32, torch's default dtype is float32 and every request for a narrower
    float gets float32 (a localisation's float32 shadow). float64 changes nothing."""
    if dtype == torch.float64:
        yield
        return
    # Not gated, and the enclosing float64 mode (gated) lets this block's float32 be.
    with _run_widened(dtype, gated=False):
        yield


@contextlib.contextmanager
def _run_widened(dtype: Any, gated: bool):
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    token = _WIDENING.set(gated)
    try:
        with _widening_mode(dtype, gated=gated):
            yield
    finally:
        _WIDENING.reset(token)
        torch.set_default_dtype(before)


@contextlib.contextmanager
def narrowing():
    """Inside a float64 run (:func:`default_dtype`), lets the code in the block narrow dtypes as
    written: a CPU shadow in bf16 that runs while the golden's hooks are active."""
    token = _WIDENING.set(False)
    try:
        yield
    finally:
        _WIDENING.reset(token)
