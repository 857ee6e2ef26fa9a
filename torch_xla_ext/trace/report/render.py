"""The report in words: the stderr summary (at most 20 lines) and ``report.md``; :func:`change_text`
is the one wording of a change, which the HTML page uses too.

Example:
    >>> change_text({"what": "input", "index": 0, "old": [4, 16], "new": [4, 24], "names": ["ids"],
    ...              "role": "user_input"})
    'input 0 (user_input ids): [4, 16] -> [4, 24]'
"""

from __future__ import annotations

import os
from typing import Any

from torch_xla_ext.trace.report.model import CompileRow, Report

__all__ = ["MAX_SUMMARY_LINES", "NO_SITE", "change_text", "has_ranks_section", "plural", "ranks_phrase", "step_at", "summary_lines",
           "to_markdown"]

MAX_SUMMARY_LINES = 20
# What a site without a frame of the user's code reads as (never an empty location).
NO_SITE = "(no line of the user's code)"


def _short(path: str) -> str:
    """A site without its directory, for the summary."""
    if not path:
        return NO_SITE
    file, _, line = path.rpartition(":")
    return f"{os.path.basename(file)}:{line}" if file else path


def _lib(site: str) -> str:
    """A site in an installed package as ``package/module.py:line``."""
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in site:
            return site.split(marker, 1)[1]
    return site


def change_text(c: dict[str, Any]) -> str:
    what = c.get("what", "")
    if what == "input" and c.get("name"):  # a jitted function's argument, by its name (JAX's types)
        return f"input {c['name']} ({c.get('role') or 'user_input'}): {c.get('before')} -> {c.get('now')}"
    if what == "input" and c.get("jax_name"):  # named by JAX alone
        return f"input {c['jax_name']}: {c.get('before')} -> {c.get('now')}"
    if what == "structure":
        keys = list(c.get("added") or []) + list(c.get("removed") or [])
        shown = ", ".join(keys[:4]) + (f" and {len(keys) - 4} more" if len(keys) > 4 else "")
        verb = "appeared" if not c.get("removed") else ("went away" if not c.get("added") else "changed")
        if c.get("jax_name") == "kwargs":
            return f"keyword arguments: {shown} {verb}"
        who = c.get("name") or c.get("jax_name")
        return f"{who} ({c.get('role') or 'user_input'}): entries {shown} {verb}"
    if what == "static":
        return f"static argument {c.get('name') or c.get('jax_name')}: {c.get('before')} -> {c.get('now')}"
    if what == "new_function":
        return f"{c.get('function')} jitted again: a new cache, its earlier compiles not reused"
    if what == "same_signature":
        return f"the same argument types as call {c.get('previous_call')}"
    if what == "jax_only":
        return f"{c.get('function')} compiled again (jitted by the program itself: JAX's names only)"
    if what == "input":
        who = f" ({c['role']} {', '.join(c['names'][:3])})" if c.get("names") else ""
        dt = f" {c['old_dtype']} -> {c['new_dtype']}" if c.get("old_dtype") else ""
        return f"input {c.get('index')}{who}: {c.get('old')} -> {c.get('new')}{dt}"
    if what == "inputs":
        added = ", ".join(f"{a['count']}x{a['shape']} {a['dtype']}" for a in c.get("added", [])[:3])
        who = f" ({c['role']}: {', '.join(c['names'][:2])}, ...)" if c.get("names") else ""
        return f"inputs {c.get('old')} -> {c.get('new')}" + (f", new: {added}" if added else "") + who
    if what == "constant":
        where = f" at {_lib(c['site'])}" if c.get("site") else " (no source line: made while lowering)"
        return f"constant of {c.get('op')}{where}: {c.get('old')} -> {c.get('new')}"
    if what == "op":
        if c.get("same_op_other_type"):
            text = f"first op on other shapes #{c.get('index')}: {c.get('old')} -> {c.get('new').split(' -> ')[-1]}"
        else:
            text = f"first differing op #{c.get('index')}: {c.get('old')} -> {c.get('new')}"
        if c.get("new_site"):
            text += f" at {_lib(c['new_site'])}"
        w = c.get("first_with_source")
        if w:
            text += f" (first with a source line: {w['op']} at {_lib(w['site'])})"
        return text
    if what == "outputs":
        return f"outputs {c.get('old')} -> {c.get('new')}"
    if what in ("tensor_shape", "tensor_dtype"):
        return f"{c.get('role')} {c.get('name')}: {c.get('old')} -> {c.get('new')}"
    if what in ("tensor_appeared", "tensor_gone"):
        verb = "appeared" if what == "tensor_appeared" else "gone"
        return f"{c.get('count')} {c.get('role')} tensors {verb} ({', '.join(c.get('names', [])[:2])}, ...)"
    if what == "tensor_more":
        return f"and {c.get('count')} more tensors changed"
    if what == "guard":
        return f"Dynamo recompile {c.get('compile_id')}: guard failed: {str(c.get('reason', '')).splitlines()[0][:160]}"
    if what == "not_captured":
        return c.get("detail", "not captured")
    if what == "graph_hash":
        return f"graph {str(c.get('old'))[:12]} -> {str(c.get('new'))[:12]} at {_short(c.get('site', ''))} (inputs {c.get('inputs')})"
    return c.get("detail") or what


def _trigger(c: CompileRow) -> str:
    t = c.trigger
    kind = t.kind
    if kind == "host_read" and t.op:
        kind = f"host read .{t.op}()" if t.op in ("item", "tolist", "cpu", "numpy") else f"host read ({t.op})"
    elif c.name:  # a program the compiler names (JAX's): the function, or the op run op by op
        kind = f"{kind} {t.op or t.function}" + (f" call {c.call}" if c.call is not None else "")
    return f"{kind} at {_short(t.site)}"


def plural(unit: str) -> str:
    """"steps", "calls of f"."""
    head, _, tail = unit.partition(" ")
    return f"{head}s" + (f" {tail}" if tail else "")


def summary_lines(report: Report) -> list[str]:
    """At most :data:`MAX_SUMMARY_LINES` lines: per rank how it ended and its compiles, the sites
    that compile most (and why, with advice), host reads, processes whose recorder did not start,
    problems, divergence."""
    lines: list[str] = []
    ranks = report.ranks
    total = len(report.compiles)
    eager = sum(1 for c in report.compiles if c.eager)
    counted = [r for r in ranks if r.torch_xla_compile_count is not None]
    # torch_xla's own count stands beside the total where torch_xla compiled (its graphs are unnamed
    # rows; JAX's programs carry their function's name), or to confirm that nothing compiled; a JAX
    # program's compiles are not in it, so beside those alone its 0 would read as a contradiction.
    torch_xla_compiled = any(not c.name for c in report.compiles) or any(r.torch_xla_compile_count for r in counted)
    lines.append(f"torch-xla-ext trace: {len(ranks)} process{'es' if len(ranks) != 1 else ''}, {total} XLA compile"
                 f"{'s' if total != 1 else ''}"
                 + (f" ({eager} of them op by op)" if eager else "")
                 + (" (torch_xla's CompileTime: " + ", ".join(str(r.torch_xla_compile_count) if r.torch_xla_compile_count
                                                               is not None else "?" for r in ranks[:8]) + ")"
                    if (counted or not eager) and (torch_xla_compiled or not total) else ""))
    unit = {r.rank: r.unit for r in ranks}
    for r in ranks[:4]:
        lines.append(f"  {r.label}: {r.steps} {plural(r.unit)}, {r.compiles} compiles ({r.compile_ms / 1e3:.1f} s"
                     + (f", {r.op_by_op} op by op" if r.op_by_op else "") + f"); "
                     f"{r.stopped}" + (f"; {r.steady}" if r.steady else ""))
    if len(ranks) > 4:
        lines.append(f"  ... {len(ranks) - 4} more processes in report.md")
    recompiles = [c for c in report.compiles if c.previous_step is not None or c.changed]
    again = {(c.rank, c.trigger.site) for c in recompiles if not c.eager}  # a site whose compile was a recompile
    for s in [s for s in report.sites if s.compiles > 1 or (s.rank, s.site) in again][:3]:
        flag = " EVERY STEP" if s.every_step else (f" COMPILES ON {s.compiles} OF {s.steps_run} {plural(_unit_word(unit.get(s.rank, 'step'))).upper()}"
                                                     if s.most_steps else "")
        of = s.op or (s.function if s.kind == "jit" else "")
        lines.append(f"  {s.compiles} compile{'s' if s.compiles != 1 else ''} at {_short(s.site)} "
                     f"({s.kind}{' ' + of if of else ''}){flag}")
        last = next((c for c in reversed(recompiles) if c.trigger.site == s.site and c.rank == s.rank
                     and not c.eager), None)
        if last is not None:
            what = "; ".join(change_text(c) for c in _leading(last.changed))
            if what:
                lines.append(f"    {_unit_word(unit.get(s.rank, 'step'))} {last.step}: {what}"[:240])
            if last.advice:
                lines.append(f"    -> {last.advice}"[:240])
    groups = report.op_by_op
    if groups:
        g = groups[0]
        n = sum(x.compiles for x in groups)
        runs = f", run {g.executions} times" if g.executions is not None else ""
        lines.append(f"  op by op: {n} compiles ({sum(x.compile_ms for x in groups) / 1e3:.1f} s) at {len(groups)} "
                     f"line/op{'s' if len(groups) != 1 else ''}; most at {_short(g.site)} {g.op} ({g.compiles} "
                     f"compiles{runs})"[:240])
    for f in report.findings[:2]:
        lines.append(f"  {f.kind} in {f.function} (call {f.call}) at {_short(f.site)}: `{f.code}` "
                     f"({f.exception.type})"[:240])
        lines.append(f"    -> {f.advice}"[:240])
    host = [s for s in report.sync_points if s.kind == "host_read"]
    if host:
        h = host[0]
        lines.append(f"  host reads run graphs at {_short(h.site)} ({h.executions} executions in {h.steps} steps)")
    if report.startup_errors:
        n, e = len(report.startup_errors), report.startup_errors[0]
        lines.append(f"  the recorder did not start in {n} process{'es' if n != 1 else ''} ({e.file}"
                     f"{' ...' if n > 1 else ''}): {(e.text.splitlines() or [''])[0]}"[:240])
    problems = sum(len(r.problems) for r in ranks) + len(report.problems)
    if problems:
        lines.append(f"  {problems} problem{'s' if problems != 1 else ''} the recorder or the report met: see report.md")
    d = report.divergence
    if d.first_step is not None:
        odd = d.ranks_that_differ
        lines.append(f"  ranks diverge at {step_at(report, d.first_step)}: {ranks_phrase(odd)} "
                     f"{'runs' if len(odd) == 1 else 'run'} other graphs")
        for row in d.details[:1]:
            for c in row["differences"][:2]:
                lines.append(f"    rank {row['rank']}: {change_text(c)}"[:240])
    if d.missing_ranks:
        lines.append(f"  missing ranks: {', '.join(map(str, d.missing_ranks))}")
    for e in d.stopped_early[:2]:
        lines.append(f"  rank {e['rank']} stopped early, at step {e['last_step']}")
    lines.append(f"  report: {os.path.join(report.directory or '.', 'report.md')} (and .json, .html, "
                 "trace.perfetto.json)")
    if len(lines) > MAX_SUMMARY_LINES:
        lines = lines[:MAX_SUMMARY_LINES - 1] + [lines[-1]]
    return lines


def step_at(report: Report, n: int) -> str:
    """"step 3", or "call 3 of Tagger.forward" where the ranks count calls of a compiled function."""
    unit = report.ranks[0].unit if report.ranks else "step"
    word, _, of = unit.partition(" of ")
    return f"{word} {n}" + (f" of {of}" if of else "")


def _unit_word(unit: str) -> str:
    """"call" of "call of f"."""
    return unit.split(" ", 1)[0]


def _leading(changed: list[dict[str, Any]], n: int = 2) -> list[dict[str, Any]]:
    """The first ``n`` changes a user can act on (the report orders them so); the others only
    when there is none."""
    mine = [c for c in changed if c.get("actionable", True)]
    return (mine or changed)[:n]


def ranks_phrase(ranks: list[Any]) -> str:
    """"rank 1" or "ranks 1, 2"."""
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"


def _cell(v: Any) -> str:
    return str(v).replace("|", "\\|").replace("\n", " ")


def _table(head: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(_cell(v) for v in r) + " |" for r in rows]
    return out + [""]


def has_ranks_section(report: Report) -> bool:
    """The "Ranks" section says something: more than one process, or ranks missing."""
    return len(report.divergence.ranks) > 1 or bool(report.divergence.missing_ranks)


def _figure(v: Any) -> Any:
    return v if not isinstance(v, dict) else ", ".join(f"{k}: {n}" for k, n in v.items()) or 0


def to_markdown(report: Report) -> str:
    cmd = " ".join(report.command or [])
    md = [f"# torch_xla trace{': `' + cmd + '`' if cmd else ''}", ""]
    md += ["```text", *report.summary, "```", ""]
    md += ["## Processes", ""]
    md += _table(["process", "file", "steps", "compiles", "op by op", "compile s", "torch_xla CompileTime", "how it ended",
                  "steady state"],
                 [[r.label, r.file, f"{r.steps} {plural(r.unit)}", r.compiles, r.op_by_op, f"{r.compile_ms / 1e3:.2f}",
                   r.torch_xla_compile_count if r.torch_xla_compile_count is not None else
                   ("(no end record)" if not r.ended else "-"), r.stopped, r.steady] for r in report.ranks])
    for r in report.ranks:
        for n in r.notes:
            md.append(f"- {r.label}: {n}")
        for n in r.problems:
            md.append(f"- {r.label}: problem: {n}")
        if r.compile_analysis and r.compile_analysis != "file":
            md.append(f"- {r.label}: torch_xla's compile analysis {r.compile_analysis}")
    md += ["", "## Compiles", "",
           "One row per XLA compile (lazy, Dynamo-driven, JAX's; op by op below). *What changed* compares the graph "
           "with the nearest earlier graph compiled at the same site (for a jitted function, the nearest earlier "
           "call of it that compiled), what the user can act on first.", ""]
    md += _table(["rank", "step", "graph hash", "trigger", "ms", "inputs", "what changed", "advice"],
                 [[c.rank, c.step, c.graph_hash[:16] or c.name or "?",
                   _trigger(c) + (f" [{c.compile_id}]" if c.compile_id else ""),
                   c.ms if c.ms is not None else "", c.inputs if c.inputs is not None else "",
                   "; ".join(change_text(x) for x in c.changed) or ("first at this site" if c.previous_step is None else ""),
                   c.advice] for c in report.compiles if not c.eager])
    md += ["## Sites that compile", ""]
    md += _table(["rank", "site", "trigger", "code", "compiles", "graphs", "steps run", "steps", "every step"],
                 [[s.rank, s.site or NO_SITE, s.kind + (f" ({s.op or s.function})" if s.op or s.kind == "jit" else ""),
                   f"`{s.code}`" if s.code else "", s.compiles, s.graphs, s.steps_run, f"{s.first_step}-{s.last_step}",
                   "compiles every step" if s.every_step else ("compiles on most" if s.most_steps else "")]
                  for s in report.sites])
    if report.functions:
        md += ["## Compiled functions", "", "Each function jitted through torchax: its calls, its compiles, and "
               "whether it stopped compiling.", ""]
        md += _table(["rank", "function", "jitted at", "calls", "compiles", "steady state"],
                     [[f.rank, f.name, f.jitted_at or NO_SITE, f.calls if f.calls is not None else "?", f.compiles,
                       f.steady] for f in report.functions])
    if report.op_by_op:
        md += ["## Op by op", "", "Computations compiled for ops that ran outside any compiled function, by the "
               "user's line and op: each is a small program of its own, compiled once per new shape; they count in "
               "the totals above.", ""]
        md += _table(["rank", "site", "op", "code", "compiles", "compile ms", "executions", "programs"],
                     [[g.rank, (g.site or NO_SITE) + (f" (from {g.entry})" if g.entry else ""), g.op,
                       f"`{g.code}`" if g.code else "", g.compiles, g.compile_ms,
                       g.executions if g.executions is not None else "?", ", ".join(g.names[:6])]
                      for g in report.op_by_op])
    if report.findings:
        md += ["## Findings", ""]
        for f in report.findings:
            md.append(f"- rank {f.rank}: {f.kind} in {f.function} (call {f.call}, called at {f.call_site or NO_SITE}) "
                      f"at {f.site or NO_SITE}: `{f.code}` ({f.op or f.aten_op}; {f.exception.type}: "
                      f"{f.exception.message}). {f.advice}")
        md.append("")
    if report.sync_points:
        md += ["## Where it syncs", "", "Step markers and host reads that made torch_xla run graphs "
               "(from torch_xla's execution analysis).", ""]
        md += _table(["rank", "kind", "site", "code", "executions", "in steps", "step markers"],
                     [[s.rank, s.kind + (f" ({s.op})" if s.op else ""), s.site or NO_SITE, f"`{s.code}`" if s.code else "",
                       s.executions, s.steps, s.markers] for s in report.sync_points])
    for dyn in report.dynamo:
        md += [f"## Dynamo (rank {dyn.rank})", ""]
        md += _table(["figure", "value", "equals"],
                     [[f["label"], _figure(dyn.figures.get(f["key"])), f["oracle"]] for f in report.dynamo_figures])
        md += _table(["compile id", "function", "frame", "ms", "recompile: failed guard", "breaks", "graphs (nodes, ended by)", "XLA graphs"],
                     [[c["compile_id"], c["name"], c["frame"], c["ms"] if c["ms"] is not None else "",
                       (c["recompile_reason"] or "").splitlines()[0][:120] if c["recompile_reason"] else "",
                       "; ".join(f"{b['gb_type']} ({b.get('gb_id') or '-'}) at {b['frame']}" for b in c["breaks"]),
                       "; ".join(f"{g['nodes']}" + (f", {g['ended_by']}" if g["ended_by"] else "") for g in c["graphs"]),
                       "; ".join(f"{len(b.get('partitions') or [])} partitions" + (f", fallback {b['fallback_nodes']}" if b.get("fallback_nodes") else "")
                                 for b in c["bridges"])]
                      for c in dyn.compile_ids])
        if dyn.breaks:
            md += ["Graph breaks:", ""]
            md += _table(["break", "GB id", "frame", "logged", "counted", "hint"],
                         [[b["gb_type"], b["gb_id"] or "", b["frame"], b["logged"], b["counted"],
                           (b["hints"] or [""])[0][:160]] for b in dyn.breaks])
    if report.startup_errors:
        md += ["## Processes whose recorder did not start", "",
               "Each wrote `startup-error-<pid>.txt` in the trace directory; the program ran on, untraced.", ""]
        md += _table(["pid", "file", "what it said"], [[e.pid, e.file, e.text[:400]] for e in report.startup_errors])
    for p in report.problems:
        md += [f"- {p}"]
    d = report.divergence
    if has_ranks_section(report):  # for one process there is nothing to compare
        md += ["## Ranks", ""]
        if d.first_step is not None:
            ref = d.details[0]["reference_rank"] if d.details else "?"
            md.append(f"The ranks' graphs first differ at **{step_at(report, d.first_step)}**: "
                      f"{ranks_phrase(d.ranks_that_differ)} (compared with rank {ref}"
                      + ("; no group of ranks is larger, so either side may be the odd one" if d.no_majority else "")
                      + ").")
            md.append("")
            for row in d.details:
                for c in row["differences"]:
                    md.append(f"- rank {row['rank']}: {change_text(c)}")
            md.append("")
        else:
            md += ["Every rank compiled and ran the same graphs at every step they all reached.", ""]
        if d.missing_ranks:
            md += [f"Missing ranks (world size {d.world_size}): {', '.join(map(str, d.missing_ranks))}", ""]
        for e in d.stopped_early:
            md.append(f"- rank {e['rank']} stopped early: last step {e['last_step']}, "
                      f"{'ended' if e['ended'] else 'no end record'}")
    md += ["", "Figures and the upstream record each equals: " + "; ".join(f"{k}: {v}" for k, v in report.oracles.items()), ""]
    return "\n".join(md)
