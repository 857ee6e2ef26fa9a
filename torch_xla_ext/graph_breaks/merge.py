"""merge(): the per-rank reports of one job, and the ranks that differ.

Every process of a multi-process job accounts its own region and saves its report
(``report.save("gb-rank{rank}.json")``; each report carries its rank), or runs the CLI per rank
(``torch-xla-ext graph-breaks --model M --json rank{r}.json``: a compare() result whose mode
reports carry the rank the launcher set); merge() reads either kind. Ranks of a data-parallel
job should do the same work; one that compiles an extra graph, compiles another graph hash or
takes a graph break the others do not is the rank the others wait for at the next collective
(the classic pod stall). merge() compares every figure and every graph hash, break and
recompile across ranks and names the ranks that differ.

Example:
    >>> import dataclasses, torch, torch_xla
    >>> from torch_xla_ext import graph_breaks
    >>> def region(fn):
    ...     with graph_breaks.account() as ledger:
    ...         y = torch.compile(fn, backend="openxla")(torch.ones(3, device="xla")); torch_xla.sync()
    ...     return ledger.report()
    >>> def f(x):
    ...     return torch.cos(torch.sin(x))
    >>> def g(x):                                    # what rank 2 runs: one graph break more
    ...     x = torch.sin(x)
    ...     torch._dynamo.graph_break()
    ...     return torch.cos(x)
    >>> same, odd = region(f), region(g)
    >>> for rank, r in enumerate([same, same, odd]):  # what each rank's process would save
    ...     path = dataclasses.replace(r, rank=dict(r.rank, rank=rank)).save(f"gb-rank{rank}.json")
    >>> merged = merge(["gb-rank0.json", "gb-rank1.json", "gb-rank2.json"])
    >>> merged.differing_ranks
    [2]
    >>> print(merged.to_markdown().splitlines()[0]); merged.write_html("ranks.html")
    ### Graph breaks across 3 ranks
    'ranks.html'
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections import Counter
from typing import Any, Callable, Sequence

from torch_xla_ext import _json
from torch_xla_ext.errors import NotFoundError
from torch_xla_ext.graph_breaks import html
from torch_xla_ext.graph_breaks.compare import Comparison
from torch_xla_ext.graph_breaks.report import GraphBreakError, GraphBreakReport

__all__ = ["MergedReport", "merge"]

# Figures every rank of a data-parallel job should agree on.
_FIGURES: list[tuple[str, Callable[[GraphBreakReport], Any]]] = [
    ("Dynamo frame compiles", lambda r: r.dynamo_compiles),
    ("Dynamo graphs", lambda r: r.fx_graphs),
    ("graph breaks", lambda r: r.num_fx_breaks),
    ("recompiles", lambda r: r.recompiles),
    ("AOT graphs", lambda r: r.num_aot_graphs),
    ("XLA partitions", lambda r: r.xla_partitions),
    ("XLA compiles (uncached)", lambda r: r.compiles),
    ("XLA executions", lambda r: r.executions),
    ("syncs", lambda r: r.syncs),
    ("forced executions", lambda r: r.forced_executions),
    ("device->host transfers", lambda r: r.transfers_to_host),
    ("fallback op executions", lambda r: sum(r.fallback_ops.values())),
]


@dataclasses.dataclass
class MergedReport:
    """Per-rank figures, and what differs between ranks (each divergence names its ranks, and
    its mode when the inputs were compare() results)."""

    ranks: list[int]
    files: dict[int, str]
    reports: dict[int, GraphBreakReport]  # the mode shown per rank: dynamo if compared, else the region
    divergences: list[dict[str, Any]]
    modes: dict[str, dict[int, GraphBreakReport]] = dataclasses.field(default_factory=dict)
    kind: str = "report"  # "report": ledger.report() files; "compare": compare() / CLI --json files
    shown: str = "region"  # the mode whose report `reports` holds

    @property
    def differing_ranks(self) -> list[int]:
        return sorted({r for d in self.divergences for r in d["ranks"]})

    def table(self) -> list[tuple[str, dict[int, Any]]]:
        """(figure, {rank: value}); with compare() inputs one row per figure and mode (a rank
        without that mode shows "-")."""
        if self.kind != "compare":
            return [(name, {r: fn(self.reports[r]) for r in self.ranks}) for name, fn in _FIGURES]
        return [(f"{name} ({m})", {r: fn(reps[r]) if r in reps else "-" for r in self.ranks})
                for m, reps in self.modes.items() for name, fn in _FIGURES]

    def to_dict(self) -> dict[str, Any]:
        d = {"kind": self.kind, "ranks": self.ranks, "files": {str(r): f for r, f in self.files.items()},
             "differing_ranks": self.differing_ranks, "divergences": self.divergences,
             "figures": {name: {str(r): v for r, v in vals.items()} for name, vals in self.table()},
             "reports": {str(r): rep.to_dict(timeline=False) for r, rep in self.reports.items()}}
        if self.kind == "compare":
            d["modes"] = {m: {str(r): rep.to_dict(timeline=False) for r, rep in reps.items()}
                          for m, reps in self.modes.items()}
        return d

    def to_json(self, **kwargs: Any) -> str:
        return _json.dumps(self.to_dict(), **kwargs)

    def to_markdown(self) -> str:
        what = f" (compare() results, modes {', '.join(self.modes)})" if self.kind == "compare" else ""
        out = [f"### Graph breaks across {len(self.ranks)} ranks{what}", ""]
        if self.divergences:
            out.append(f"**Ranks that differ: {', '.join(map(str, self.differing_ranks))}**")
            out.append("")
            out += [f"- {_mode_tag(d)}{d['what']} (ranks {', '.join(map(str, d['ranks']))}): {d['detail']}"
                    for d in self.divergences]
        else:
            out.append("All ranks agree: same figures, graph hashes, breaks and recompiles.")
        out += ["", "| figure | " + " | ".join(f"rank {r}" for r in self.ranks) + " |",
                "|---|" + "---:|" * len(self.ranks)]
        for name, vals in self.table():
            out.append(f"| {name} | " + " | ".join(str(vals[r]) for r in self.ranks) + " |")
        return "\n".join(out)

    def __str__(self) -> str:
        return self.to_markdown()

    def write_html(self, path: str) -> str:
        """One self-contained HTML file: the divergences, the per-rank table, each rank's report."""
        return html.write_merged(path, self)


def _mode_tag(d: dict[str, Any]) -> str:
    return f"[{d['mode']}] " if d.get("mode") else ""


def _groups(values: dict[int, Any]) -> tuple[Any, list[int]] | None:
    """(the value most ranks have, the ranks that have another) or None when all agree. With no
    strict majority every rank is named."""
    counts = Counter(values.values())
    if len(counts) <= 1:
        return None
    (top, n), *rest = counts.most_common()
    if rest and rest[0][1] == n:
        return None, sorted(values)
    return top, sorted(r for r, v in values.items() if v != top)


def _minority(have: list[int], ranks: list[int]) -> tuple[list[int], str]:
    """The ranks to name for something only some ranks have: those that have it, or those that
    lack it, whichever are fewer."""
    if len(have) <= len(ranks) - len(have):
        return have, "only on"
    return [r for r in ranks if r not in have], "missing on"


def _read(item: Any, i: int) -> tuple[str, str, dict[str, GraphBreakReport]]:
    """(where, kind, {mode: report}) of one input: a ledger.report() file or GraphBreakReport
    ("report", one mode "region"), or a compare() result / the CLI's --json file / a Comparison
    ("compare", one report per mode: the whole run's)."""
    if isinstance(item, GraphBreakReport):
        return f"reports[{i}]", "report", {"region": item}
    if isinstance(item, Comparison):
        return f"reports[{i}]", "compare", {m: r.report for m, r in item.modes.items()}
    if not isinstance(item, str):
        raise GraphBreakError(f"merge: reports[{i}] is a {type(item).__name__}, not a path, a GraphBreakReport "
                              "or a compare() Comparison")
    if not os.path.isfile(item):
        raise NotFoundError(f"merge: {item}: no such report file")
    with open(item) as f:
        try:
            d = json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise GraphBreakError(f"merge: {item}: not JSON ({e})") from None
    if not (isinstance(d, dict) and "modes" in d and "schema" not in d):
        return item, "report", {"region": GraphBreakReport.from_dict(d, where=item)}
    modes = d["modes"]
    if not isinstance(modes, dict) or not modes:
        raise GraphBreakError(f"merge: {item}: field 'modes' of a compare() result must be a non-empty object")
    out = {}
    for m, res in modes.items():
        if not isinstance(res, dict) or not isinstance(res.get("report"), dict):
            raise GraphBreakError(f"merge: {item}: field 'modes.{m}.report' is missing or not an object")
        out[m] = GraphBreakReport.from_dict(res["report"], where=f"{item}: modes.{m}.report")
    return item, "compare", out


def merge(reports: Sequence[Any]) -> MergedReport:
    """Merges per-rank results: ``ledger.report()`` files (``report.save``) or GraphBreakReports,
    or compare() results — the ``--json`` file ``torch-xla-ext graph-breaks`` writes per rank, or
    Comparison objects — whose modes are merged mode by mode. One kind per merge.

    Example:
        >>> import dataclasses
        >>> from torch_xla_ext.graph_breaks import compare, example_inputs, example_model
        >>> def as_rank(r, rank):               # one process plays every rank here; RANK says it in a job
        ...     return dataclasses.replace(r, rank=dict(r.rank, rank=rank))
        >>> run = dict(modes=("dynamo",), warmup=1, steps=1, isolation="in-process")
        >>> cmp0 = compare("torch_xla_ext.graph_breaks:example", **run)
        >>> r0 = cmp0.modes["dynamo"].report
        >>> merge([r0, as_rank(r0, 1)]).differing_ranks             # the same work
        []
        >>> cmp1 = compare(lambda: (example_model(print_break=False), example_inputs()), **run)   # no print
        >>> res1 = cmp1.modes["dynamo"]
        >>> cmp1 = dataclasses.replace(cmp1, modes={"dynamo": dataclasses.replace(res1, report=as_rank(res1.report, 1))})
        >>> merge([cmp0, cmp1]).divergences[0]["mode"]   # compare() results merge mode by mode
        'dynamo'
    """
    if isinstance(reports, (str, GraphBreakReport)) or not reports or not isinstance(reports, (list, tuple)):
        raise GraphBreakError("merge: expected a non-empty list of report files or reports")
    by_rank: dict[int, dict[str, GraphBreakReport]] = {}
    files: dict[int, str] = {}
    kinds: dict[str, str] = {}
    for i, item in enumerate(reports):
        where, kind, modes = _read(item, i)
        kinds.setdefault(kind, where)
        if len(kinds) > 1:
            raise GraphBreakError(f"merge: {kinds['report']} is one region's report and {kinds['compare']} is a "
                                  "compare() result; merge files of one kind")
        ranks_in = {m: rep.rank.get("rank") for m, rep in modes.items()}
        rank = next(iter(ranks_in.values()))
        if not isinstance(rank, int) or isinstance(rank, bool):
            raise GraphBreakError(f"merge: {where} has no rank (field rank.rank); reports from account() carry one")
        if len(set(ranks_in.values())) > 1:
            raise GraphBreakError(f"merge: {where}: its modes claim different ranks {ranks_in}")
        if rank in by_rank:
            raise GraphBreakError(f"merge: {where} and {files[rank]} both claim rank {rank} (each process of "
                                  "a job needs its own RANK, as torchrun sets it)")
        by_rank[rank], files[rank] = modes, where
    kind = next(iter(kinds))
    ranks = sorted(by_rank)
    divergences: list[dict[str, Any]] = []
    mode_names = list(dict.fromkeys(m for r in ranks for m in by_rank[r]))
    per_mode = {m: {r: by_rank[r][m] for r in ranks if m in by_rank[r]} for m in mode_names}
    tag = kind == "compare"
    for m, reps in per_mode.items():
        if len(reps) < len(ranks):
            odd, where = _minority(sorted(reps), ranks)
            divergences.append({"what": f"mode {where} some ranks", "mode": m, "ranks": odd, "key": m,
                                "detail": f"mode {m} {where} rank(s) {', '.join(map(str, odd))}"})
        divergences += _diverge(reps, m if tag else None)
    shown = "dynamo" if "dynamo" in per_mode else mode_names[0]
    first = {r: by_rank[r].get(shown) or next(iter(by_rank[r].values())) for r in ranks}
    return MergedReport(ranks, files, first, divergences, per_mode, kind, shown)


def _diverge(by_rank: dict[int, GraphBreakReport], mode: str | None) -> list[dict[str, Any]]:
    """Every figure, graph hash, break, recompile and fallback op that differs across the ranks
    of one mode."""
    ranks = sorted(by_rank)
    divergences: list[dict[str, Any]] = []
    pre = f"[{mode}] " if mode else ""

    def add(d: dict[str, Any]) -> None:
        if mode:
            d["mode"] = mode
        divergences.append(d)

    if len(ranks) < 2:
        return divergences
    for name, fn in _FIGURES:
        values = {r: fn(by_rank[r]) for r in ranks}
        g = _groups(values)
        if g is not None:
            top, odd = g
            detail = ", ".join(f"rank {r}: {values[r]}" for r in odd)
            detail += f" (the other ranks: {top})" if top is not None else " (no majority)"
            add({"what": f"{name} differ", "figure": name, "ranks": odd, "detail": pre + detail,
                 "values": {str(r): v for r, v in values.items()}})

    def keyed(kind: str, label: str, keys_of: Callable[[GraphBreakReport], dict[str, int]]) -> None:
        per_rank = {r: keys_of(by_rank[r]) for r in ranks}
        for key in sorted(set().union(*per_rank.values())):
            have = [r for r in ranks if key in per_rank[r]]
            if len(have) < len(ranks):
                odd, where = _minority(have, ranks)
                add({"what": f"{kind} {where} some ranks", "ranks": odd, "key": key,
                     "detail": f"{pre}{label} {key} {where} rank(s) {', '.join(map(str, odd))}"})
                continue
            g = _groups({r: per_rank[r][key] for r in ranks})
            if g is not None:
                top, odd = g
                add({"what": f"{kind} count differs", "ranks": odd, "key": key,
                     "detail": f"{pre}{label} {key}: " + ", ".join(f"rank {r}: {per_rank[r][key]}x" for r in odd)
                     + (f" (the other ranks: {top}x)" if top is not None else "")})

    keyed("XLA graph hash", "graph", lambda r: {h[:16]: v.get("executions", 0) + v.get("compiles", 0)
                                                for h, v in r.per_graph_hash.items()})
    keyed("graph break", "break", lambda r: {f"'{b['gb_type']}' at {b['frame']}": b["count"] for b in r.fx_breaks})
    keyed("recompile", "recompile", lambda r: {f"'{b['reason']}' at {b['frame']}": b["count"]
                                               for b in r.recompile_reasons})
    keyed("CPU fallback op", "fallback op", lambda r: dict(r.fallback_ops))
    return divergences
