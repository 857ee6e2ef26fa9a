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


# The packages whose frames are never the model's code: the model runs through them.
_LIBRARIES = ("torch", "torch_xla", "torchax", "jax", "jaxlib", "torch_xla_ext")


def _library_dirs() -> tuple[str, ...]:
    import importlib.util
    import os
    import sysconfig

    dirs = [sysconfig.get_paths()["stdlib"]]
    for name in _LIBRARIES:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            # Both where the package is imported from and where its files are: under Bazel a
            # package's folder in the runfiles is real and its files are links into the source tree.
            dirs += [os.path.dirname(spec.origin), os.path.dirname(os.path.realpath(spec.origin))]
    return tuple(dict.fromkeys(os.path.realpath(d) + os.sep for d in dirs))


_LIBRARY_DIRS: tuple[str, ...] | None = None


def site(frames: list[tuple[Any, int]], modules: dict[int, str]) -> tuple[str | None, str | None, str | None]:
    """(module path, "file:line", the line's text) of a stack given innermost frame first: the
    innermost frame outside torch, torch_xla, torchax, JAX, this package and the standard library
    is the model's line; the innermost frame whose ``self`` is one of ``modules`` ({id(submodule):
    path}) names the module. None for what no frame gives.

    Example:
        >>> import sys
        >>> site([(sys._getframe(), 1)], {})[0] is None
        True
    """
    import linecache
    import os

    global _LIBRARY_DIRS
    if _LIBRARY_DIRS is None:
        _LIBRARY_DIRS = _library_dirs()
    module = source = text = None
    for frame, lineno in frames:
        filename = frame.f_code.co_filename
        if (source is None and not filename.startswith("<") and not filename.startswith(_LIBRARY_DIRS)
                and not os.path.realpath(filename).startswith(_LIBRARY_DIRS)):
            source = f"{filename}:{lineno}"
            text = linecache.getline(filename, lineno).strip() or None
        if module is None:
            owner = frame.f_locals.get("self")
            if owner is not None and id(owner) in modules:
                module = modules[id(owner)]
        if source is not None and module is not None:
            break
    return module, source, text


def live_frames(frame: Any) -> list[tuple[Any, int]]:
    """A live frame and its callers as (frame, line), innermost first."""
    out = []
    while frame is not None:
        out.append((frame, frame.f_lineno))
        frame = frame.f_back
    return out


def traceback_frames(error: BaseException) -> list[tuple[Any, int]]:
    """(frame, line) of an exception's traceback and of the exceptions it was raised from, innermost
    first."""
    out: list[tuple[Any, int]] = []
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        tb, frames = e.__traceback__, []
        while tb is not None:
            frames.append((tb.tb_frame, tb.tb_lineno))
            tb = tb.tb_next
        out = frames[::-1] + out
        e = e.__cause__ or e.__context__
    return out
