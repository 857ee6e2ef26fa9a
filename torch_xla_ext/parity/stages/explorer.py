"""The Model Explorer stage: the XLA run's program and its per-op error, written into the request's
``explorer_dir`` for Model Explorer (:func:`~torch_xla_ext.parity.explorer.write_model_explorer`).

Example:
    >>> import torch
    >>> from torch_xla_ext import parity
    >>> r = parity.verify(torch.nn.Linear(4, 4), (torch.randn(2, 4),), dtype="bf16", explorer_dir="explorer")
    >>> "model explorer" in r.seconds
    True
"""

from __future__ import annotations

from torch_xla_ext.parity.errors import ReplayError
from torch_xla_ext.parity.explorer import write_model_explorer
from torch_xla_ext.parity.pipeline import Stage
from torch_xla_ext.parity.record import RunRecord

__all__ = ["STAGE"]


def _write(record: RunRecord) -> None:
    """The XLA run's program (the replays' parse of it, or its own) and its per-op error."""
    run = record.xla.program
    replayed = record.replayed
    program = replayed.program if replayed is not None else None
    if program is None and run is not None and run.proto is not None and not record.request.emulate:
        program = run.programs()[0]
    if program is None:
        why = replayed.status if replayed is not None else (run.error if run is not None else "no program")
        raise ReplayError(f"explorer_dir: no program to write ({why.removeprefix('unavailable: ')})")
    write_model_explorer(program, run.args, record.request.explorer_dir, record.xla.module_paths)


STAGE = Stage("Model Explorer", _write, reads=("request", "xla"), optional=("replayed",), seconds="model explorer")
