"""torch's structured trace (``TORCH_TRACE``), the log tlparse reads: the one place that calls
``torch._logging`` (private) for it.

What is used, and why:
  * ``torch._logging.trace_structured("artifact", ..., compile_id=...)``: an artifact lands in
    tlparse's directory of the compile id in its record. The bridge extracts graphs and XLA
    runs them after Dynamo's compile has ended, so the compile id is passed explicitly rather
    than taken from ``CompileContext`` (which is empty by then).
  * ``trace_structured("chromium_event", ...)``: a Chrome trace event, which tlparse gathers
    with Dynamo's own (``dynamo_timed`` phases, ``args.compile_id``) into ``chromium_events.json``.
  * ``torch._logging._internal.trace_log`` and its ``LazyTraceHandler``: whether a trace is being
    written, and its file. torch names the file ``dedicated_log_torch_trace_rank_<r>_*.log`` only
    when torch.distributed is initialized; a job launched with RANK/WORLD_SIZE but no process
    group would get an unranked file, which ``tlparse --all-ranks-html`` cannot place, so
    :func:`name_file_by_rank` opens it under the ranked name before anything is written.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from torch_xla_ext import _json

__all__ = ["active", "artifact", "chromium_event", "log_file", "name_file_by_rank", "trace_dir"]


def _trace_log() -> Any:
    from torch._logging import _internal

    return _internal.trace_log


def _lazy_handler() -> Any:
    from torch._logging import _internal

    for h in _trace_log().handlers:
        if isinstance(h, _internal.LazyTraceHandler):
            return h
    return None


def active() -> bool:
    """True when someone reads torch's structured-trace records in this process: the
    ``TORCH_TRACE`` file, or a listener attached to its logger. torch always installs a
    ``LazyTraceHandler``; without ``TORCH_TRACE`` its directory is None and it removes itself at
    the first record (writing nothing), so it does not count."""
    from torch._logging import _internal

    return any(not (isinstance(h, _internal.LazyTraceHandler) and h.root_dir is None)
               for h in _trace_log().handlers)


def trace_dir() -> str | None:
    """The directory torch writes its trace file in (``TORCH_TRACE``), if it writes one."""
    h = _lazy_handler()
    return getattr(h, "root_dir", None) if h is not None else None


def log_file() -> str | None:
    """The trace file, once torch has opened it (at its first record)."""
    h = _lazy_handler()
    stream = getattr(h, "stream", None) if h is not None else None
    return getattr(stream, "name", None)


def name_file_by_rank(rank: int) -> str | None:
    """Opens torch's trace file as ``dedicated_log_torch_trace_rank_<rank>_*.log`` when torch has
    not opened it yet and would not name it by rank itself (no process group); returns the file
    or None when there is nothing to do."""
    import torch.distributed as dist

    h = _lazy_handler()
    if h is None or h.stream is not None or h.root_dir is None:
        return None
    if dist.is_available() and dist.is_initialized():
        return None  # torch names it by the process group's rank
    os.makedirs(h.root_dir, exist_ok=True)
    h.acquire()
    try:
        if h.stream is None:
            h.stream = tempfile.NamedTemporaryFile(mode="w+", suffix=".log", dir=h.root_dir, delete=False,
                                                   prefix=f"dedicated_log_torch_trace_rank_{int(rank)}_")
    finally:
        h.release()
    return h.stream.name


def artifact(name: str, payload: Any, compile_id: str | None) -> None:
    """Writes a JSON artifact ``name`` into the trace, under ``compile_id`` (a Dynamo compile id
    string such as ``"1/0"`` or ``"!0/1/0"``), or under no compile id (tlparse's ``-_-_-_-``).
    A string torch cannot parse as a compile id is a ValueError (nothing written)."""
    import torch._guards
    from torch._logging import trace_structured

    cid = torch._guards.CompileId.from_string(compile_id) if compile_id else None
    trace_structured("artifact", metadata_fn=lambda: {"name": name, "encoding": "json"},
                     payload_fn=lambda: _json.dumps(payload, indent=1, default=str), compile_id=cid,
                     expect_trace_id=cid is not None)


def chromium_event(event: dict[str, Any]) -> None:
    """Writes one Chrome trace event (``ts`` in microseconds of ``time.time_ns()``, the clock
    Dynamo's own chromium events use) into the trace."""
    from torch._logging import trace_structured

    trace_structured("chromium_event", payload_fn=lambda: event, suppress_context=False, expect_trace_id=False,
                     record_logging_overhead=False)
