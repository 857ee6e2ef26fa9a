"""Optional plots: matplotlib is an extra (``pip install 'torch-xla-ext[plot]'``), not a
dependency, so a training image without it still gets every number and report.

A component that draws asks :func:`pyplot` for matplotlib's pyplot; without matplotlib it gets
``None`` and a sentence saying which plot was skipped and how to get it, and the skip is recorded
so the doctor can list it in its report (:func:`take_skipped`).

Example:
    >>> from torch_xla_ext import _plot
    >>> plt, why = _plot.pyplot("numerics_ulp.png")   # matplotlib is pinned in the project's venv
    >>> plt.__name__, why
    ('matplotlib.pyplot', None)
    >>> fig = plt.figure(); fig.savefig("numerics_ulp.png"); plt.close(fig)

Without matplotlib ``plt`` is None and ``why`` is the sentence naming the plot and the extra.
"""

from __future__ import annotations

import importlib.util
import threading
from typing import Any

__all__ = ["EXTRA", "available", "pyplot", "take_skipped"]

EXTRA = "pip install 'torch-xla-ext[plot]'"

_lock = threading.Lock()
_skipped: list[str] = []


def available() -> bool:
    """Whether matplotlib can be imported here."""
    return importlib.util.find_spec("matplotlib") is not None


def pyplot(plot: str) -> tuple[Any | None, str | None]:
    """``(matplotlib.pyplot, None)`` with a non-interactive backend, or ``(None, message)`` when
    matplotlib is not installed; the message names ``plot`` (e.g. the PNG's file name) and the
    extra that installs matplotlib, and the skip is recorded for :func:`take_skipped`."""
    if not available():
        message = f"plot {plot} skipped: matplotlib is not installed ({EXTRA})"
        with _lock:
            _skipped.append(message)
        return None, message
    import matplotlib

    # Files only: never open a window (a training job has no display). A backend the user chose
    # before pyplot was imported is left alone.
    import sys

    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt, None


def take_skipped() -> list[str]:
    """The skip messages recorded since the last call (and forgets them)."""
    with _lock:
        out = list(_skipped)
        _skipped.clear()
    return out
