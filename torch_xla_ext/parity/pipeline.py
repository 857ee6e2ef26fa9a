"""The runner: a parity entry point is a list of stages over one run record (:mod:`.record`).

Each stage declares what it reads and writes of the record (:class:`Stage`), and the runner
checks it: :func:`check` refuses a stage list in which a stage reads a field no earlier stage
writes (or one an earlier stage dropped), before anything runs, and :func:`run` fails a stage that
writes a field it did not declare. The runner alone owns what every stage would otherwise repeat:

* the early work (the replays' compile, started by the XLA run's stage in a thread): waited
  for when the stage that started it ends if it asked so (``Early.settle``: a program's run on
  XLA's threads, which torch's CPU stages must not share the cores with), and its cleanup, on
  every path;
* memory: the collector skips the objects that existed before the run
  (:func:`~torch_xla_ext.parity.memory.collector_skips_existing_objects`), and after each stage
  the memory the stage declares it frees goes back (its ``release``);
* timing: each stage's seconds under its key (``seconds``), and the total;
* the user's exception: a :class:`~torch_xla_ext.parity.user_code.UserFailure` raised by any stage
  ends the run as the EXCEPTION verdict (the explanation words it); anything else raises;
* the caller's RNG state, left as it was.

A stage's function returns None (it ran), :data:`END` (it ran, and the run ends: a
NONDETERMINISTIC_REFERENCE, outputs of other shapes) or :data:`SKIPPED` (there was nothing for it
to do: neither timed nor followed by its release).

Example:
    >>> import torch
    >>> from torch_xla_ext.parity.record import Request
    >>> def double(record):
    ...     record.cpu = [("", record.request.inputs[0] * 2)]
    >>> stages = [Stage("CPU eager", double, reads=("request",), writes=("cpu",), seconds="cpu")]
    >>> record = run(Request(None, None, False, (torch.ones(2),), {}, None), stages, uses_xla=False)
    >>> record.cpu[0][1].tolist(), sorted(record.seconds)
    ([2.0, 2.0], ['cpu', 'total'])
    >>> check([Stage("compare", lambda record: None, reads=("cpu",))])
    Traceback (most recent call last):
    ...
    torch_xla_ext.errors.InternalError: stage 'compare' reads 'cpu', which no earlier stage writes
"""

from __future__ import annotations

import dataclasses
import enum
import time
from typing import Callable, Literal, Sequence

from torch_xla_ext.errors import InternalError
from torch_xla_ext.parity import memory
from torch_xla_ext.parity.record import Request, RunRecord
from torch_xla_ext.parity.user_code import UserFailure, user_rng_preserved

__all__ = ["END", "RUNNER_FIELDS", "SKIPPED", "Outcome", "Stage", "check", "run"]

# The fields a record has before any stage runs (the request) or that the runner alone writes.
RUNNER_FIELDS = ("request", "early", "seconds", "failure")


class Outcome(enum.Enum):
    """What a stage's function may return besides None (it ran, the run goes on)."""

    END = "end"  # it ran, and the run ends here
    SKIPPED = "skipped"  # there was nothing for it to do (not timed)


END = Outcome.END
SKIPPED = Outcome.SKIPPED


@dataclasses.dataclass(frozen=True)
class Stage:
    """One stage: its ``name``, the function that runs it over the record, the record fields it
    ``reads`` (an earlier stage must write each), those it reads only when an earlier stage wrote
    them (``optional``), those it ``writes``, and those it ``drops`` (sets to None: no later stage
    may read them); the key its seconds go under in the report (None: counted in the total only);
    and what memory goes back when it ends (``memory.RELEASES``: "none", "trim" or "collect")."""

    name: str
    run: Callable[[RunRecord], Outcome | None]
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    drops: tuple[str, ...] = ()
    seconds: str | None = None
    release: Literal["none", "trim", "collect"] = "none"

    def when(self, condition: bool) -> list["Stage"]:
        """``[self]`` if ``condition``, else ``[]``: a stage list reads as the run it makes."""
        return [self] if condition else []


def check(stages: Sequence[Stage], record_type: type[RunRecord] = RunRecord) -> None:
    """Refuses (InternalError) a stage list that cannot run: a field a stage reads that no earlier
    stage writes (or that an earlier stage dropped), a field the record does not have, or a
    runner's field a stage would write."""
    fields = {f.name for f in dataclasses.fields(record_type)}
    written = set(RUNNER_FIELDS)
    for stage in stages:
        for name in (*stage.reads, *stage.writes, *stage.optional, *stage.drops):
            if name not in fields:
                raise InternalError(f"stage {stage.name!r} names {name!r}, which {record_type.__name__} does not have")
        owned = sorted(set(stage.writes + stage.drops) & set(RUNNER_FIELDS))
        if owned:
            raise InternalError(f"stage {stage.name!r} writes {owned[0]!r}, which only the runner writes")
        for name in stage.reads:
            if name not in written:
                raise InternalError(f"stage {stage.name!r} reads {name!r}, which no earlier stage writes")
        written |= set(stage.writes)
        written -= set(stage.drops)


def run(request: Request, stages: Sequence[Stage], *, record: RunRecord | None = None,
        uses_xla: bool = True) -> RunRecord:
    """Runs ``stages`` in order over ``record`` (default: a fresh :class:`RunRecord` of
    ``request``) and returns it. A stage that returns END ends the run; a UserFailure ends it as
    ``record.failure``. ``uses_xla``: the run imports torch_xla, so it is imported before the
    collector freezes what exists (a process comparing a capture on the CPU never imports it)."""
    record = RunRecord(request) if record is None else record
    check(stages, type(record))
    if uses_xla:
        import torch_xla  # noqa: F401  (deferred: a capture's comparison runs without torch_xla)
    fields = [f.name for f in dataclasses.fields(record)]
    t0 = time.perf_counter()
    with memory.collector_skips_existing_objects(), user_rng_preserved():
        try:
            for stage in stages:
                before = {name: id(getattr(record, name)) for name in fields}
                t = time.perf_counter()
                outcome = stage.run(record)
                record.early.settle()
                elapsed = time.perf_counter() - t
                _check_writes(stage, record, before)
                if outcome is not SKIPPED:  # a stage that had nothing to do is neither timed nor released after
                    if stage.seconds is not None:
                        record.seconds[stage.seconds] = record.seconds.get(stage.seconds, 0.0) + elapsed
                    memory.release(stage.release)
                if outcome is END:
                    break
        except UserFailure as f:
            record.failure = f
        finally:
            record.early.close()
    record.seconds["total"] = time.perf_counter() - t0
    return record


def _check_writes(stage: Stage, record: RunRecord, before: dict[str, int]) -> None:
    """A stage wrote only what it declared (a field holding another object than before)."""
    allowed = set(stage.writes) | set(stage.drops) | {"early", "seconds"}
    for name, was in before.items():
        if name not in allowed and id(getattr(record, name)) != was:
            raise InternalError(f"stage {stage.name!r} wrote {name!r}, which it does not declare")
    for name in stage.drops:
        if name not in stage.writes and getattr(record, name) is not None:
            raise InternalError(f"stage {stage.name!r} declares it drops {name!r} but left it set")
