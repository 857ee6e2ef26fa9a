"""Stage 1, CPU eager: the reference on the CPU in the run's dtype, twice, to catch a reference
that is not deterministic (then nothing else can judge XLA: the run ends as
NONDETERMINISTIC_REFERENCE).

Each run's model copy is freed by reference counting when the run returns (no cycle holds it),
so a trim after it returns its pages. With localize, the first run's module calls are kept:
where XLA gave a module what CPU eager gave it, CPU eager's own call is that module's CPU shadow
(:mod:`.localization`).

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

from torch_xla_ext import numerics
from torch_xla_ext.parity import capturing
from torch_xla_ext.parity.casts import move, prepare
from torch_xla_ext.parity.leaves import float_leaves
from torch_xla_ext.parity.pipeline import Stage
from torch_xla_ext.parity.record import RunRecord
from torch_xla_ext.parity.user_code import call
from torch_xla_ext.parity.widening import default_dtype

__all__ = ["DETERMINISTIC", "FIRST", "SECOND", "run_cpu"]


def run_cpu(ref: Any, args: tuple, kwargs: dict, dtype: Any, seed: int, *, via: Any = None,
            stage: str = "CPU eager", run: Callable[..., Any] = call) -> tuple[list[tuple[str, Any]], float]:
    """(float outputs by path, seconds) of ``ref`` on the CPU in ``dtype`` (float64: the golden's
    float mode, :mod:`..widening`). ``via``: round inputs and parameters to this dtype first (the
    golden of what XLA received). ``run(stage, model, args, kwargs)`` calls the prepared model
    (:func:`~torch_xla_ext.parity.user_code.call`, or a recorder of its module calls)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        if via is not None:
            args, kwargs = move(args, "cpu", via), move(kwargs, "cpu", via)
        fn = prepare(ref, "cpu", dtype, via=via)
        a, k = move(args, "cpu", dtype), move(kwargs, "cpu", dtype)
        t0 = time.perf_counter()
        with default_dtype(dtype):
            out = run(stage, fn, a, k)
        seconds = time.perf_counter() - t0
    return [(p, t.detach().clone()) for p, t in float_leaves(out, "the reference")], seconds


def _first(record: RunRecord) -> None:
    r = record.request
    recorder = capturing.Recorder() if r.localize else None
    record.cpu, record.seconds["cpu"] = run_cpu(r.reference, r.inputs, r.kwargs, r.dtype, r.seed,
                                                run=recorder or call)
    if recorder is not None:
        record.cpu_calls = recorder.calls


def _second(record: RunRecord) -> None:
    r = record.request
    record.cpu_again, _ = run_cpu(r.reference, r.inputs, r.kwargs, r.dtype, r.seed, stage="second CPU eager")


def _deterministic(record: RunRecord) -> None:
    """Ends the run when the two CPU eager runs differ; drops the second run's outputs."""
    again, record.cpu_again = record.cpu_again, None
    for (path, a), (_, b) in zip(record.cpu, again):
        r = numerics.compare(a, b, rtol=0.0, atol=0.0, equal_nan=True)
        if not r.passed:
            record.nondeterminism = (path, r)
            record.done = True
            return


FIRST = Stage("CPU eager", _first, release="trim")
SECOND = Stage("second CPU eager", _second, release="trim")
DETERMINISTIC = Stage("CPU eager against itself", _deterministic)
