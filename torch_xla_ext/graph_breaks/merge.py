"""merge(): the per-rank reports of one job, and the ranks that differ.

Every process of a multi-process job accounts its own region and saves its report
(``report.save("gb-rank{rank}.json")``; each report carries its rank). Ranks of a data-parallel
job should do the same work; one that compiles an extra graph, compiles another graph hash or
takes a graph break the others do not is the rank the others wait for at the next collective
(the classic pod stall). merge() compares every figure and every graph hash, break and
recompile across ranks and names the ranks that differ.

Example:
    >>> merged = merge(["gb-rank0.json", "gb-rank1.json", "gb-rank2.json"])
    >>> merged.differing_ranks
    [2]
    >>> print(merged.to_markdown()); merged.write_html("ranks.html")
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from typing import Any, Callable, Sequence

from torch_xla_ext.graph_breaks.report import GraphBreakError, GraphBreakReport, load_report

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
    """Per-rank figures, and what differs between ranks (each divergence names its ranks)."""

    ranks: list[int]
    files: dict[int, str]
    reports: dict[int, GraphBreakReport]
    divergences: list[dict[str, Any]]

    @property
    def differing_ranks(self) -> list[int]:
        return sorted({r for d in self.divergences for r in d["ranks"]})

    def table(self) -> list[tuple[str, dict[int, Any]]]:
        return [(name, {r: fn(self.reports[r]) for r in self.ranks}) for name, fn in _FIGURES]

    def to_dict(self) -> dict[str, Any]:
        return {"ranks": self.ranks, "files": {str(r): f for r, f in self.files.items()},
                "differing_ranks": self.differing_ranks, "divergences": self.divergences,
                "figures": {name: {str(r): v for r, v in vals.items()} for name, vals in self.table()},
                "reports": {str(r): rep.to_dict(timeline=False) for r, rep in self.reports.items()}}

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    def to_markdown(self) -> str:
        out = [f"### Graph breaks across {len(self.ranks)} ranks", ""]
        if self.divergences:
            out.append(f"**Ranks that differ: {', '.join(map(str, self.differing_ranks))}**")
            out.append("")
            out += [f"- {d['what']} (ranks {', '.join(map(str, d['ranks']))}): {d['detail']}" for d in self.divergences]
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
        from torch_xla_ext.graph_breaks import html

        return html.write_merged(path, self)


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


def merge(reports: Sequence[str | GraphBreakReport]) -> MergedReport:
    """Merges per-rank reports (paths to saved JSON, or GraphBreakReport objects).

    Example:
        >>> merge(["gb-rank0.json", "gb-rank1.json"]).differing_ranks
        []
    """
    if isinstance(reports, (str, GraphBreakReport)) or not reports:
        raise GraphBreakError("merge: expected a non-empty list of report files or reports")
    by_rank: dict[int, GraphBreakReport] = {}
    files: dict[int, str] = {}
    for i, item in enumerate(reports):
        where = item if isinstance(item, str) else f"reports[{i}]"
        rep = load_report(item) if isinstance(item, str) else item
        if not isinstance(rep, GraphBreakReport):
            raise GraphBreakError(f"merge: {where} is a {type(rep).__name__}, not a GraphBreakReport or a path")
        rank = rep.rank.get("rank")
        if not isinstance(rank, int):
            raise GraphBreakError(f"merge: {where} has no rank (field rank.rank); reports from account() carry one")
        if rank in by_rank:
            raise GraphBreakError(f"merge: {where} and {files[rank]} both claim rank {rank}")
        by_rank[rank], files[rank] = rep, where
    ranks = sorted(by_rank)
    divergences: list[dict[str, Any]] = []

    for name, fn in _FIGURES:
        values = {r: fn(by_rank[r]) for r in ranks}
        g = _groups(values)
        if g is not None:
            top, odd = g
            detail = ", ".join(f"rank {r}: {values[r]}" for r in odd)
            detail += f" (the other ranks: {top})" if top is not None else " (no majority)"
            divergences.append({"what": f"{name} differ", "figure": name, "ranks": odd, "detail": detail,
                                "values": {str(r): v for r, v in values.items()}})

    def keyed(kind: str, label: str, keys_of: Callable[[GraphBreakReport], dict[str, int]]) -> None:
        per_rank = {r: keys_of(by_rank[r]) for r in ranks}
        for key in sorted(set().union(*per_rank.values())):
            have = [r for r in ranks if key in per_rank[r]]
            if len(have) < len(ranks):
                # Name the minority: the ranks that have it, or the ranks that lack it.
                odd = have if len(have) <= len(ranks) - len(have) else [r for r in ranks if r not in have]
                where = "only on" if odd == have else "missing on"
                divergences.append({"what": f"{kind} {where} some ranks", "ranks": odd, "key": key,
                                    "detail": f"{label} {key} {where} rank(s) {', '.join(map(str, odd))}"})
                continue
            g = _groups({r: per_rank[r][key] for r in ranks})
            if g is not None:
                top, odd = g
                divergences.append({"what": f"{kind} count differs", "ranks": odd, "key": key,
                                    "detail": f"{label} {key}: " + ", ".join(f"rank {r}: {per_rank[r][key]}x"
                                                                             for r in odd)
                                    + (f" (the other ranks: {top}x)" if top is not None else "")})

    keyed("XLA graph hash", "graph", lambda r: {h[:16]: v.get("executions", 0) + v.get("compiles", 0)
                                                for h, v in r.per_graph_hash.items()})
    keyed("graph break", "break", lambda r: {f"'{b['gb_type']}' at {b['frame']}": b["count"] for b in r.fx_breaks})
    keyed("recompile", "recompile", lambda r: {f"'{b['reason']}' at {b['frame']}": b["count"]
                                               for b in r.recompile_reasons})
    keyed("CPU fallback op", "fallback op", lambda r: dict(r.fallback_ops))
    return MergedReport(ranks, files, by_rank, divergences)
