"""Ranks that diverge: the first step where one rank's sequence of graphs differs from the
others', what differs, and the ranks that are missing or stopped early.

A rank's sequence at step n is what torch_xla compiled and ran in that step, in order: each
compile's graph hash and each execution's (trigger kind, graph hash), from the rank's records
(torch_xla's own analysis). Ranks of one job running the same program compile and run the same
graphs at every step; the first step where they do not is where a collective will wait.

Example:
    >>> seq = {0: {1: ["c:aa", "x:sync:aa"]}, 1: {1: ["c:bb", "x:sync:bb"]}, 2: {1: ["c:aa", "x:sync:aa"]}}
    >>> first_divergent_step(seq)
    (1, [1])
"""

from __future__ import annotations

import collections
from typing import Any

from torch_xla_ext.trace import frames as _frames
from torch_xla_ext.trace import graphs as _graphs
from torch_xla_ext.trace import snapshot as _snapshot
from torch_xla_ext.trace.report.load import RankTrace
from torch_xla_ext.trace.report.model import Divergence
from torch_xla_ext.trace.schema import Compile

__all__ = ["divergence", "first_divergent_step", "sequences"]


def sequences(traces: list[RankTrace]) -> dict[Any, dict[int, list[str]]]:
    """rank -> step -> the step's sequence of graphs."""
    out: dict[Any, dict[int, list[str]]] = {}
    for t in traces:
        per: dict[int, list[str]] = collections.defaultdict(list)
        for c in t.compiles:
            per[c.step].append(f"c:{c.graph_hash}")
        for s in t.steps:
            for kind, _sid, h in s.executions:
                per[s.n].append(f"x:{kind}:{h}")
        out[t.key] = dict(per)
    return out


def first_divergent_step(seq: dict[Any, dict[int, list[str]]]) -> tuple[int | None, list[Any]]:
    """(the first step whose sequence is not the same on every rank that reached it, the ranks
    not in its largest group), or (None, [])."""
    if len(seq) < 2:
        return None, []
    steps = sorted({n for per in seq.values() for n in per})
    for n in steps:
        present = {r: tuple(per.get(n, ())) for r, per in seq.items() if n in per or _reached(per, n)}
        if len(present) < 2:
            continue
        groups = collections.Counter(present.values())
        if len(groups) > 1:
            majority, size = groups.most_common(1)[0]
            if list(groups.values()).count(size) > 1:  # no majority: every rank of a smaller group differs
                majority = present[min(present, key=_order)]
            return n, sorted((r for r, s in present.items() if s != majority), key=_order)
    return None, []


def _reached(per: dict[int, list[str]], n: int) -> bool:
    return bool(per) and max(per) > n


def _order(r: Any) -> tuple[int, Any]:
    return (0, r) if isinstance(r, int) else (1, str(r))


def divergence(traces: list[RankTrace]) -> Divergence:
    """Missing and early-stopped ranks, and the first divergent step with what differs."""
    world = max((t.header.world_size or 0 for t in traces), default=0)
    present = sorted({t.rank for t in traces if t.rank is not None})
    missing = sorted(set(range(world)) - set(present)) if world else []
    last = {t.key: t.last_step for t in traces}
    top = max(last.values(), default=0)
    ended = {t.key: t.end is not None for t in traces}
    early = []
    for r, n in sorted(last.items(), key=lambda kv: _order(kv[0])):
        if n < top or (not ended[r] and any(ended.values())):
            early.append({"rank": r, "last_step": n, "ended": ended[r]})
    seq = sequences(traces)
    step, odd = first_divergent_step(seq)
    out = Divergence(ranks=[t.rank for t in traces], world_size=world or None, missing_ranks=missing,
                     stopped_early=early, first_step=step, ranks_that_differ=odd, details=[])
    if step is not None:
        groups = collections.Counter(tuple(per.get(step, ())) for per in seq.values() if step in per)
        sizes = sorted(groups.values(), reverse=True)
        out.no_majority = len(sizes) > 1 and sizes[0] == sizes[1]
        out.details = _details(traces, step, odd)
    return out


def _details(traces: list[RankTrace], step: int, odd: list[Any]) -> list[dict[str, Any]]:
    by_rank = {t.key: t for t in traces}
    others = [r for r in by_rank if r not in odd]
    ref = by_rank[others[0]] if others else None
    rows = []
    for r in odd:
        t = by_rank[r]
        mine = [c for c in t.compiles if c.step == step]
        theirs = [c for c in ref.compiles if c.step == step] if ref is not None else []
        row: dict[str, Any] = {"rank": r, "reference_rank": ref.rank if ref is not None else None, "step": step}
        row["compiles"] = [{"graph_hash": c.graph_hash, "site": c.trigger.site, "kind": c.trigger.kind} for c in mine]
        row["reference_compiles"] = [{"graph_hash": c.graph_hash, "site": c.trigger.site, "kind": c.trigger.kind}
                                     for c in theirs]
        row["differences"] = _compare(t, ref, mine, theirs, step)
        rows.append(row)
    return rows


def _compare(t: RankTrace, ref: RankTrace | None, mine: list[Compile], theirs: list[Compile],
             step: int) -> list[dict[str, Any]]:
    """What differs between a divergent rank's compile at the step and the reference rank's graph
    at the same site: their captured graphs, else the tensors in scope, else the hashes."""
    if ref is None:
        return []
    out: list[dict[str, Any]] = []
    for c in mine:
        site = c.trigger.site
        # The reference's graph at that site: compiled at this step, or the last one before it.
        cands = [x for x in ref.compiles if x.trigger.site == site and x.step <= step]
        other = cands[-1] if cands else None
        if other is None:
            out.append({"what": "site", "site": site, "detail": f"compiled at {site}, where rank {ref.rank} "
                        "compiled nothing up to this step"})
            continue
        g0, g1 = ref.graphs.get(other.k), t.graphs.get(c.k)
        if g0 is not None and g1 is not None:
            changes = _graphs.diff(g0, g1, _frames.is_library)
            if c.tensors:
                _graphs.name_inputs(changes, {k: list(v) for k, v in c.tensors.items()})
            out.extend(dict(x, site=x.get("site", site)) for x in changes)
        elif c.tensors and other.tensors:
            out.extend(dict(x, what="tensor_" + x["what"], site=site) for x in _snapshot.diff(other.tensors, c.tensors))
        if not out or all(x.get("site") != site for x in out):
            out.append({"what": "graph_hash", "site": site, "old": other.graph_hash, "new": c.graph_hash,
                        "inputs": [other.inputs, c.inputs]})
    if not mine and theirs:
        out.append({"what": "missing_compile", "detail": f"rank {ref.rank} compiled "
                    + ", ".join(f"{x.graph_hash[:12]} at {x.trigger.site}" for x in theirs)
                    + " at this step; this rank did not"})
    if not mine and not theirs:
        out.append({"what": "executions", "detail": "the same graphs compiled, run in another order or number"})
    return out
