"""The report as one self-contained HTML page: no network, no external file, opens from disk.

Sections: the named figures (with what counts each one upstream), Dynamo's graph breaks as
structured records (gb_type, GB id, explanation, hints, user frame, count), recompiles with their
failed guard, the joined view per compile id (frame -> Dynamo graph -> AOT graphs -> bridge
partitions and fallback ops -> XLA graph hashes -> compile time -> executions), XLA graphs,
fallback ops, replicas, and the timeline as an inline SVG. Styles and the small script (a
filter for the breaks table) are inline.

Example:
    >>> import torch, torch_xla
    >>> from torch_xla_ext import graph_breaks
    >>> def f(x):
    ...     x = torch.sin(x)
    ...     torch._dynamo.graph_break()               # one break: two graphs
    ...     return torch.cos(x)
    >>> with graph_breaks.account() as ledger:
    ...     y = torch.compile(f, backend="openxla")(torch.ones(3, device="xla")); torch_xla.sync()
    >>> graph_breaks.write_html("breaks.html", ledger.report())
    'breaks.html'
"""

from __future__ import annotations

import html
import os
from typing import Any, Iterable

from torch_xla_ext._html import CSP, CSS
from torch_xla_ext.graph_breaks.report import GraphBreakError, GraphBreakReport

__all__ = ["write_html", "write_comparison", "write_merged", "render_report"]

_CSS = CSS  # shared with the parity page (torch_xla_ext/_html.py)

_JS = """
(function(){
  var box=document.getElementById('break-filter');
  if(box){box.addEventListener('input',function(){
    var q=box.value.toLowerCase();
    document.querySelectorAll('table.breaks tbody tr').forEach(function(tr){
      tr.style.display=tr.textContent.toLowerCase().indexOf(q)>=0?'':'none';});
  });}
  document.body.setAttribute('data-rendered','yes');
})();
"""

_TRACK_COLORS = {"dynamo": "#4C72B0", "bridge": "#DD8452", "xla": "#55A868", "lazy": "#8172B3",
                 "transfer": "#C44E52", "user": "#333333"}


def _e(v: Any) -> str:
    return html.escape(str(v), quote=True)


def _table(header: Iterable[str], rows: Iterable[Iterable[Any]], cls: str = "", numeric: set[int] = frozenset()) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = []
    for row in rows:
        cells = []
        for i, c in enumerate(row):
            cells.append(f"<td class=\"n\">{_e(c)}</td>" if i in numeric else f"<td>{c}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table class=\"{cls}\"><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _breaks(r: GraphBreakReport) -> str:
    if not r.fx_breaks:
        return "<p class=\"muted\">No graph breaks.</p>"
    rows = []
    for b in r.fx_breaks:
        hints = "".join(f"<div class=\"hint\">Hint: {_e(h)}</div>" for h in b.get("hints", []))
        gb_id = _e(b.get("gb_id") or "-")
        if b.get("doc"):
            gb_id = f"<a href=\"{_e(b['doc'])}\">{gb_id}</a>"
        expl = _e(b.get("explanation") or b.get("dynamo_reason") or "")
        inherited = ""
        if b.get("inherited"):
            calls = ", ".join(f"<code>{_e(c)}</code>" for c in b.get("split_at") or [])
            inherited = (f"<div class=\"hint\">{b['inherited']} of these split the calling frame at {calls} "
                         f"(Dynamo says only &ldquo;step_unsupported&rdquo; there)</div>")
        rows.append([f"<span class=\"gb\">{_e(b['gb_type'])}</span>", gb_id, f"{expl}{hints}{inherited}",
                     f"<code>{_e(b['frame'])}</code><br><span class=\"muted\">{_e(b.get('function', ''))}</span>",
                     _e(", ".join(b.get("compile_ids", [])[:8])), b["count"]])
    return ("<input type=\"search\" id=\"break-filter\" placeholder=\"filter breaks\">"
            + _table(["gb_type", "GB id", "explanation and hints", "user frame", "compile ids", "count"], rows,
                     "breaks", {5}))


def _joined(r: GraphBreakReport) -> str:
    if not r.joined:
        return "<p class=\"muted\">No Dynamo compile in this region.</p>"
    per_step = r.steps or 0
    out = ["<div class=\"tree\">"]
    for c in r.joined:
        ms = f", {c['ms']:.1f} ms" if c.get("ms") is not None else ""
        extra = f" &mdash; recompile: {_e(c['recompile_reason'])}" if c.get("recompile_reason") else ""
        err = f" <span class=\"bad\">{_e(c['error'])}</span>" if c.get("error") else ""
        out.append(f"<details open><summary><b>[{_e(c['compile_id'])}]</b> <code>{_e(c['name'])}</code> "
                   f"<span class=\"muted\">{_e(c['frame'])}{ms}</span>{extra}{err}</summary>")
        for b in c.get("breaks", []):
            out.append(f"<div>graph break: <span class=\"gb\">{_e(b)}</span></div>")
        for g in c.get("graphs", []):
            end = f"ended by <span class=\"gb\">{_e(g['ended_by'])}</span>" if g.get("ended_by") else "ends at return"
            out.append(f"<details open><summary>Dynamo graph {_e(g['graph'])}: {g['ops']} ops, {end}</summary>")
            for a in g.get("aot", []):
                out.append(f"<details open><summary>AOT {_e(a['kind'])} <code>{_e(a['name'])}</code> "
                           f"({a['nodes']} nodes)</summary>")
                for br in a.get("bridge", []):
                    fb = ", ".join(br.get("fallback_nodes", [])) or "none"
                    ms_b = f", extracted in {br['ms']:.1f} ms" if br.get("ms") is not None else ""
                    berr = f" <span class=\"bad\">{_e(br['error'])}</span>" if br.get("error") else ""
                    rows = []
                    for p in br["partitions"]:
                        h = r.per_graph_hash.get(p["hash"], {})
                        ex = h.get("executions", 0)
                        rows.append([f"<code>{_e(p['hash'][:16])}</code>", p["nodes"], f"{h.get('compile_ms', 0.0):.1f}",
                                     ex, f"{ex / per_step:g}" if per_step else "-"])
                    out.append(f"<details open><summary>bridge: {len(br['partitions'])} XLA partition(s), "
                               f"fallback nodes: {_e(fb)}{ms_b}{berr}</summary>"
                               + _table(["XLA graph hash", "nodes", "compile ms", "executions", "per step"], rows,
                                        numeric={1, 2, 3, 4}) + "</details>")
                out.append("</details>")
            out.append("</details>")
        out.append("</details>")
    out.append("</div>")
    return "".join(out)


def _timeline(r: GraphBreakReport, width: int = 1100) -> str:
    events = r.timeline
    if not events:
        return "<p class=\"muted\">No timeline events.</p>"
    tracks: list[str] = []
    for ev in events:
        if ev["track"] not in tracks:
            tracks.append(ev["track"])
    end = max(ev["ts"] + ev["dur"] for ev in events) or 1.0
    label_w, row_h = 150, 18
    plot_w = width - label_w - 10
    parts = [f"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{row_h * len(tracks) + 24}\" "
             f"role=\"img\" aria-label=\"timeline\">"]
    for i, t in enumerate(tracks):
        y = i * row_h
        parts.append(f"<text x=\"4\" y=\"{y + 13}\">{_e(t)}</text>"
                     f"<line x1=\"{label_w}\" x2=\"{width - 10}\" y1=\"{y + row_h - 1}\" y2=\"{y + row_h - 1}\" "
                     f"stroke=\"#e3e8ed\"/>")
    for ev in events[:6000]:
        y = tracks.index(ev["track"]) * row_h + 3
        x = label_w + plot_w * ev["ts"] / end
        w = max(plot_w * ev["dur"] / end, 1.0)
        color = _TRACK_COLORS.get(ev["cat"], "#777")
        tip = f"{ev['name']} at {ev['ts'] / 1e3:.3f} ms" + (f", {ev['dur'] / 1e3:.3f} ms" if ev["dur"] else "")
        parts.append(f"<rect x=\"{x:.1f}\" y=\"{y}\" width=\"{w:.1f}\" height=\"{row_h - 6}\" fill=\"{color}\">"
                     f"<title>{_e(tip)}</title></rect>")
    parts.append(f"<text x=\"{label_w}\" y=\"{row_h * len(tracks) + 16}\">0 ms</text>"
                 f"<text x=\"{width - 80}\" y=\"{row_h * len(tracks) + 16}\">{end / 1e3:.1f} ms</text></svg>")
    return "".join(parts)


def render_report(r: GraphBreakReport, title: str = "Region") -> str:
    """The body of one report (no page chrome)."""
    who = r.rank
    sub = (f"rank {_e(who.get('rank'))} of {_e(who.get('world_size'))} ({_e(who.get('source', ''))}), "
           f"host {_e(who.get('host', '?'))}, pid {_e(who.get('pid', '?'))}") if who else ""
    if r.steps:
        sub += f"; {r.steps} steps marked"
    out = [f"<h2>{_e(title)}</h2><div class=\"sub\">{sub}</div>"]
    out.append("<h3>Figures</h3>" + _table(["figure", "value", "counted upstream by"],
                                           [[_e(k), _e(v), f"<span class=\"muted\">{_e(o)}</span>"]
                                            for k, v, o in r.figures()], numeric={1}))
    if r.aot_graphs:
        out.append("<div class=\"muted\">AOT graphs by kind: " + _e(", ".join(f"{k} {v}" for k, v in r.aot_graphs.items()))
                   + "</div>")
    out.append("<h3>What each break figure counts</h3>" + _table(
        ["figure", "value", "counts", "upstream record of the same events"],
        [[_e(f["label"]), f["value"], _e(f["counts"]), f"<span class=\"muted\">{_e(f['oracle'])}</span>"]
         for f in r.break_figures()], numeric={1}))
    out.append("<h3>Graph breaks (Dynamo's structured records)</h3>" + _breaks(r))
    if r.recompile_reasons:
        out.append("<h3>Recompiles (first failed guard)</h3>" + _table(
            ["failed guard", "frame", "compile ids", "count"],
            [[_e(b["reason"]), f"<code>{_e(b['frame'])}</code>", _e(", ".join(b["compile_ids"])), b["count"]]
             for b in r.recompile_reasons], numeric={3}))
    out.append("<h3>Per compile id: frame &rarr; graph &rarr; AOT graphs &rarr; bridge &rarr; XLA graphs</h3>"
               + _joined(r))
    if r.per_graph_hash:
        out.append("<h3>XLA graphs (bridge)</h3>" + _table(
            ["graph hash", "of", "compiles", "compile ms", "executions", "dispatch ms", "by replica"],
            [[f"<code>{_e(h[:16])}</code>", _e(v.get("partition_of") or "-"), v["compiles"], f"{v['compile_ms']:.1f}",
              v["executions"], f"{v['dispatch_ms']:.2f}",
              _e(", ".join(f"r{k}: {n}" for k, n in v.get("by_replica", {}).items()) or "-")]
             for h, v in r.per_graph_hash.items()], numeric={2, 3, 4, 5}))
    if r.fallback_nodes or r.fallback_ops or r.eager_nodes:
        out.append("<h3>CPU fallback</h3>" + _table(
            ["what", "count"],
            [[f"eager node (graph time) <code>{_e(k)}</code>", v] for k, v in r.fallback_nodes.items()]
            + [[f"other node left to eager <code>{_e(k)}</code>", v] for k, v in r.eager_nodes.items()]
            + [[f"fallback op execution (run time) <code>{_e(k)}</code>", v] for k, v in r.fallback_ops.items()],
            numeric={1}))
    if len(r.replicas) > 1:
        out.append("<h3>Replicas in this process</h3>" + _table(
            ["replica", "syncs", "bridge executions"],
            [[_e(k), v.get("syncs", 0), v.get("executions", 0)] for k, v in r.replicas.items()], numeric={1, 2}))
    out += [f"<div class=\"note\">{_e(n)}</div>" for n in r.notes]
    out.append("<h3>Timeline</h3>" + _timeline(r))
    return "".join(out)


def _page(title: str, body: str) -> str:
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">"
            f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>"
            f"<h1>{_e(title)}</h1>{body}<script>{_JS}</script></body></html>")


def _write(path: str, text: str) -> str:
    if not isinstance(path, str) or not path:
        raise GraphBreakError(f"html path must be a non-empty str, got {path!r}")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def write_html(path: str, report: GraphBreakReport, title: str = "torch_xla graph breaks") -> str:
    """Writes one region's report as a self-contained HTML page; returns ``path``.

    Example:
        >>> import torch, torch_xla
        >>> from torch_xla_ext import graph_breaks
        >>> def f(x):
        ...     x = torch.sin(x)
        ...     torch._dynamo.graph_break()               # one break: two graphs
        ...     return torch.cos(x)
        >>> with graph_breaks.account() as ledger:
        ...     y = torch.compile(f, backend="openxla")(torch.ones(3, device="xla")); torch_xla.sync()
        >>> write_html("breaks.html", ledger.report())
        'breaks.html'
    """
    if not isinstance(report, GraphBreakReport):
        raise GraphBreakError(f"write_html: report must be a GraphBreakReport, got {type(report).__name__}")
    return _write(path, _page(title, render_report(report)))


def write_comparison(path: str, cmp: Any) -> str:
    """Writes a compare() result: the side-by-side table, then each mode's whole-run report."""
    names = list(cmp.modes)
    rows = [[_e(label)] + [_e(cmp.cell(fn, n)) for n in names] for label, fn in cmp.rows()]
    what = "training step" if cmp.train else "forward pass"
    body = [f"<div class=\"sub\">{_e(cmp.model)}: {what}, {cmp.warmup} warmup + {cmp.steps} timed steps</div>",
            "<h2>Side by side</h2>", _table([""] + names, rows, numeric=set(range(1, len(names) + 1)))]
    for f in cmp.failures.values():  # a mode that failed is a finding: what, where, whose, what to try
        body.append(_failure(f, cmp))
    body += [render_report(cmp.modes[n].report, f"{n}: whole run" if cmp.modes[n].ok else
                           f"{n}: what ran before the failure") for n in names]
    return _write(path, _page(f"torch_xla graph breaks: {' vs '.join(names)}", "".join(body)))


def _failure(f: dict[str, Any], cmp: Any) -> str:
    rows = [["exception", f"<code>{_e(f['exception'])}</code>"], ["raised by", _e(f["raised_by"])]]
    if f.get("node"):
        n = f["node"]
        rows.append(["FX node", f"<code>{_e(n['name'])}</code> ({_e(n['op'])} <code>{_e(n['target'])}</code>)"])
    if f.get("aten_op"):
        rows.append(["aten op", f"<code>{_e(f['aten_op'])}</code>" + (
            f" (raised in <code>{_e(f['raised_in_op'])}</code>)" if f.get("raised_in_op") not in (None, f["aten_op"])
            else "")])
    if f.get("source"):
        s = f["source"]
        rows.append(["model source", f"<code>{_e(s['file'])}:{s['line']}</code> in {_e(s['function'])}: "
                                     f"<code>{_e(s.get('code') or '')}</code>"])
    if f.get("known"):
        rows.append(["known failure", _e(f["known"]["cause"])])
    if f.get("stderr_tail"):
        rows.append(["last lines of stderr", "<pre>" + _e("\n".join(f["stderr_tail"][-10:])) + "</pre>"])
    tries = "".join(f"<li>{_e(t)}</li>" for t in cmp.try_instead(f))
    return (f"<h2>Finding: {_e(f['mode'])} mode failed ({_e(f.get('where') or f.get('kind', ''))})</h2>"
            + _table(["", ""], rows) + (f"<h3>What to try</h3><ol>{tries}</ol>" if tries else ""))


def write_merged(path: str, merged: Any) -> str:
    """Writes a merge() result: the ranks that differ and why, the per-rank table, each report."""
    ranks = merged.ranks
    if merged.divergences:
        verdict = (f"<p class=\"bad\">Ranks that differ: {_e(', '.join(map(str, merged.differing_ranks)))}</p>"
                   + _table(["what", "ranks", "detail"],
                            [[_e(d["what"]), _e(", ".join(map(str, d["ranks"]))), _e(d["detail"])]
                             for d in merged.divergences]))
    else:
        verdict = "<p class=\"ok\">All ranks agree: same figures, graph hashes, breaks and recompiles.</p>"
    table = _table(["figure"] + [f"rank {r}" for r in ranks],
                   [[_e(name)] + [vals[r] for r in ranks] for name, vals in merged.table()],
                   numeric=set(range(1, len(ranks) + 1)))
    body = [f"<div class=\"sub\">{len(ranks)} ranks: " + _e(", ".join(f"{r} ({merged.files[r]})" for r in ranks))
            + "</div>", "<h2>Divergence</h2>", verdict, "<h2>Per rank</h2>", table]
    mode = f", {merged.shown} mode" if getattr(merged, "kind", "report") == "compare" else ""
    body += [render_report(merged.reports[r], f"rank {r}{mode}") for r in ranks]
    return _write(path, _page(f"torch_xla graph breaks across {len(ranks)} ranks", "".join(body)))
