"""The memory policy of a parity run, in one place: what the garbage collector scans while it runs,
and when freed memory goes back to the operating system.

At real sizes (GPT-2 355M, a 0.9B Llama) a run holds several copies of a model in turn (CPU eager
in the run's dtype, the fp64 golden, the device's copy, the replays' arguments); each stage's copy
must be gone before the next one is made, or the peak is their sum (docs/scale.md). Two tools:

* :func:`collector_skips_existing_objects`: for a run's duration the collector passes over the
  objects that existed before it (``gc.freeze``): a full collection then scans what the run made,
  not the half a million objects torch, transformers and torch_xla bring (0.2-0.3 s each). It
  never unfreezes objects it did not freeze: when the caller (or an enclosing or concurrent
  parity run) has frozen objects of its own, it leaves the collector as it is.
* :func:`plain_pages`: a large array the run fills at once (a replay's widened weights) in
  memory mapped for it alone, outside NumPy's allocator (see there).
* :func:`release`: after a stage (the runner calls it, per the stage's declared policy; no stage
  calls it at its end), or inside one stage's work that consumes large buffers in turn (a replay's
  arguments as it widens them, the rounded replay's executable before the unrounded replay runs, a
  large module call inside the golden run's hooks): a collection (``"collect"``) and glibc's
  ``malloc_trim``, or only the trim (``"trim"``: what reference counting freed).

Example:
    >>> with collector_skips_existing_objects():
    ...     release("collect")
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import mmap
import os
import threading
from typing import Any, Iterator

__all__ = ["AHEAD_SHARE", "RELEASES", "collector_skips_existing_objects", "fits_ahead", "free_bytes", "plain_pages",
           "release"]

# What a stage hands back when it ends: nothing, freed heap pages (a trim: cheap), or a garbage
# collection and a trim (for what sits in reference cycles: JAX's execution objects, torch_xla's).
RELEASES = ("none", "trim", "collect")

# The share of the machine's free memory that copies made ahead of their turn may take (a replay's
# widened arguments, made beside the XLA run; in their turn a replay may consume the arguments as
# it widens them).
AHEAD_SHARE = 0.25

_POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # Linux's
_LOCK = threading.Lock()
_DEPTH = 0  # parity runs in progress in this process (nested or in other threads)
_FROZE = False  # whether the outermost of them froze the collector (and so must unfreeze it)
_TRIM: Any = None


@contextlib.contextmanager
def collector_skips_existing_objects() -> Iterator[None]:
    """While active, the garbage collector passes over every object that existed when it began.

    The outermost parity run in the process collects once (the garbage that existed before is
    freed, not kept for the run), freezes what lives, and hands it back to the collector when it
    ends; nothing made inside is frozen. A run inside another one, or beside it in another thread,
    changes nothing. When objects were already frozen before the outermost run began (the caller's
    own ``gc.freeze``), it neither freezes nor unfreezes: ``gc.unfreeze`` cannot tell the caller's
    frozen objects from ours, and they must stay frozen. Import what the run will import first
    (torch_xla's objects are a third of the process's), so that it is frozen too.

    Example:
        >>> import gc
        >>> with collector_skips_existing_objects():
        ...     gc.get_freeze_count() > 0
        True
        >>> gc.get_freeze_count()
        0
    """
    global _DEPTH, _FROZE
    with _LOCK:
        _DEPTH += 1
        if _DEPTH == 1:
            _FROZE = gc.get_freeze_count() == 0
            if _FROZE:
                gc.collect()
                gc.freeze()
    try:
        yield
    finally:
        with _LOCK:
            _DEPTH -= 1
            if _DEPTH == 0 and _FROZE:
                gc.unfreeze()
                _FROZE = False


def free_bytes() -> int:
    """The machine's memory available to a new allocation without swapping (Linux's MemAvailable;
    elsewhere the free pages), in bytes; 0 when it cannot be read.

    Example:
        >>> free_bytes() > 0
        True
    """
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0


def fits_ahead(nbytes: int) -> bool:
    """Whether ``nbytes`` of copies made ahead of their turn fit in :data:`AHEAD_SHARE` of the free
    memory.

    Example:
        >>> fits_ahead(1 << 20), fits_ahead(1 << 60)
        (True, False)
    """
    return nbytes <= AHEAD_SHARE * free_bytes()


def plain_pages(shape: tuple[int, ...], dtype: Any) -> Any:
    """An uninitialised writable NumPy array of ``shape`` and ``dtype`` in an anonymous mapping of
    its own (page-aligned; unmapped when the array and its views are gone).

    NumPy asks the kernel to back each of its large buffers with huge pages (``madvise``); where
    transparent huge pages are granted on request only after compacting memory (``defrag`` set to
    ``madvise``, this machine kind's setting), filling fresh buffers of a model's size costs several
    times what plain pages do: widening GPT-2 124M's float32 weights to float64 took 2.1 s in
    NumPy's buffers against 0.4 s in these.

    Example:
        >>> import numpy as np
        >>> a = plain_pages((2, 3), np.float64)
        >>> a[:] = 1.5
        >>> a.sum(), a.flags.writeable, a.ctypes.data % mmap.PAGESIZE
        (np.float64(9.0), True, 0)
    """
    import numpy as np

    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    # Populated at once: the kernel maps every page in one call, not one fault per page (widening
    # GPT-2 124M's weights: 0.38-0.42 s against 0.47-0.50 s).
    buf = mmap.mmap(-1, max(count * dtype.itemsize, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _POPULATE)
    return np.frombuffer(buf, dtype, count=count).reshape(shape)


def release(level: str = "collect") -> None:
    """Hands memory back: ``"collect"`` runs a garbage collection, then (with ``"trim"`` too) glibc's
    ``malloc_trim`` returns freed heap pages to the OS (a no-op elsewhere). Weights freed in pieces
    smaller than glibc's mmap threshold otherwise stay in the process's heap, and the next stage's
    buffers come on top of them. ``"none"`` does nothing.

    Example:
        >>> release("trim")
    """
    global _TRIM
    if level not in RELEASES:
        raise ValueError(f"level: expected one of {RELEASES}, got {level!r}")
    if level == "none":
        return
    if level == "collect":
        gc.collect()
    if _TRIM is None:
        try:
            _TRIM = ctypes.CDLL(None).malloc_trim
        except (OSError, AttributeError):
            _TRIM = False
    if _TRIM:
        _TRIM(0)
