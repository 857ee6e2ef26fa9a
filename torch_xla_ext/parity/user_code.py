"""Running the user's code: what it raises on a backend becomes a verdict (``UserFailure``, turned
into ``Verdict.EXCEPTION`` by the runner), and the caller's RNG state is left as it was.

Only the user's function runs inside ``UserFailure``'s net; anything else (bad arguments, our own
code, parity's hooks inside the user's model) raises as it is.

Example:
    >>> try:
    ...     call("XLA", lambda: 1 / 0, (), {})
    ... except UserFailure as f:
    ...     f.stage, type(f.error).__name__
    ('XLA', 'ZeroDivisionError')
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Callable

import torch

from torch_xla_ext.errors import TorchXlaExtError

__all__ = ["UserFailure", "call", "user_rng_preserved"]


class UserFailure(Exception):
    """The user's function (or reference) raised while running at ``stage``."""

    def __init__(self, stage: str, error: BaseException):
        super().__init__(f"{stage}: {type(error).__name__}: {error}")
        self.stage, self.error = stage, error


def call(stage: str, fn: Callable, args: tuple, kwargs: dict) -> Any:
    """``fn(*args, **kwargs)``; what the user's code raises becomes a UserFailure at ``stage``.
    Our own errors (raised by parity's hooks inside it) pass through unchanged."""
    try:
        return fn(*args, **kwargs)
    except (TorchXlaExtError, UserFailure):
        raise
    except Exception as e:  # noqa: BLE001 - the user's code may raise anything: the EXCEPTION verdict records it
        raise UserFailure(stage, e) from e


@contextlib.contextmanager
def user_rng_preserved():
    """Runs are seeded; the caller's torch and XLA RNG states come back unchanged. A process that
    never imported torch_xla (comparing a capture on the CPU) is left without it."""
    xm = sys.modules.get("torch_xla.core.xla_model")
    xla_state = xm.get_rng_state() if xm is not None else None
    with torch.random.fork_rng(devices=[]):
        try:
            yield
        finally:
            if xm is not None:
                xm.set_rng_state(xla_state)
