"""The graph-break report: what one accounted region did, as named figures and a joined view.

Figures, layer by layer (each one is what its layer's own tool counts):
  * Dynamo: ``dynamo_compiles`` (frame compiles, one per compile id such as ``"1/0"``),
    ``fx_graphs`` (graphs Dynamo handed the backend: ``counters["stats"]["unique_graphs"]`` and
    ``torch._dynamo.explain``'s ``graph_count``), ``fx_breaks`` (Dynamo's structured graph-break
    records, deduplicated by (gb_type, user frame) with counts), ``recompiles`` with the failed
    guard of each.
  * AOTAutograd: ``aot_graphs`` by kind (forward, backward, inference) — a training step's
    backward graph is AOTAutograd's, not a graph Dynamo captured.
  * the openxla bridge: ``bridge_graphs`` (graphs extracted at first run), ``xla_partitions``,
    ``fallback_nodes`` (aten ops left to eager) and ``eager_nodes`` (other nodes it left there).
  * XLA (torch_xla's process-wide counters): compiles, executions, transfers, syncs.
``joined`` ties them together per compile id: Dynamo frame -> graph -> AOT graphs -> bridge
partitions and fallback nodes -> XLA graph hashes -> compile time -> executions (per step when
the region marked steps).

Example:
    >>> import torch, torch_xla
    >>> from torch_xla_ext import graph_breaks
    >>> lin = torch.nn.Linear(4, 4).to("xla")
    >>> def step(x):
    ...     h = lin(x).relu()
    ...     torch._dynamo.graph_break()
    ...     return lin(h).sum()
    >>> with graph_breaks.account() as ledger:
    ...     loss = torch.compile(step, backend="openxla")(torch.ones(2, 4, device="xla"))
    ...     loss.backward(); torch_xla.sync(); ledger.step()
    >>> report = ledger.report()
    >>> report.fx_graphs, report.aot_graphs, report.xla_partitions
    (2, {'backward': 2, 'forward': 2}, 4)
    >>> report.save("gb-rank0.json"); load_report("gb-rank0.json") == report
    'gb-rank0.json'
    True
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from torch_xla_ext import _device, _json, _validation
from torch_xla_ext._dynamo_events import BREAK_FIGURES
from torch_xla_ext.errors import InternalError, InvalidArgumentError, NotFoundError

__all__ = ["BREAK_FIGURES", "GraphBreakError", "WorkerError", "GraphBreakReport", "load_report", "SCHEMA"]

SCHEMA = "torch_xla_ext.graph_breaks.report/3"
# Older schemas this reader still reads, each with what changed since: /2 named a bridge
# partition's XLA graph hash "hash" (now "graph_hash", the trace's and torch_xla's word).
_READS = ("torch_xla_ext.graph_breaks.report/2", SCHEMA)


# The break figures (figure, label, the events it counts, the upstream record of the same events):
# one definition in torch_xla_ext/_dynamo_events.py, which the script trace's Dynamo figures share;
# the report, its HTML and the docs quote it, and tests/graph_breaks/break_figures_test.py ties
# each value to its upstream record.


class GraphBreakError(InvalidArgumentError):
    """A bad argument or input file for the graph-break tools (the message names it)."""


class WorkerError(InternalError):
    """A compare() worker process failed or timed out (the message carries its stderr tail)."""


@dataclasses.dataclass
class GraphBreakReport:
    """What one accounted region did. Counts are exact; times are wall/accumulated ms."""

    rank: dict[str, Any] = dataclasses.field(default_factory=dict)
    steps: int = 0
    # Dynamo
    dynamo_compiles: int = 0
    fx_graphs: int = 0
    fx_breaks: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    graphs_ended_by_break: int = 0
    recompiles: int = 0
    recompile_reasons: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    # AOTAutograd
    aot_graphs: dict[str, int] = dataclasses.field(default_factory=dict)
    # the openxla bridge
    bridge_graphs: int = 0
    xla_partitions: int = 0
    fallback_nodes: dict[str, int] = dataclasses.field(default_factory=dict)
    eager_nodes: dict[str, int] = dataclasses.field(default_factory=dict)
    joined: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    per_graph_hash: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    # XLA / lazy tensors (torch_xla's counters and metrics: process-wide)
    fallback_ops: dict[str, int] = dataclasses.field(default_factory=dict)
    compiles: int = 0
    cached_compiles: int = 0
    executions: int = 0
    transfers_to_host: int = 0
    syncs: int = 0
    forced_executions: int = 0
    forced_by: dict[str, int] = dataclasses.field(default_factory=dict)
    dynamo_input_syncs: int = 0
    compile_ms: float = 0.0
    execute_ms: float = 0.0
    transfer_ms: float = 0.0
    wall_ms: float = 0.0
    replicas: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    native_hooks: dict[str, int] = dataclasses.field(default_factory=dict)
    timeline: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    # the XLA device the accounted region ran on (made in the process that ran it)
    device: str = dataclasses.field(default_factory=lambda: _device.current())

    @property
    def num_fx_breaks(self) -> int:
        """Breaks Dynamo logs: its counters['graph_break'] plus data-dependent jumps (which it logs
        and explain() reports but does not count)."""
        return sum(b["count"] - b.get("inherited", 0) for b in self.fx_breaks)

    @property
    def num_inherited_splits(self) -> int:
        """Splits a frame takes at a call because something inside the inlined callee is
        unsupported: Dynamo neither logs nor counts them (its reason says only
        "step_unsupported"); each is listed under the break that caused it."""
        return sum(b.get("inherited", 0) for b in self.fx_breaks)

    @property
    def num_counted_breaks(self) -> int:
        """Breaks in Dynamo's own counter, ``counters["graph_break"]``: an unsupported operation
        Dynamo turned into a split (``Unsupported.add_to_stats("graph_break")``)."""
        return sum(b.get("counted", 0) for b in self.fx_breaks)

    @property
    def num_data_dependent_jumps(self) -> int:
        """Data-dependent jumps (``if tensor...``) in a frame's own code: Dynamo logs each and
        splits there (its GraphCompileReason says "generic_jump ...") but does not count it."""
        return sum(b.get("jumps", 0) for b in self.fx_breaks)

    @property
    def num_skipped_frames(self) -> int:
        """Frames Dynamo gave up on after logging a break inside a for/while loop (SkipFrame):
        the whole frame then runs uncompiled."""
        return sum(b.get("skipped_frames", 0) for b in self.fx_breaks)

    def break_figures(self) -> list[dict[str, Any]]:
        """Every break figure with the events it counts and the upstream record of the same
        events (:data:`BREAK_FIGURES`), so no two figures are mistaken for one another."""
        values = {"logged_breaks": self.num_fx_breaks, "counted_breaks": self.num_counted_breaks,
                  "data_dependent_jumps": self.num_data_dependent_jumps,
                  "skipped_frames": self.num_skipped_frames,
                  "inherited_splits": self.num_inherited_splits, "graphs_ended_by_break": self.graphs_ended_by_break}
        return [{"figure": k, "label": label, "value": values[k], "counts": counts, "oracle": oracle}
                for k, label, counts, oracle in BREAK_FIGURES]

    @property
    def num_aot_graphs(self) -> int:
        return sum(self.aot_graphs.values())

    def to_dict(self, timeline: bool = True) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if not timeline:
            d["timeline"] = []
        d["schema"] = SCHEMA
        d["num_fx_breaks"] = self.num_fx_breaks
        d["num_inherited_splits"] = self.num_inherited_splits
        d["num_counted_breaks"] = self.num_counted_breaks
        d["num_data_dependent_jumps"] = self.num_data_dependent_jumps
        d["num_skipped_frames"] = self.num_skipped_frames
        d["break_figures"] = self.break_figures()
        return d

    def to_json(self, **kwargs: Any) -> str:
        return _json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "report") -> "GraphBreakReport":
        """The report in ``d`` (what :meth:`to_dict` wrote); errors name ``where`` and the field.
        The dataclass's fields are the schema (validated by pydantic, :mod:`torch_xla_ext._validation`)."""
        if not isinstance(d, dict):
            raise GraphBreakError(f"{where}: expected a JSON object, got {type(d).__name__}")
        schema = d.get("schema", SCHEMA)
        if schema not in _READS:
            raise GraphBreakError(f"{where}: schema {schema!r} is not one this torch_xla_ext reads ({', '.join(_READS)}): "
                                  "a report of a newer torch_xla_ext is read by that version (pip install -U "
                                  "torch-xla-ext)")
        if schema == _READS[0]:
            d = _upgrade_v2(d)
        # float fields as the one JSON rule writes a non-finite value ("nan", "inf", "-inf")
        d = {k: _json.number(v) if k in _FLOAT_FIELDS else v for k, v in d.items()}
        # a report written before reports named their device
        return _validation.validate(cls, {"device": "unknown", **d}, GraphBreakError, where)

    def save(self, path: str) -> str:
        """Writes the report as JSON to ``path`` (``{rank}`` in it becomes this report's rank,
        so every process of a job can pass the same pattern); returns the path written."""
        if "{rank}" in path:
            path = path.replace("{rank}", str(self.rank.get("rank", 0)))
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            f.write(self.to_json(indent=1))
        return path

    # ---- Markdown ----

    def figures(self) -> list[tuple[str, Any, str]]:
        """(figure, value, what counts it upstream): the summary table of every view."""
        aot = self.aot_graphs
        return [
            ("Dynamo frame compiles (compile ids)", self.dynamo_compiles, "Dynamo compile ids"),
            ("Dynamo graphs (handed to the backend)", self.fx_graphs,
             "counters['stats']['unique_graphs'], explain().graph_count"),
            *((label, value, oracle) for label, value, oracle in
              ((f["label"], f["value"], f["oracle"]) for f in self.break_figures())),
            ("recompiles", self.recompiles, "compile ids N/1, N/2, ..."),
            ("AOT forward graphs", aot.get("forward", 0), "AOTAutograd"),
            ("AOT backward graphs", aot.get("backward", 0), "AOTAutograd"),
            ("AOT inference graphs", aot.get("inference", 0), "AOTAutograd"),
            ("bridge graphs (extracted)", self.bridge_graphs, "torch_xla DynamoExtractCompiledGraph"),
            ("XLA partitions (bridge)", self.xla_partitions, "openxla bridge"),
            ("eager fallback nodes (aten ops)", sum(self.fallback_nodes.values()), "openxla bridge"),
            ("fallback op executions", sum(self.fallback_ops.values()), "torch_xla aten::* counters"),
            ("XLA compiles (uncached)", self.compiles, "torch_xla UncachedCompile"),
            ("XLA compiles (cached)", self.cached_compiles, "torch_xla CachedCompile"),
            ("XLA executions", self.executions, "torch_xla ExecuteTime samples"),
            ("device->host transfers", self.transfers_to_host, "torch_xla TransferFromDeviceTime"),
            ("syncs", self.syncs, "torch_xla MarkStep"),
            ("forced executions", self.forced_executions, "executions outside a sync"),
            ("Dynamo input syncs", self.dynamo_input_syncs, "torch_xla DynamoSyncInputExecuteTime"),
            ("compile ms", f"{self.compile_ms:.2f}", "torch_xla CompileTime"),
            ("execute ms", f"{self.execute_ms:.2f}", "torch_xla ExecuteTime"),
            ("transfer ms", f"{self.transfer_ms:.2f}", "torch_xla TransferFromDeviceTime"),
            ("wall ms", f"{self.wall_ms:.2f}", "region"),
        ]

    def to_markdown(self, title: str = "Graph-break report") -> str:
        who = f" (rank {self.rank['rank']})" if self.rank.get("rank") is not None else ""
        out = [f"### {title}{who}", "", f"On XLA:{self.device}.", "", "| what | count |", "|---|---:|"]
        out += [f"| {k} | {v} |" for k, v, _ in self.figures()]
        if self.steps:
            out.append(f"| steps marked | {self.steps} |")
        if self.fx_breaks:
            out += ["", "What each break figure counts:", ""]
            out += [f"- **{f['label']}** ({f['value']}): {f['counts']} Upstream: {f['oracle']}."
                    for f in self.break_figures()]
        if self.fx_breaks:
            out += ["", "| graph break (gb_type) | GB id | explanation | frame | count |", "|---|---|---|---|---:|"]
            out += [f"| {_md(b['gb_type'])} | {b.get('gb_id') or '-'} | {_md(b.get('explanation') or '-')} | "
                    f"`{b['frame']}`{_inherited(b)} | {b['count']} |" for b in self.fx_breaks]
        if self.recompile_reasons:
            out += ["", "| recompile (first failed guard) | frame | count |", "|---|---|---:|"]
            out += [f"| {_md(b['reason'])} | `{b['frame']}` | {b['count']} |" for b in self.recompile_reasons]
        if self.joined:
            out += ["", "Per compile id: Dynamo frame -> graph -> AOT graphs -> bridge partitions -> XLA graphs", ""]
            out += joined_lines(self)
        if self.fallback_ops:
            out += ["", "| CPU fallback op | executions |", "|---|---:|"]
            out += [f"| `{k}` | {v} |" for k, v in sorted(self.fallback_ops.items())]
        if self.forced_by:
            out += ["", "| host read that can force an execution | count |", "|---|---:|"]
            out += [f"| `{k}` | {v} |" for k, v in sorted(self.forced_by.items())]
        if len(self.replicas) > 1:
            out += ["", "| replica | syncs | bridge executions |", "|---:|---:|---:|"]
            out += [f"| {r} | {v.get('syncs', 0)} | {v.get('executions', 0)} |" for r, v in self.replicas.items()]
        for n in self.notes:
            out += ["", f"> {n}"]
        return "\n".join(out)

    def __str__(self) -> str:
        return self.to_markdown()


def joined_lines(report: GraphBreakReport) -> list[str]:
    """The joined view as nested Markdown bullets (one block per compile id)."""
    out = []
    per_step = report.steps or 0
    for c in report.joined:
        head = f"- **[{c['compile_id']}]** `{c['name']}` {c['frame']}"
        if c.get("ms") is not None:
            head += f", {c['ms']:.1f} ms"
        if c.get("recompile_reason"):
            head += f"; recompile: {_md(c['recompile_reason'])}"
        if c.get("error"):
            head += f"; **{_md(c['error'])}**"
        out.append(head)
        for b in c.get("breaks", []):
            out.append(f"  - break: {_md(b)}")
        for g in c.get("graphs", []):
            end = f"ended by: {_md(g['ended_by'])}" if g.get("ended_by") else "ends at return"
            out.append(f"  - Dynamo graph {g['graph']}: {g['ops']} ops, {end}")
            for a in g.get("aot", []):
                out.append(f"    - AOT {a['kind']} `{a['name']}` ({a['nodes']} nodes)")
                for br in a.get("bridge", []):
                    fb = ", ".join(br.get("fallback_nodes", [])) or "none"
                    out.append(f"      - bridge: {len(br['partitions'])} partition(s), fallback nodes: {fb}"
                               + (f", **{_md(br['error'])}**" if br.get("error") else ""))
                    for p in br["partitions"]:
                        h = report.per_graph_hash.get(p["graph_hash"], {})
                        ex = h.get("executions", 0)
                        rate = f" ({ex / per_step:g}/step)" if per_step else ""
                        out.append(f"        - XLA graph `{p['graph_hash'][:16]}`: {p['nodes']} nodes, compile "
                                   f"{h.get('compile_ms', 0.0):.1f} ms, {ex} executions{rate}")
    return out


def _md(s: Any) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def _inherited(b: dict[str, Any]) -> str:
    n = b.get("inherited", 0)
    if not n:
        return ""
    calls = ", ".join(f"`{c}`" for c in b.get("split_at") or [])
    return f" ({n} of them inherited: split at the call{'s' if len(b.get('split_at') or []) > 1 else ''} {calls})"


def _upgrade_v2(d: dict[str, Any]) -> dict[str, Any]:
    """A /2 report with the /3 names: each bridge partition's ``hash`` is ``graph_hash``."""
    d = dict(d)
    joined = d.get("joined")
    if isinstance(joined, list):
        d["joined"] = _renamed(joined, "hash", "graph_hash")
    return d


def _renamed(value: Any, old: str, new: str) -> Any:
    """``value`` with every mapping key ``old`` renamed ``new``, at any depth."""
    if isinstance(value, dict):
        return {(new if k == old else k): _renamed(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_renamed(v, old, new) for v in value]
    return value


_FLOAT_FIELDS = frozenset(f.name for f in dataclasses.fields(GraphBreakReport) if f.type == "float")


def load_report(path: str) -> GraphBreakReport:
    """A report saved with :meth:`GraphBreakReport.save` (or ``--json`` of a single region).

    Example:
        >>> import torch, torch_xla
        >>> from torch_xla_ext import graph_breaks
        >>> def f(x):
        ...     x = torch.sin(x)
        ...     torch._dynamo.graph_break()               # one break: two graphs
        ...     return torch.cos(x)
        >>> with graph_breaks.account() as ledger:
        ...     y = torch.compile(f, backend="openxla")(torch.ones(3, device="xla")); torch_xla.sync()
        >>> ledger.report().save("gb-rank0.json")
        'gb-rank0.json'
        >>> r = load_report("gb-rank0.json")
        >>> r == ledger.report(), r.rank["rank"]
        (True, 0)
    """
    if not isinstance(path, str):
        raise GraphBreakError(f"report path must be a str, got {type(path).__name__}")
    if not os.path.isfile(path):
        raise NotFoundError(f"{path}: no such report file")
    with open(path) as f:
        try:
            d = json.load(f)
        except json.JSONDecodeError as e:
            raise GraphBreakError(f"{path}: not JSON ({e})") from None
    if isinstance(d, dict) and "modes" in d and "schema" not in d:
        raise GraphBreakError(f"{path}: this is a compare() result (modes {sorted(d['modes'])}), not one "
                              "region's report; save ledger.report() per rank instead")
    return GraphBreakReport.from_dict(d, where=path)
