"""Ranks that diverge: the first step where one rank's sequence of graphs differs from the
others', what differs, and the ranks that are missing or stopped early.

A rank's sequence at step n is what it compiled and ran in that step, in order: each compile's
graph hash (``build.COMPILE_SOURCES``' rows: torch_xla's graph hash, or the digest of a JAX call's
cache key) and each execution's (trigger kind, graph hash) where the rank's step source knows them
(torch_xla's own analysis). A step is the rank's own (``build.Progress``: a step marker, or a call
of its most-called compiled function). Computations compiled op by op are left out: what a
collective waits on is the compiled programs. Ranks of one job running the same program compile
and run the same graphs at every step; the first step where they do not is where a collective
will wait.

Example:
    >>> seq = {0: {1: ["c:aa", "x:sync:aa"]}, 1: {1: ["c:bb", "x:sync:bb"]}, 2: {1: ["c:aa", "x:sync:aa"]}}
    >>> first_divergent_step(seq)
    (1, [1])
    >>> first_divergent_step({0: {1: ["c:aa"]}, 1: {1: ["c:aa"], 3: ["c:cc"]}}, counts={0: 4, 1: 4})
    (3, [1])
"""

from __future__ import annotations

import collections
from typing import Any

from torch_xla_ext.trace import frames as _frames
from torch_xla_ext.trace import graphs as _graphs
from torch_xla_ext.trace import snapshot as _snapshot
from torch_xla_ext.trace.jit import signatures as _signatures
from torch_xla_ext.trace.report.load import RankTrace
from torch_xla_ext.trace.report.model import CompileRow, Divergence
from torch_xla_ext.trace.schema import JitCompile

__all__ = ["divergence", "first_divergent_step", "sequences"]


def sequences(by_rank: dict[Any, tuple[list[CompileRow], Any]]) -> dict[Any, dict[int, list[str]]]:
    """rank -> step -> the step's sequence of graphs, from each rank's (compile rows, progress)."""
    out: dict[Any, dict[int, list[str]]] = {}
    for key, (rows, prog) in by_rank.items():
        per: dict[int, list[str]] = collections.defaultdict(list)
        for c in rows:
            if not c.eager and not c.recovered:
                per[c.step].append(f"c:{c.graph_hash}")
        for n, executions in prog.executions.items():
            per[n].extend(executions)
        out[key] = dict(per)
    return out


def first_divergent_step(seq: dict[Any, dict[int, list[str]]],
                         counts: dict[Any, int] | None = None) -> tuple[int | None, list[Any]]:
    """(the first step whose sequence is not the same on every rank that reached it, the ranks
    not in its largest group), or (None, []). ``counts``: rank -> the steps it ran, where known: a
    rank that ran step n without compiling anything in it reached n too (a JAX process whose
    compiled programs are all cached runs nothing the sequences list)."""
    if len(seq) < 2:
        return None, []
    counts = counts or {}
    steps = sorted({n for per in seq.values() for n in per})
    for n in steps:
        present = {r: tuple(per.get(n, ())) for r, per in seq.items()
                   if n in per or _reached(per, n) or counts.get(r, 0) >= n}
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


def divergence(traces: list[RankTrace], by_rank: dict[Any, tuple[list[CompileRow], Any]]) -> Divergence:
    """Missing and early-stopped ranks, and the first divergent step with what differs
    (``by_rank``: rank key -> (its compile rows, its ``build.Progress``))."""
    world = max((t.header.world_size or 0 for t in traces), default=0)
    present = sorted({t.rank for t in traces if t.rank is not None})
    missing = sorted(set(range(world)) - set(present)) if world else []
    last = {t.key: by_rank[t.key][1].count for t in traces}
    top = max(last.values(), default=0)
    ended = {t.key: t.end is not None for t in traces}
    early = []
    for r, n in sorted(last.items(), key=lambda kv: _order(kv[0])):
        if n < top or (not ended[r] and any(ended.values())):
            early.append({"rank": r, "last_step": n, "ended": ended[r]})
    seq = sequences(by_rank)
    step, odd = first_divergent_step(seq, last)
    out = Divergence(ranks=[t.rank for t in traces], world_size=world or None, missing_ranks=missing,
                     stopped_early=early, first_step=step, ranks_that_differ=odd, details=[])
    if step is not None:
        groups = collections.Counter(tuple(per.get(step, ())) for per in seq.values() if step in per)
        sizes = sorted(groups.values(), reverse=True)
        out.no_majority = len(sizes) > 1 and sizes[0] == sizes[1]
        out.details = _details(traces, by_rank, step, odd)
    return out


def _details(traces: list[RankTrace], by_rank: dict[Any, tuple[list[CompileRow], Any]], step: int,
             odd: list[Any]) -> list[dict[str, Any]]:
    traced = {t.key: t for t in traces}
    others = [r for r in traced if r not in odd]
    ref = traced[others[0]] if others else None
    out = []
    for r in odd:
        t = traced[r]
        mine = [c for c in by_rank[r][0] if c.step == step and not c.eager and not c.recovered]
        ref_rows = [c for c in by_rank[ref.key][0] if not c.eager and not c.recovered] if ref is not None else []
        theirs = [c for c in ref_rows if c.step == step]
        row: dict[str, Any] = {"rank": r, "reference_rank": ref.rank if ref is not None else None, "step": step}
        row["compiles"] = [_brief(c) for c in mine]
        row["reference_compiles"] = [_brief(c) for c in theirs]
        row["differences"] = _compare(t, ref, mine, ref_rows, theirs, step)
        out.append(row)
    return out


def _brief(c: CompileRow) -> dict[str, Any]:
    return {"graph_hash": c.graph_hash, "site": c.trigger.site, "kind": c.trigger.kind, "function": c.trigger.function,
            "call": c.call}


def _compare(t: RankTrace, ref: RankTrace | None, mine: list[CompileRow], ref_rows: list[CompileRow],
             theirs: list[CompileRow], step: int) -> list[dict[str, Any]]:
    """What differs between a divergent rank's compile at the step and the reference rank's
    compile of the same site and function (at this step, or the last before it): by the
    comparison of the rows' frontend (:data:`COMPARE`), else their hashes."""
    if ref is None:
        return []
    out: list[dict[str, Any]] = []
    for c in mine:
        site = c.trigger.site
        cands = [x for x in ref_rows if x.trigger.site == site and x.trigger.function == c.trigger.function
                 and x.step <= step]
        other = cands[-1] if cands else None
        if other is None:
            out.append({"what": "site", "site": site, "detail": f"compiled at {site}, where rank {ref.rank} "
                        "compiled nothing up to this step"})
            continue
        compare = COMPARE.get(c.kind)
        found = compare(t, ref, c, other) if compare is not None else []
        out.extend(dict(x, site=x.get("site", site)) for x in found)
        if all(x.get("site", site) != site for x in found):  # nothing (or nothing at this site) found
            out.append({"what": "graph_hash", "site": site, "old": other.graph_hash, "new": c.graph_hash,
                        "inputs": [other.inputs, c.inputs]})
    if not mine and theirs:
        out.append({"what": "missing_compile", "detail": f"rank {ref.rank} compiled "
                    + ", ".join(f"{x.graph_hash[:12]} at {x.trigger.site}" for x in theirs)
                    + " at this step; this rank did not"})
    if not mine and not theirs:
        out.append({"what": "executions", "detail": "the same graphs compiled, run in another order or number"})
    return out


def _compare_lazy(t: RankTrace, ref: RankTrace, c: CompileRow, other: CompileRow) -> list[dict[str, Any]]:
    """Two torch_xla graphs: their captured graphs op by op, else the tensors in scope."""
    mine = next((x for x in t.compiles if x.k == c.k), None)
    theirs = next((x for x in ref.compiles if x.k == other.k), None)
    g0, g1 = ref.graphs.get(other.k), t.graphs.get(c.k)
    if g0 is not None and g1 is not None:
        changes = _graphs.diff(g0, g1, _frames.is_library)
        if mine is not None and mine.tensors:
            _graphs.name_inputs(changes, {k: list(v) for k, v in mine.tensors.items()})
        return changes
    if mine is not None and theirs is not None and mine.tensors and theirs.tensors:
        return [dict(x, what="tensor_" + x["what"]) for x in _snapshot.diff(theirs.tensors, mine.tensors)]
    return []


def _compare_jax(t: RankTrace, ref: RankTrace, c: CompileRow, other: CompileRow) -> list[dict[str, Any]]:
    """Two JAX compiles of a function: their calls' signatures, named as the divergent rank's own
    compile named its changes (torch's names, where torchax jitted the function)."""
    mine = next((x for x in t.of(JitCompile) if x.k == c.k), None)
    theirs = next((x for x in ref.of(JitCompile) if x.k == other.k), None)
    if mine is None or theirs is None or not mine.signature or not theirs.signature:
        return []
    names = {x.get("jax_name"): (x.get("name"), x.get("role")) for x in mine.changed if x.get("name")}
    _, changes = _signatures.diff(mine.signature, theirs.signature)
    for x in changes:
        if x["jax_name"] in names:
            x["name"], x["role"] = names[x["jax_name"]]
    return changes


# How two compiles of one frontend (CompileRow.kind) differ, beyond their hashes.
COMPARE = {"lazy": _compare_lazy, "dynamo": _compare_lazy, "jax": _compare_jax}
