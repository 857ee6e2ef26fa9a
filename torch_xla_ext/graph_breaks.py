"""Graph-break ledger: where a torch_xla program leaves the one-big-graph path, per stage.

Three layers break a program into pieces, and each is counted here in one report:
  * Dynamo: FX graphs captured, graph breaks (reason + user frame), recompiles.
  * the openxla bridge: per FX graph, its XLA partitions and the FX nodes left to eager around
    CPU-fallback ops (``partition_fx_graph_for_cpu_fallback``).
  * XLA / lazy tensors: compiles (uncached and cached), executions, device->host transfers and
    their times, per graph hash where the bridge exposes it; syncs, and executions a host read
    forced outside a sync.

Example:
    >>> from torch_xla_ext import graph_breaks
    >>> with graph_breaks.account() as ledger:
    ...     loss = compiled_model(x)
    >>> print(ledger.report().to_markdown())

The counts go through the C++ ledger (``cc/graph_breaks``), the same one a torch_xla fork's
lowering writes to through ``cc/graph_breaks/hooks.h``; events from those hooks inside the region
appear under ``native_hooks``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Iterator, Sequence

from torch_xla_ext import _factory
from torch_xla_ext._ext import graph_breaks as _core
from torch_xla_ext.errors import TorchXlaExtError

__all__ = [
    "GraphBreakError",
    "GraphBreakReport",
    "GraphBreakLedger",
    "ModeResult",
    "Comparison",
    "account",
    "compare",
    "example_model",
    "example_inputs",
    "native_ledger",
]

MODES = ("lazy", "dynamo")


class GraphBreakError(TorchXlaExtError, ValueError):
    """A bad argument to account()/compare() (the message names it), or a failed mode run."""


# ---- the report ---------------------------------------------------------------------------


@dataclasses.dataclass
class GraphBreakReport:
    """What one accounted region did. Counts are exact; times are wall/accumulated ms.

    ``fx_breaks``/``recompile_reasons``: one row per distinct (reason, frame) with its count.
    ``fallback_nodes``: FX nodes the bridge left to eager, by aten op (graph-time).
    ``fallback_ops``: aten ops torch_xla executed through its CPU fallback (run-time; torch_xla's
    ``aten::*`` counters, which also count ``_local_scalar_dense``, the scalar read of ``if t:``
    and ``.item()``).
    ``forced_executions``: executions launched outside a sync (a host read needed a value);
    ``forced_by`` lists the host reads in the region that can force one.
    """

    fx_graphs: int = 0
    fx_breaks: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    recompiles: int = 0
    recompile_reasons: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    xla_partitions: int = 0
    graphs: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    fallback_nodes: dict[str, int] = dataclasses.field(default_factory=dict)
    fallback_ops: dict[str, int] = dataclasses.field(default_factory=dict)
    compiles: int = 0
    cached_compiles: int = 0
    executions: int = 0
    transfers_to_host: int = 0
    syncs: int = 0
    forced_executions: int = 0
    forced_by: dict[str, int] = dataclasses.field(default_factory=dict)
    per_graph_hash: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    compile_ms: float = 0.0
    execute_ms: float = 0.0
    transfer_ms: float = 0.0
    wall_ms: float = 0.0
    native_hooks: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def num_fx_breaks(self) -> int:
        return sum(b["count"] for b in self.fx_breaks)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["num_fx_breaks"] = self.num_fx_breaks
        return d

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "GraphBreakReport":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def to_markdown(self, title: str = "Graph-break report") -> str:
        rows = [
            ("FX graphs (Dynamo)", self.fx_graphs),
            ("FX graph breaks", self.num_fx_breaks),
            ("recompiles", self.recompiles),
            ("XLA partitions (bridge)", self.xla_partitions),
            ("eager fallback nodes", sum(self.fallback_nodes.values())),
            ("fallback op executions", sum(self.fallback_ops.values())),
            ("XLA compiles (uncached)", self.compiles),
            ("XLA compiles (cached)", self.cached_compiles),
            ("XLA executions", self.executions),
            ("device->host transfers", self.transfers_to_host),
            ("syncs", self.syncs),
            ("forced executions", self.forced_executions),
            ("compile ms", f"{self.compile_ms:.2f}"),
            ("execute ms", f"{self.execute_ms:.2f}"),
            ("transfer ms", f"{self.transfer_ms:.2f}"),
            ("wall ms", f"{self.wall_ms:.2f}"),
        ]
        out = [f"### {title}", "", "| what | count |", "|---|---:|"]
        out += [f"| {k} | {v} |" for k, v in rows]
        if self.fx_breaks:
            out += ["", "| graph break | frame | count |", "|---|---|---:|"]
            out += [f"| {_md(b['reason'])} | `{b['frame']}` | {b['count']} |" for b in self.fx_breaks]
        if self.recompile_reasons:
            out += ["", "| recompile (first failed guard) | frame | count |", "|---|---|---:|"]
            out += [f"| {_md(b['reason'])} | `{b['frame']}` | {b['count']} |" for b in self.recompile_reasons]
        if self.graphs:
            out += ["", "| FX graph | nodes | XLA partitions | eager fallback nodes |", "|---:|---:|---:|---|"]
            for g in self.graphs:
                out.append(f"| {g['index']} | {g['nodes']} | {g['partitions']} | {', '.join(g['fallback_nodes']) or '-'} |")
        if self.fallback_ops:
            out += ["", "| CPU fallback op | executions |", "|---|---:|"]
            out += [f"| `{k}` | {v} |" for k, v in sorted(self.fallback_ops.items())]
        if self.forced_by:
            out += ["", "| host read that can force an execution | count |", "|---|---:|"]
            out += [f"| `{k}` | {v} |" for k, v in sorted(self.forced_by.items())]
        return "\n".join(out)

    def __str__(self) -> str:
        return self.to_markdown()


def _md(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


# ---- the ledger and account() -----------------------------------------------------------------

# Counters whose deltas say "a host read happened" (each can force a pending graph to run).
_HOST_READ_COUNTERS = ("aten::_local_scalar_dense", "xla::_to_cpu")
_TIME_METRICS = ("CompileTime", "ExecuteTime", "TransferFromDeviceTime")
_KIND_EXECUTE, _KIND_SYNC = int(_core.Kind.execute), int(_core.Kind.sync)
_STAGE_BRIDGE, _STAGE_LAZY = int(_core.Stage.bridge), int(_core.Stage.lazy)


class GraphBreakLedger:
    """Records Dynamo, bridge and XLA events while its region is open; see :func:`account`."""

    def __init__(self, ring_capacity: int = 4096):
        if not isinstance(ring_capacity, int) or ring_capacity < 1:
            raise GraphBreakError(f"ring_capacity must be a positive int, got {ring_capacity!r}")
        self._ledger = _core.Ledger(ring_capacity=ring_capacity)
        # Per-step events (a sync, a cached-graph execution) take the int-only path.
        self._record_ids = self._ledger.record_ids
        self._ids: dict[str, int] = {}
        self._graphs: list[dict[str, Any]] = []
        self._per_hash: dict[str, dict[str, Any]] = {}
        self._sync_executions = 0
        self._open = False
        self._final: GraphBreakReport | None = None

    # -- sink interface for _compat.dynamo.BridgeWatch / metrics.SyncWatch --
    def on_fx_graph(self, num_nodes: int) -> None:
        self._graphs.append({"index": len(self._graphs), "nodes": num_nodes, "partitions": 0, "fallback_nodes": []})
        self._ledger.record(_core.Kind.fx_graph, _core.Stage.dynamo, key=str(len(self._graphs) - 1))

    def on_graph_break(self, reason: str, file: str, line: int) -> None:
        self._ledger.record(_core.Kind.graph_break, _core.Stage.dynamo, reason=reason, file=file, line=line)

    def on_recompile(self, reason: str, file: str, line: int) -> None:
        self._ledger.record(_core.Kind.recompile, _core.Stage.dynamo, reason=reason, file=file, line=line)

    def on_fallback_node(self, aten_op: str) -> None:
        if self._graphs:
            self._graphs[-1]["fallback_nodes"].append(aten_op)
        self._ledger.record(_core.Kind.fallback_node, _core.Stage.bridge, key=aten_op)

    def on_partition(self, num_nodes: int) -> None:
        if self._graphs:
            self._graphs[-1]["partitions"] += 1
        self._ledger.record(_core.Kind.xla_partition, _core.Stage.bridge, key=str(num_nodes))

    def _id(self, s: str) -> int:
        i = self._ids.get(s)
        if i is None:
            i = self._ids[s] = self._ledger.intern(s)
        return i

    def on_execute(self, graph_hash: str, duration_ns: int) -> None:
        h = self._per_hash.get(graph_hash)
        if h is None:
            h = self._per_hash[graph_hash] = {"executions": 0, "dispatch_ms": 0.0, "compiles": 0, "compile_ms": 0.0}
        h["executions"] += 1
        h["dispatch_ms"] += duration_ns / 1e6
        self._record_ids(_KIND_EXECUTE, _STAGE_BRIDGE, self._id(graph_hash), duration_ns, 1)

    def on_bridge_compile(self, graph_hash: str, duration_ns: int) -> None:
        h = self._per_hash.setdefault(graph_hash, {"executions": 0, "dispatch_ms": 0.0, "compiles": 0, "compile_ms": 0.0})
        h["compiles"] += 1
        h["compile_ms"] += duration_ns / 1e6

    def _on_sync(self, launched: int, duration_ns: int) -> None:
        self._sync_executions += launched
        self._record_ids(_KIND_SYNC, _STAGE_LAZY, self._id(str(launched)), duration_ns, 1)

    def compensate(self, counter: str, restored: int) -> None:
        self._window.compensate(counter, restored)

    # -- region --
    def __enter__(self) -> "GraphBreakLedger":
        if self._open or self._final is not None:
            raise GraphBreakError("a GraphBreakLedger accounts one region; call account() again for another")
        from torch_xla_ext._compat import dynamo as _dynamo
        from torch_xla_ext._compat import metrics as _metrics

        # Work launched before the region (async executions) must not land inside it.
        _metrics.wait_device_ops()
        self._native_start = _core.global_ledger().counts()
        self._window = _metrics.CounterWindow(metric_names=_TIME_METRICS)
        self._watches = [self._window, _dynamo.BridgeWatch(self), _metrics.SyncWatch(self._on_sync)]
        for w in self._watches:
            w.__enter__()
        _core.set_hooks_enabled(True)
        self._open = True
        self._t0 = time.perf_counter_ns()
        return self

    def __exit__(self, *exc: Any) -> None:
        from torch_xla_ext._compat import metrics as _metrics

        try:
            # Executions are asynchronous; their time metrics land when they finish.
            _metrics.wait_device_ops()
            wall_ns = time.perf_counter_ns() - self._t0
        finally:
            _core.set_hooks_enabled(False)
            for w in reversed(self._watches):
                w.__exit__(*exc)
            self._open = False
        self._final = self._build(self._window.delta(), wall_ns)

    def report(self) -> GraphBreakReport:
        """The region's report (so far, if the region is still open)."""
        if self._final is not None:
            return self._final
        if not self._open:
            raise GraphBreakError("report(): the region has not started; use `with account() as ledger:`")
        return self._build(self._window.delta(), time.perf_counter_ns() - self._t0, record=False)

    def recent_events(self) -> list[dict[str, Any]]:
        """The most recent events in order (bounded ring; the report's counts never drop)."""
        return self._ledger.recent_events()

    def _build(self, delta: Any, wall_ns: int, record: bool = True) -> GraphBreakReport:
        c = delta.counters
        lazy_exec = c.get("ExecuteComputation", 0)
        fallback_ops = {k: v for k, v in c.items() if k.startswith("aten::") and v > 0}
        forced = max(0, lazy_exec - self._sync_executions)
        forced_by = {k: c[k] for k in _HOST_READ_COUNTERS if c.get(k, 0) > 0}
        for op, n in fallback_ops.items():
            if op not in forced_by:
                forced_by[op] = n
        if record:
            # Counter-derived totals go through the C++ ledger too, so one structure holds all.
            L, K, S = self._ledger, _core.Kind, _core.Stage
            tm = delta.metric
            if c.get("UncachedCompile", 0):
                L.record(K.compile, S.xla, count=c["UncachedCompile"], duration_ns=int(tm("CompileTime").total))
            if c.get("CachedCompile", 0):
                L.record(K.cached_compile, S.xla, count=c["CachedCompile"])
            if lazy_exec:
                L.record(K.execute, S.xla, key="lazy", count=lazy_exec)
            if c.get("TransferFromDeviceTime", 0) or tm("TransferFromDeviceTime").count:
                L.record(K.transfer_to_host, S.xla, count=tm("TransferFromDeviceTime").count,
                         duration_ns=int(tm("TransferFromDeviceTime").total))
            for op, n in fallback_ops.items():
                L.record(K.fallback_op, S.xla, key=op, count=n)
            if forced:
                L.record(K.forced_execution, S.lazy, count=forced)
        counts = self._ledger.counts()
        rows = self._ledger.aggregates()

        def grouped(kind: str) -> list[dict[str, Any]]:
            return [{"reason": r["reason"], "frame": f"{r['file']}:{r['line']}", "count": r["count"]}
                    for r in rows if r["kind"] == kind]

        native_end = _core.global_ledger().counts()
        tm = delta.metric
        return GraphBreakReport(
            fx_graphs=counts["fx_graph"],
            fx_breaks=grouped("graph_break"),
            recompiles=counts["recompile"],
            recompile_reasons=grouped("recompile"),
            xla_partitions=counts["xla_partition"],
            graphs=[dict(g, fallback_nodes=list(g["fallback_nodes"])) for g in self._graphs],
            fallback_nodes={r["key"]: r["count"] for r in rows if r["kind"] == "fallback_node"},
            fallback_ops=dict(sorted(fallback_ops.items())),
            compiles=c.get("UncachedCompile", 0),
            cached_compiles=c.get("CachedCompile", 0),
            executions=lazy_exec + sum(h["executions"] for h in self._per_hash.values()),
            transfers_to_host=tm("TransferFromDeviceTime").count,
            syncs=counts["sync"],
            forced_executions=forced,
            forced_by=dict(sorted(forced_by.items())),
            per_graph_hash={k: dict(v) for k, v in self._per_hash.items()},
            compile_ms=tm("CompileTime").total / 1e6,
            execute_ms=tm("ExecuteTime").total / 1e6,
            transfer_ms=tm("TransferFromDeviceTime").total / 1e6,
            wall_ms=wall_ns / 1e6,
            native_hooks={k: native_end[k] - self._native_start.get(k, 0)
                          for k in native_end if native_end[k] - self._native_start.get(k, 0)},
        )


def account(ring_capacity: int = 4096) -> GraphBreakLedger:
    """A context manager that accounts graph breaks, partitions, compiles, executions and
    transfers in its region; returns the ledger (``ledger.report()`` after or during).

    Accounting wraps torch_xla/Dynamo entry points and calls through unchanged: results do not
    change. At region entry and exit it waits for pending device work, so executions launched
    before the region are not counted in it and execution times are complete.

    Example:
        >>> with graph_breaks.account() as ledger:
        ...     y = torch.compile(model, backend="openxla")(x); torch_xla.sync()
        >>> ledger.report().fx_graphs
        1
    """
    return GraphBreakLedger(ring_capacity=ring_capacity)


def native_ledger() -> Any:
    """The process-wide C++ ledger that ``cc/graph_breaks/hooks.h`` writes to."""
    return _core.global_ledger()


# ---- the embedded example -------------------------------------------------------------------


def example_model(print_break: bool = True, data_dependent_if: bool = True, digamma: bool = True, width: int = 16):
    """A 3-layer MLP with the three classic breaks: a ``print`` (Dynamo graph break), a
    data-dependent ``if`` (graph break in Dynamo, a host round trip in lazy mode) and ``digamma``
    (no XLA lowering: a CPU fallback, so the bridge splits the FX graph around it)."""
    import torch

    class ExampleModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.l1 = torch.nn.Linear(width, width)
            self.l2 = torch.nn.Linear(width, width)
            self.l3 = torch.nn.Linear(width, width)

        def forward(self, x):
            h = torch.relu(self.l1(x))
            if print_break:
                print("graph_breaks example: after layer 1", file=_SINK)
            h = self.l2(h)
            if data_dependent_if:
                if h.sum() > 0:
                    h = h * 2
                else:
                    h = h - 1
            if digamma:
                h = torch.digamma(h.abs() + 1)
            return self.l3(h)

    torch.manual_seed(0)
    return ExampleModel()


def example_inputs(batch: int = 4, width: int = 16):
    import torch

    g = torch.Generator().manual_seed(1)
    return (torch.randn(batch, width, generator=g),)


class _Sink:
    """Where the example's print goes (a print is a graph break whatever its file)."""

    def write(self, s: str) -> int:
        return len(s)

    def flush(self) -> None:
        pass


_SINK = _Sink()


# ---- compare() ------------------------------------------------------------------------------


@dataclasses.dataclass
class ModeResult:
    mode: str
    report: GraphBreakReport  # the whole run: warmup (first compiles) and timed steps
    steady: GraphBreakReport  # the timed steps only
    step_ms: list[float]
    isolation: str

    @property
    def median_ms(self) -> float:
        s = sorted(self.step_ms)
        n = len(s)
        return (s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2) if n else float("nan")

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "isolation": self.isolation, "step_ms": self.step_ms,
                "median_ms": self.median_ms, "report": self.report.to_dict(), "steady": self.steady.to_dict()}


@dataclasses.dataclass
class Comparison:
    modes: dict[str, ModeResult]
    warmup: int
    steps: int

    def to_dict(self) -> dict[str, Any]:
        return {"warmup": self.warmup, "steps": self.steps, "modes": {k: v.to_dict() for k, v in self.modes.items()}}

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    def to_markdown(self) -> str:
        names = list(self.modes)
        rows = [
            ("FX graphs", lambda r: r.report.fx_graphs),
            ("FX graph breaks", lambda r: r.report.num_fx_breaks),
            ("recompiles", lambda r: r.report.recompiles),
            ("XLA partitions", lambda r: r.report.xla_partitions),
            ("XLA compiles (uncached)", lambda r: r.report.compiles),
            ("XLA compiles (cached)", lambda r: r.report.cached_compiles),
            ("executions / step", lambda r: _per_step(r.steady.executions, len(r.step_ms))),
            ("device->host transfers / step", lambda r: _per_step(r.steady.transfers_to_host, len(r.step_ms))),
            ("fallback op executions / step", lambda r: _per_step(sum(r.steady.fallback_ops.values()), len(r.step_ms))),
            ("forced executions / step", lambda r: _per_step(r.steady.forced_executions, len(r.step_ms))),
            ("ms / step (median)", lambda r: f"{r.median_ms:.3f}"),
            ("isolation", lambda r: r.isolation),
        ]
        out = [f"### Graph breaks: {' vs '.join(names)} ({self.warmup} warmup + {self.steps} timed steps)", "",
               "| | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
        for label, fn in rows:
            out.append(f"| {label} | " + " | ".join(str(fn(self.modes[n])) for n in names) + " |")
        for n in names:
            out += ["", self.modes[n].report.to_markdown(title=f"{n}: whole run")]
        return "\n".join(out)

    def plot(self, path: str) -> str:
        """A PNG with FX breaks, XLA partitions, compiles and ms/step side by side, per mode."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator

        names = list(self.modes)
        panels = [
            ("FX graph breaks", [self.modes[n].report.num_fx_breaks for n in names]),
            ("XLA partitions", [self.modes[n].report.xla_partitions for n in names]),
            ("XLA compiles (uncached)", [self.modes[n].report.compiles for n in names]),
            ("ms / step (median)", [self.modes[n].median_ms for n in names]),
        ]
        colors = ["#4C72B0", "#DD8452", "#55A868", "#C44E52"][: len(names)]
        fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 3.4))
        for ax, (title, values) in zip(axes, panels):
            bars = ax.bar(names, values, color=colors)
            ax.set_title(title, fontsize=10)
            for b, v in zip(bars, values):
                ax.annotate(f"{v:.2f}" if isinstance(v, float) else str(v), (b.get_x() + b.get_width() / 2, b.get_height()),
                            ha="center", va="bottom", fontsize=9)
            ax.margins(y=0.2)
            if not isinstance(values[0], float):
                ax.yaxis.set_major_locator(MaxNLocator(integer=True))
            ax.spines[["top", "right"]].set_visible(False)
        fig.suptitle(f"torch_xla graph breaks: {' vs '.join(names)} ({self.steps} timed steps)", fontsize=11)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return path


def _per_step(n: int, steps: int) -> str:
    return f"{n / steps:g}" if steps else "-"


def _spec_of(obj: Any, what: str) -> str | None:
    """'module:qualname' if a fresh interpreter can import `obj`, else None."""
    if isinstance(obj, str):
        if ":" not in obj:
            raise GraphBreakError(f"{what}: expected 'module:attribute', got {obj!r}")
        return obj
    mod, qual = getattr(obj, "__module__", None), getattr(obj, "__qualname__", "")
    if not mod or mod == "__main__" or "<" in qual:
        return None
    return f"{mod}:{qual}"


def _run_mode(factory: Callable[[], Any], inputs: Sequence[Any], mode: str, warmup: int, steps: int,
              progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Runs one mode in this process; returns ModeResult.to_dict()-shaped data."""
    import torch
    import torch_xla

    from torch_xla_ext._compat import dynamo as _dynamo
    from torch_xla_ext._compat import metrics as _metrics

    _dynamo.reset_dynamo()
    device = torch_xla.device()
    model = factory()
    if isinstance(model, torch.nn.Module):
        model = model.to(device)
    xs = tuple(x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs)
    torch_xla.sync()
    _metrics.wait_device_ops()
    fn = torch.compile(model, backend="openxla") if mode == "dynamo" else model

    def step():
        out = fn(*xs)
        if mode == "lazy":
            torch_xla.sync()
        _metrics.wait_device_ops()
        return out

    step_ms = []
    with account() as whole:
        for i in range(warmup):
            step()
            if progress:
                progress(f"{mode}: warmup step {i + 1}/{warmup}")
        with account() as steady:
            for i in range(steps):
                t0 = time.perf_counter_ns()
                step()
                step_ms.append((time.perf_counter_ns() - t0) / 1e6)
        if progress:
            progress(f"{mode}: {steps} timed steps, median {sorted(step_ms)[len(step_ms) // 2]:.3f} ms")
    return {"mode": mode, "step_ms": step_ms, "report": whole.report().to_dict(), "steady": steady.report().to_dict()}


def _save_inputs(inputs: Sequence[Any], path: str) -> None:
    import numpy as np
    import torch

    arrays = {}
    for i, x in enumerate(inputs):
        if not isinstance(x, torch.Tensor):
            raise GraphBreakError(f"inputs[{i}]: expected a torch.Tensor, got {type(x).__name__}")
        arrays[f"a{i}"] = x.detach().cpu().numpy()
    np.savez(path, **arrays)


def _load_inputs(path: str) -> tuple[Any, ...]:
    import numpy as np
    import torch

    with np.load(path, allow_pickle=False) as z:
        return tuple(torch.from_numpy(z[f"a{i}"]) for i in range(len(z.files)))


def compare(fn_factory: Callable[[], Any] | str, inputs: Sequence[Any] | Callable[[], Sequence[Any]] | str,
            modes: Sequence[str] = MODES, warmup: int = 3, steps: int = 8, isolation: str = "subprocess",
            progress: Callable[[str], None] | None = None, timeout_s: float = 600.0) -> Comparison:
    """Runs the same model in each mode and accounts it: per-mode reports and per-step times.

    ``fn_factory()`` returns the model (an ``nn.Module`` is moved to the XLA device; "dynamo"
    wraps it in ``torch.compile(backend="openxla")``); ``inputs`` are CPU tensors (or a callable /
    'module:function' returning them). Each mode runs in its own subprocess by default — torch_xla's
    compile cache and Dynamo's caches are process-wide, so that is the only honest isolation.
    A factory a fresh interpreter cannot import (a lambda, something in ``__main__``) needs
    ``isolation="in-process"``: modes then run one after another with ``torch._dynamo.reset()``
    between them, and the XLA compile cache is shared.

    Example:
        >>> cmp = graph_breaks.compare(graph_breaks.example_model, graph_breaks.example_inputs)
        >>> print(cmp.to_markdown()); cmp.plot("breaks.png")
    """
    modes = tuple(modes)
    if not modes or any(m not in MODES for m in modes) or len(set(modes)) != len(modes):
        raise GraphBreakError(f"modes: expected distinct values from {MODES}, got {modes!r}")
    for name, v, low in (("warmup", warmup, 0), ("steps", steps, 1)):
        if not isinstance(v, int) or v < low:
            raise GraphBreakError(f"{name}: expected an int >= {low}, got {v!r}")
    if isolation not in ("subprocess", "in-process"):
        raise GraphBreakError(f"isolation: expected 'subprocess' or 'in-process', got {isolation!r}")
    factory_spec = _spec_of(fn_factory, "fn_factory")
    if isolation == "subprocess" and factory_spec is None:
        raise GraphBreakError(
            f"fn_factory: {fn_factory!r} cannot be imported by a fresh interpreter (define it in a module), "
            "or pass isolation='in-process'")
    factory = fn_factory
    if isinstance(fn_factory, str):
        factory = _factory.resolve(fn_factory, "fn_factory", error=GraphBreakError)
    if isinstance(inputs, str):
        inputs = _factory.resolve(inputs, "inputs", error=GraphBreakError)()
    elif callable(inputs):
        inputs = inputs()
    inputs = tuple(inputs)

    results: dict[str, ModeResult] = {}
    if isolation == "in-process":
        for m in modes:
            d = _run_mode(factory, inputs, m, warmup, steps, progress)
            results[m] = _mode_result(d, "in-process (torch._dynamo.reset(); shared XLA compile cache)")
        return Comparison(results, warmup, steps)

    with tempfile.TemporaryDirectory(prefix="txe_graph_breaks_") as tmp:
        in_path = os.path.join(tmp, "inputs.npz")
        _save_inputs(inputs, in_path)
        for m in modes:
            out_path = os.path.join(tmp, f"{m}.json")
            cmd = [sys.executable, "-m", "torch_xla_ext.graph_breaks", "--worker", "--factory", factory_spec,
                   "--inputs", in_path, "--mode", m, "--warmup", str(warmup), "--steps", str(steps), "--out", out_path]
            if progress:
                progress(f"{m}: starting a fresh process")
            env = dict(os.environ)
            env.setdefault("PJRT_DEVICE", "CPU")
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
            err_lines = []
            assert proc.stderr is not None
            for line in proc.stderr:
                if line.startswith("[progress] "):
                    if progress:
                        progress(line[len("[progress] "):].rstrip())
                else:
                    err_lines.append(line)
            rc = proc.wait(timeout=timeout_s)
            if rc != 0 or not os.path.exists(out_path):
                tail = "".join(err_lines[-20:])
                raise GraphBreakError(f"mode {m!r}: worker process failed with exit code {rc}:\n{tail}")
            with open(out_path) as f:
                results[m] = _mode_result(json.load(f), "subprocess")
    return Comparison(results, warmup, steps)


def _mode_result(d: dict[str, Any], isolation: str) -> ModeResult:
    return ModeResult(d["mode"], GraphBreakReport.from_dict(d["report"]), GraphBreakReport.from_dict(d["steady"]),
                      list(d["step_ms"]), isolation)


def _worker(argv: list[str]) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="torch_xla_ext.graph_breaks --worker")
    p.add_argument("--worker", action="store_true")
    p.add_argument("--factory", required=True)
    p.add_argument("--inputs", required=True)
    p.add_argument("--mode", required=True, choices=MODES)
    p.add_argument("--warmup", type=int, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    factory = _factory.resolve(a.factory, "--factory", error=GraphBreakError)
    inputs = _load_inputs(a.inputs)

    def progress(msg: str) -> None:
        print(f"[progress] {msg}", file=sys.stderr, flush=True)

    d = _run_mode(factory, inputs, a.mode, a.warmup, a.steps, progress)
    with open(a.out, "w") as f:
        json.dump(d, f)
    return 0


if __name__ == "__main__":
    if "--worker" in sys.argv[1:]:
        # Run the worker against the package module (not this __main__ copy), so the example
        # factory and the ledger classes are one and the same.
        from torch_xla_ext import graph_breaks as _self

        sys.exit(_self._worker(sys.argv[1:]))
    sys.exit("usage: python -m torch_xla_ext.graph_breaks --worker ... (internal; see compare())")
