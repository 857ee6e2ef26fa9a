"""torch_xla.debug.metrics (the `_XLAC` counter and metric registry), in one place. (The step marker
and the devices are ``_compat/lazy.py``.)

Counters are named integers (``UncachedCompile``, ``CachedCompile``, ``ExecuteComputation``,
``MarkStep``, ``aten::<op>`` for CPU fallbacks, ``xla::<op>`` for lowered ops); metrics are
sample series whose ``total`` is an accumulator (nanoseconds for ``*Time`` metrics, bytes for
``*Data``). Anyone may call ``clear_counters()`` — the openxla Dynamo bridge does, once per FX
node while it looks for fallback ops — so a plain before/after diff can go negative.
:class:`CounterWindow` survives that by folding counters into an offset whenever they are
cleared inside the window.

Example:
    >>> import torch, torch_xla
    >>> from torch_xla_ext._compat import metrics
    >>> x = torch.ones(2, 3, device="xla")
    >>> with metrics.CounterWindow() as w:
    ...     for _ in range(2):
    ...         y = (x * 3 + 1).cpu()      # one graph, run twice: compiled, then found in the cache
    >>> c = w.delta().counters
    >>> c.get("UncachedCompile", 0) + c.get("CachedCompile", 0), c["ExecuteComputation"], c["xla::mul"]
    (2, 2, 2)
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Callable, Iterable

import torch_xla
import torch_xla.debug.metrics as _met

from torch_xla_ext.errors import InternalError

__all__ = [
    "MetricValue",
    "Snapshot",
    "CounterWindow",
    "counters",
    "metrics",
    "snapshot",
    "fallback_counters",
    "wait_device_ops",
    "counter_reader",
    "compile_count",
    "compile_samples",
    "metric_samples",
]


@dataclasses.dataclass(frozen=True)
class MetricValue:
    count: int  # samples ever recorded
    total: float  # accumulator (ns for *Time metrics, bytes for *Data metrics)


@dataclasses.dataclass(frozen=True)
class Snapshot:
    counters: dict[str, int]
    metrics: dict[str, MetricValue]

    def diff(self, before: "Snapshot") -> "Snapshot":
        """self - before, keeping only what moved."""
        c = {k: v - before.counters.get(k, 0) for k, v in self.counters.items()}
        m = {}
        for k, v in self.metrics.items():
            b = before.metrics.get(k, MetricValue(0, 0.0))
            if v.count != b.count:
                m[k] = MetricValue(v.count - b.count, v.total - b.total)
        return Snapshot({k: v for k, v in c.items() if v}, m)

    def counter(self, name: str) -> int:
        return self.counters.get(name, 0)

    def metric(self, name: str) -> MetricValue:
        return self.metrics.get(name, MetricValue(0, 0.0))


def counters(names: Iterable[str] | None = None) -> dict[str, int]:
    """Current counter values (all of them, or just ``names``; a counter never bumped is 0)."""
    xlac = torch_xla._XLAC
    wanted = xlac._xla_counter_names() if names is None else names
    out = {}
    for n in wanted:
        v = xlac._xla_counter_value(n)
        out[n] = int(v) if v is not None else 0
    return out


def metrics(names: Iterable[str] | None = None) -> dict[str, MetricValue]:
    """Current metric series as (count, total)."""
    wanted = _met.metric_names() if names is None else names
    out = {}
    for n in wanted:
        data = _met.metric_data(n)
        if data:
            out[n] = MetricValue(int(data[0]), float(data[1]))
    return out


def snapshot(counter_names: Iterable[str] | None = None, metric_names: Iterable[str] | None = None) -> Snapshot:
    return Snapshot(counters(counter_names), metrics(metric_names))


def fallback_counters(counter_values: dict[str, int]) -> dict[str, int]:
    """The ``aten::<op>`` counters: ops torch_xla ran through its CPU fallback (the same
    counters ``torch_xla.debug.metrics.executed_fallback_ops()`` lists)."""
    return {k: v for k, v in counter_values.items() if k.startswith("aten::") and v}


def wait_device_ops() -> None:
    """Blocks until every pending execution finished, so execution metrics are complete."""
    torch_xla._XLAC._xla_wait_device_ops([])


# ---- clear-proof counter windows -------------------------------------------------------------

_lock = threading.Lock()
_windows: list["CounterWindow"] = []
_original_clear: Callable[[], None] | None = None


def _clear_and_fold() -> None:
    with _lock:
        live = list(_windows)
    if live:
        # Executions bump ExecuteComputation on their own thread: one landing between the read
        # and the clear would be lost, so let in-flight work finish first (what torch_xla clears
        # is then exactly what was folded).
        wait_device_ops()
        current = counters()
        for w in live:
            w._fold(current)
    if _original_clear is None:
        raise InternalError("torch_xla_ext._compat.metrics: counters cleared with no window open")
    _original_clear()


class CounterWindow:
    """Counter and metric deltas over a region, correct even if counters are cleared inside it.

    While any window is open, ``torch_xla._XLAC._clear_xla_counters`` (what
    ``metrics.clear_counters()`` calls) first waits for in-flight executions (they bump counters
    on their own thread) and folds the current values into every open window.
    Code that clears and then restores some counters (the Dynamo bridge does) reports the restored
    amounts with :meth:`compensate`.
    """

    def __init__(self, metric_names: Iterable[str] | None = None):
        self._metric_names = None if metric_names is None else tuple(metric_names)
        self._offset: dict[str, int] = {}
        self._start: Snapshot | None = None

    def __enter__(self) -> "CounterWindow":
        global _original_clear
        self._start = snapshot(metric_names=self._metric_names)
        with _lock:
            if not _windows:
                _original_clear = torch_xla._XLAC._clear_xla_counters
                torch_xla._XLAC._clear_xla_counters = _clear_and_fold
            _windows.append(self)
        return self

    def __exit__(self, *exc) -> None:
        self._end = self.delta()
        with _lock:
            _windows.remove(self)
            if not _windows and _original_clear is not None:
                torch_xla._XLAC._clear_xla_counters = _original_clear

    def _fold(self, current: dict[str, int]) -> None:
        for k, v in current.items():
            self._offset[k] = self._offset.get(k, 0) + v

    def compensate(self, name: str, restored: int) -> None:
        """`restored` of counter `name` was folded before a clear and then added back."""
        self._offset[name] = self._offset.get(name, 0) - restored

    def delta(self) -> Snapshot:
        """Deltas from the window's start until now (or until it closed)."""
        if getattr(self, "_end", None) is not None:
            return self._end
        if self._start is None:
            raise InternalError("CounterWindow.delta: used before __enter__")
        now = snapshot(metric_names=self._metric_names)
        merged = dict(now.counters)
        for k, v in self._offset.items():
            merged[k] = merged.get(k, 0) + v
        return Snapshot(merged, now.metrics).diff(self._start)


# ---- reading counters from C++ --------------------------------------------------------------


def counter_reader() -> Callable[[str], Any]:
    """torch_xla's counter read itself (``_XLAC._xla_counter_value``: a name -> value or None),
    for C++ that reads counters on every sync without a Python frame in between."""
    return torch_xla._XLAC._xla_counter_value


# ---- timestamps --------------------------------------------------------------------------------


def metric_samples(name: str) -> list[tuple[float, float]]:
    """The recent samples torch_xla keeps of a metric, as (wall-clock seconds since the epoch,
    value): for ``*Time`` metrics the value is a duration in ns (torch_xla keeps a bounded
    window of the latest samples per metric)."""
    data = _met.metric_data(name)
    if not data:
        return []
    return [(float(t), float(v)) for t, v in data[2]]


_COMPILE_TIME = "CompileTime"


def compile_count() -> int:
    """XLA compiles so far in this process (``CompileTime`` samples ever recorded: every XLA
    compile, lazy or the Dynamo bridge's, adds one; clearing counters does not touch it)."""
    data = _met.metric_data(_COMPILE_TIME)
    return int(data[0]) if data else 0


def compile_samples(n: int) -> list[tuple[float, float]]:
    """The last ``n`` compiles as (wall-clock seconds, duration ns), oldest first; fewer when
    torch_xla's bounded sample window dropped some."""
    if n <= 0:
        return []
    return metric_samples(_COMPILE_TIME)[-n:]
