"""The runner: a parity entry point is a list of stages over one run record (:mod:`.record`).

The runner alone owns what every stage would otherwise repeat:

* the early work (the replays' compile, started by the XLA run's stage in a thread) and its
  cleanup, on every path;
* memory: the collector skips the objects that existed before the run
  (:func:`~torch_xla_ext.parity.memory.collector_skips_existing_objects`), and after each stage
  the memory the stage declares it frees goes back (its ``release``);
* timing: each stage's seconds under its key, and the total;
* the user's exception: a :class:`~torch_xla_ext.parity.user_code.UserFailure` raised by any stage
  ends the run as the EXCEPTION verdict (the explanation words it); anything else raises;
* the caller's RNG state, left as it was.

Example:
    >>> import torch
    >>> from torch_xla_ext.parity.record import Request
    >>> def double(record):
    ...     record.cpu = [("", record.request.inputs[0] * 2)]
    >>> record = run(Request(None, None, False, (torch.ones(2),), {}, None), [Stage("CPU eager", double, "cpu")],
    ...              uses_xla=False)
    >>> record.cpu[0][1].tolist(), sorted(record.seconds)
    ([2.0, 2.0], ['cpu', 'total'])
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Sequence

from torch_xla_ext.parity import memory
from torch_xla_ext.parity.record import Request, RunRecord
from torch_xla_ext.parity.user_code import UserFailure, user_rng_preserved

__all__ = ["Stage", "run"]


@dataclasses.dataclass(frozen=True)
class Stage:
    """One stage: its ``name``, the function that runs it over the record, the key its seconds go
    under in the report (None: not timed apart), and what memory goes back when it ends
    (``memory.RELEASES``: "none", "trim" or "collect")."""

    name: str
    run: Callable[[RunRecord], None]
    seconds: str | None = None
    release: str = "none"

    def when(self, condition: bool) -> list["Stage"]:
        """``[self]`` if ``condition``, else ``[]``: a stage list reads as the run it makes."""
        return [self] if condition else []


def run(request: Request, stages: Sequence[Stage], *, device: str | None = None,
        uses_xla: bool = True) -> RunRecord:
    """Runs ``stages`` in order over a fresh record of ``request`` and returns it. A stage that sets
    ``record.done`` ends the run; a UserFailure ends it as ``record.failure``. ``uses_xla``: the
    run imports torch_xla, so it is imported before the collector freezes what exists (a process
    comparing a capture on the CPU never imports it)."""
    record = RunRecord(request, device=device)
    if uses_xla:
        import torch_xla  # noqa: F401  (deferred: a capture's comparison runs without torch_xla)
    t0 = time.perf_counter()
    with memory.collector_skips_existing_objects(), user_rng_preserved():
        try:
            for stage in stages:
                if record.done:
                    break
                t = time.perf_counter()
                stage.run(record)
                if stage.seconds is not None:
                    record.seconds[stage.seconds] = record.seconds.get(stage.seconds, 0.0) + time.perf_counter() - t
                memory.release(stage.release)
        except UserFailure as f:
            record.failure = f
        finally:
            record.early.close()
    record.seconds["total"] = time.perf_counter() - t0
    return record
