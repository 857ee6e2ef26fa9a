"""A bounded cache of things that are slow to make (lowered JAX functions, compiled XLA
executables): the least recently used entry goes past ``maxsize``, and an entry is made outside
the cache's lock, so a slow make (seconds of XLA compilation) never blocks a caller whose entry is
cached. Two callers asking for the same missing key make it once: the second waits for the first.

Example:
    >>> cache = MakeOnceCache(maxsize=2)
    >>> [cache.get("a", lambda: "made a"), cache.get("a", lambda: "not called")]
    ['made a', 'made a']
    >>> for key in "bc":
    ...     _ = cache.get(key, lambda: key.upper())
    >>> cache.keys(), cache.info()
    (['b', 'c'], CacheStats(made=3, hits=1, entries=2))
"""

from __future__ import annotations

import collections
import threading
from typing import Any, Callable, Hashable, NamedTuple

__all__ = ["CacheStats", "MakeOnceCache"]


class CacheStats(NamedTuple):
    made: int     # entries made (cache misses)
    hits: int
    entries: int  # entries held now


class _Making:
    """A key being made by one caller; others wait on it."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None


class MakeOnceCache:
    """``get(key, make)``: the cached value of ``key``, or ``make()``'s, kept (least recently used
    first out past ``maxsize``). ``make`` runs without the cache's lock held; if it raises, nothing
    is kept and every caller waiting for that key gets the same exception."""

    def __init__(self, maxsize: int):
        if maxsize < 1:
            raise ValueError(f"maxsize: expected >= 1, got {maxsize}")
        self.maxsize = maxsize
        self._lock = threading.Lock()
        self._entries: collections.OrderedDict[Hashable, Any] = collections.OrderedDict()
        self._making: dict[Hashable, _Making] = {}
        self._made = 0
        self._hits = 0

    def get(self, key: Hashable, make: Callable[[], Any]) -> Any:
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                self._hits += 1
                return self._entries[key]
            making = self._making.get(key)
            mine = making is None
            if mine:
                making = self._making[key] = _Making()
        if not mine:
            making.done.wait()
            if making.error is not None:
                raise making.error
            with self._lock:
                self._hits += 1
            return making.value
        try:
            value = make()
        except BaseException as e:  # whatever make() raised (KeyboardInterrupt too): the waiters get it, then re-raised
            making.error = e
            with self._lock:
                del self._making[key]
            making.done.set()
            raise
        making.value = value
        with self._lock:
            del self._making[key]
            self._made += 1
            self._entries[key] = value
            while len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)
        making.done.set()
        return value

    def keys(self) -> list[Hashable]:
        """The keys held, least recently used first."""
        with self._lock:
            return list(self._entries)

    def info(self) -> CacheStats:
        with self._lock:
            return CacheStats(self._made, self._hits, len(self._entries))

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def clear(self) -> None:
        """Drops every entry (the counts keep counting; keys being made are kept when made)."""
        with self._lock:
            self._entries.clear()
