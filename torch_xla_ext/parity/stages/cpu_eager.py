"""Stage 1, CPU eager: the reference on the CPU in the run's dtype; and, once the outputs are
compared, a second time where XLA's outputs leave the first run's beyond the tolerances, to catch a
reference that is not deterministic (then nothing else can judge XLA: the run ends as
NONDETERMINISTIC_REFERENCE). Where every output is within the tolerances the verdict holds against
the run it was compared with, and no second run is made.

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
from torch_xla_ext.parity.pipeline import END, SKIPPED, Outcome, Stage
from torch_xla_ext.parity.record import RunRecord
from torch_xla_ext.parity.report import Verdict
from torch_xla_ext.parity.user_code import call

__all__ = ["DETERMINISTIC", "FIRST", "SECOND"]


def _first(record: RunRecord) -> None:
    r = record.request
    recorder = capturing.Recorder() if r.localize else None
    record.cpu, _ = run_cpu(r.reference, r.inputs, r.kwargs, r.dtype, r.seed, run=recorder or call)
    if recorder is not None:
        record.cpu_calls = recorder.calls


def _second(record: RunRecord) -> Outcome | None:
    """The second run, where an output left CPU eager's beyond the tolerances (else SKIPPED),
    compared with the first at once (its outputs go); a difference is kept for
    :data:`DETERMINISTIC`, which ends the run before the frontend's checks."""
    if Verdict.of(record.outputs) is Verdict.PASS:
        return SKIPPED
    r = record.request
    again, _ = run_cpu(r.reference, r.inputs, r.kwargs, r.dtype, r.seed, stage="second CPU eager")
    for (path, a), (_, b) in zip(record.cpu, again):
        cmp = numerics.compare(a, b, rtol=0.0, atol=0.0, equal_nan=True)
        if not cmp.passed:
            record.nondeterminism = (path, cmp)
            return None
    return None


def _deterministic(record: RunRecord) -> Outcome | None:
    """Ends the run when the two CPU eager runs differed."""
    return END if record.nondeterminism is not None else None


FIRST = Stage("CPU eager", _first, reads=("request",), writes=("cpu", "cpu_calls"), seconds="cpu", release="trim")
SECOND = Stage("second CPU eager", _second, reads=("request", "cpu", "outputs"), writes=("nondeterminism",),
               seconds="second cpu", release="trim")
DETERMINISTIC = Stage("CPU eager against itself", _deterministic, reads=("nondeterminism",))
