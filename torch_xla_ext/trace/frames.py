"""Whose code a Python frame is, what made torch_xla run or compile a graph, and the interned
code sites records refer to.

A frame list is innermost first, each ``(function, file, line)``: the frames torch_xla wrote in
its analysis (``_compat.xla_debug``), or the live stack of a step marker. Library code is torch,
torch_xla, torch_xla_ext and Python's standard library; the *site* of an event is the innermost
frame that is none of those (the user's script, or a library of theirs such as transformers'
Trainer that called the sync).

Example:
    >>> frames = [("sync", "/v/site-packages/torch_xla/torch_xla.py", 87),
    ...           ("next", "/v/site-packages/torch_xla/distributed/parallel_loader.py", 40),
    ...           ("main", "/home/me/train.py", 31)]
    >>> t = classify(frames, cause="user torch_xla.sync")
    >>> t.kind, t.site
    ('data_loader', '/home/me/train.py:31')
"""

from __future__ import annotations

import functools
import linecache
import os
import re
import sysconfig
from typing import Any, Callable, Iterable, Sequence

from torch_xla_ext.trace.schema import Site, Trigger

__all__ = ["HOST_READ_OPS", "SiteTable", "classify", "is_library", "live_frames", "user_frame"]

Frame = tuple[str, str, int]

_SEP = os.sep


def _library_roots() -> tuple[str, ...]:
    roots = set()
    for key in ("stdlib", "platstdlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            roots.add(os.path.realpath(p) + _SEP)
    return tuple(sorted(roots))


_STDLIB = _library_roots()
_LIBRARY_PARTS = tuple(f"{_SEP}{name}{_SEP}" for name in ("torch", "torch_xla", "torch_xla_ext"))
# Decorator modules whose wrapper frames stand between a caller and what it called (torch_xla's
# ``@deprecated`` mark_step, for one).
_WRAPPERS = tuple(f"{_SEP}{name}" for name in ("typing_extensions.py", "wrapt", "decorator.py"))
_THIRD_PARTY = re.compile(r"[/\\](site|dist)-packages[/\\]")
_cache: dict[str, bool] = {}


def is_library(path: str) -> bool:
    """torch, torch_xla, torch_xla_ext, a decorator's wrapper, generated code (``<eval_with_key>.3``,
    FX's) or the standard library (not site-packages in general)."""
    hit = _cache.get(path)
    if hit is None:
        p = path.replace("/", _SEP)
        hit = (any(part in p for part in _LIBRARY_PARTS) or p.startswith("<") or any(w in p for w in _WRAPPERS)
               or any(os.path.realpath(p).startswith(r) and not _THIRD_PARTY.search(p) for r in _STDLIB))
        _cache[path] = hit
    return hit


def user_frame(frames: Sequence[Frame]) -> Frame | None:
    """The innermost frame that is not library code."""
    for f in frames:
        if not is_library(f[1]):
            return f
    return None


def live_frames(frame: Any, limit: int = 64) -> list[Frame]:
    """A live frame and its callers as ``(function, file, line)``, innermost first."""
    out = []
    while frame is not None and len(out) < limit:
        code = frame.f_code
        out.append((code.co_name, code.co_filename, frame.f_lineno))
        frame = frame.f_back
    return out


def _is(f: Frame, suffix: str, *functions: str) -> bool:
    return f[1].replace("\\", "/").endswith(suffix) and (not functions or f[0] in functions)


def _in_bridge(f: Frame) -> bool:
    p = f[1].replace("\\", "/")
    return "/torch_xla/_dynamo/" in p or p.endswith("/torch_xla/core/dynamo_bridge.py") or \
        p.endswith("/torch/_dynamo/backends/torchxla.py")


# A host read, by the text of the line that made it (the first match names it).
HOST_READ_OPS = (
    ("item", re.compile(r"\.item\s*\(")),
    ("tolist", re.compile(r"\.tolist\s*\(")),
    ("numpy", re.compile(r"\.numpy\s*\(")),
    ("cpu", re.compile(r"\.cpu\s*\(|\.to\s*\(\s*(device\s*=\s*)?(torch\.device\s*\()?['\"]cpu")),
    ("print", re.compile(r"\bprint\s*\(|\blog(ger)?\.\w+\s*\(|\blogging\.\w+\s*\(")),
    ("format", re.compile(r"\bf['\"]|\.format\s*\(|\bstr\s*\(|\brepr\s*\(")),
    ("bool", re.compile(r"^\s*(if|elif|while|assert)\b|\bif\b.*\belse\b|\bbool\s*\(")),
    ("scalar", re.compile(r"\b(float|int)\s*\(")),
)


def classify(frames: Sequence[Frame], cause: str = "") -> Trigger:
    """What made torch_xla run a graph (a fresh Trigger; the same frames every step are worked out
    once): ``kind`` (sync, data_loader, optimizer_step, torch_xla.compile, profiler, dynamo,
    dynamo_inputs, dynamo_run, host_read, other), the user ``site`` ("file:line"), its
    ``function`` and ``code``, and for a host read the ``op``."""
    return Trigger(**_classify(tuple(frames), cause))


@functools.lru_cache(maxsize=4096)
def _classify(frames: tuple[Frame, ...], cause: str) -> dict[str, Any]:
    user = user_frame(frames)
    out: dict[str, Any] = {"kind": "other", "site": "", "op": "", "function": "", "code": ""}
    if user is not None:
        out.update(site=f"{user[1]}:{user[2]}", function=user[0], code=_code(user))
    marker = next((i for i, f in enumerate(frames)
                   if _is(f, "/torch_xla/torch_xla.py", "sync") or _is(f, "/core/xla_model.py", "mark_step")), None)
    if any(_in_bridge(f) for f in frames) or "dynamo" in cause:
        if marker is not None:
            out["kind"] = "dynamo_inputs"  # the bridge syncing a graph's inputs
        elif any(_is(f, "/torch_xla/_dynamo/dynamo_bridge.py", "extract_graph_helper") for f in frames) \
                or "compiling a FX graph" in cause:
            out["kind"] = "dynamo"  # one of the bridge's XLA graphs (a partition of an AOT graph)
        else:
            out["kind"] = "dynamo_run"  # a value the bridge needed while running a compiled graph
        return out
    if marker is not None:
        callers = frames[marker + 1:]
        nxt = next((f for f in callers if not _is(f, "/core/xla_model.py", "mark_step")), None)
        if nxt is not None and _is(nxt, "/distributed/parallel_loader.py"):
            out["kind"] = "data_loader"
        elif nxt is not None and _is(nxt, "/torch_xla/torch_xla.py", "_clear_pending_ops_before_compile"):
            out["kind"] = "torch_xla.compile_entry"
        elif nxt is not None and _is(nxt, "/torch_xla/torch_xla.py"):
            out["kind"] = "torch_xla.compile"
        elif nxt is not None and _is(nxt, "/debug/profiler.py"):
            out["kind"] = "profiler"
        elif nxt is not None and _is(nxt, "/core/xla_model.py", "optimizer_step"):
            out["kind"] = "optimizer_step"
        else:
            out["kind"] = "sync"
        return out
    out["kind"] = "host_read"
    if any(_is(f, "/torch/_tensor_str.py") or _is(f, "/torch/_tensor.py", "__repr__", "__format__", "__str__")
           for f in frames):
        out["op"] = "print"
    elif user is not None:
        out["op"] = next((name for name, rx in HOST_READ_OPS if rx.search(out["code"])), "")
    return out


def _code(f: Frame) -> str:
    return linecache.getline(f[1], f[2]).strip()[:200]


def frame_strings(frames: Iterable[Frame], limit: int = 12) -> list[str]:
    """``function (file:line)`` of the first ``limit`` frames."""
    return [f"{fn} ({path}:{line})" for fn, path, line in list(frames)[:limit]]


class SiteTable:
    """Interns code sites: the first use of a site writes its :class:`Site` record through ``emit``."""

    def __init__(self, emit: Callable[[Any], None]):
        self._emit = emit
        self._ids: dict[tuple[str, int, str], int] = {}

    def id(self, frame: Frame | None) -> int:
        if frame is None:
            return -1
        key = (frame[1], int(frame[2]), frame[0])
        sid = self._ids.get(key)
        if sid is None:
            sid = self._ids[key] = len(self._ids)
            self._emit(Site(id=sid, file=key[0], line=key[1], function=key[2], code=_code(frame)))
        return sid

    def reset(self) -> None:
        """Forget every site (a forked child writes a new file)."""
        self._ids.clear()
