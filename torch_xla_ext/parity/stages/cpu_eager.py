"""Stage 1, CPU eager: the reference on the CPU in the run's dtype, twice, to catch a reference
that is not deterministic (then nothing else can judge XLA: the run ends as
NONDETERMINISTIC_REFERENCE).

Each run's model copy is freed by reference counting when the run returns (no cycle holds it),
so a trim after it returns its pages. With localize, the first run's module calls are kept:
where XLA gave a module what CPU eager gave it, CPU eager's own call is that module's CPU shadow
(:mod:`.localization`).

Example:
    >>> from torch_xla_ext.parity import api
    >>> import torch
    >>> record = RunRecord(api.request(torch.nn.Linear(2, 2), (torch.ones(1, 2),), dtype="bf16"))
    >>> FIRST.run(record)
    >>> [(path, t.dtype) for path, t in record.cpu]
    [('', torch.bfloat16)]
"""

from __future__ import annotations

from torch_xla_ext import numerics
from torch_xla_ext.parity import capturing
from torch_xla_ext.parity.cpu import run_cpu
from torch_xla_ext.parity.pipeline import Stage
from torch_xla_ext.parity.record import RunRecord
from torch_xla_ext.parity.user_code import call

__all__ = ["DETERMINISTIC", "FIRST", "SECOND"]


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
