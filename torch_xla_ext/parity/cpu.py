"""The reference on the CPU: its model copied and cast to a run's dtype, run on inputs cast the
same way, its floating-point outputs by pytree path. In float64 it runs in the golden's float mode
(:mod:`.widening`), from inputs and parameters first rounded to the run's dtype (``via``).

Example:
    >>> import torch
    >>> out, seconds = run_cpu(torch.nn.Linear(2, 2), (torch.ones(1, 2),), {}, torch.bfloat16, 0)
    >>> [(path, t.dtype) for path, t in out]
    [('', torch.bfloat16)]
"""

from __future__ import annotations

import time
from typing import Any, Callable

import torch

from torch_xla_ext.parity.casts import move, prepare
from torch_xla_ext.parity.leaves import float_leaves
from torch_xla_ext.parity.user_code import call
from torch_xla_ext.parity.widening import default_dtype

__all__ = ["run_cpu"]


def run_cpu(ref: Any, args: tuple, kwargs: dict, dtype: Any, seed: int, *, via: Any = None,
            stage: str = "CPU eager", run: Callable[..., Any] = call,
            given: dict[str, Any] | None = None) -> tuple[list[tuple[str, Any]], float]:
    """(float outputs by path, seconds) of ``ref`` on the CPU in ``dtype`` (float64: the golden's
    float mode, :mod:`..widening`). ``via``: round inputs and parameters to this dtype first (the
    golden of what XLA received). ``run(stage, model, args, kwargs)`` calls the prepared model
    (:func:`~torch_xla_ext.parity.user_code.call`, or a recorder of its module calls). ``given``:
    parameters already cast, by name (:func:`~torch_xla_ext.parity.casts.prepare`)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        if via is not None:
            args, kwargs = move(args, "cpu", via), move(kwargs, "cpu", via)
        fn = prepare(ref, "cpu", dtype, via=via, given=given)
        a, k = move(args, "cpu", dtype), move(kwargs, "cpu", dtype)
        t0 = time.perf_counter()
        with default_dtype(dtype):
            out = run(stage, fn, a, k)
        seconds = time.perf_counter() - t0
    return [(p, t.detach().clone()) for p, t in float_leaves(out, "the reference")], seconds
