"""The report as one self-contained HTML page: no network, no external file, opens from disk.

Sections: the named figures (with what counts each one upstream), Dynamo's graph breaks as
structured records (gb_type, GB id, explanation, hints, user frame, count), recompiles with their
failed guard, the joined view per compile id (frame -> Dynamo graph -> AOT graphs -> bridge
partitions and fallback ops -> XLA graph hashes -> compile time -> executions), XLA graphs,
fallback ops, replicas, and the timeline as an inline SVG. Styles and the small script (a
filter for the breaks table) are inline. The pages are Jinja2 templates rendered with autoescape
(the environment of ``torch_xla_ext/_html.py``): nothing a report holds becomes markup.

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

import functools
import os
from typing import Any

from torch_xla_ext import _html
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


# The page's templates. Autoescape is on: every value from a report (frames, guards, exception
# text, op names) is escaped by Jinja2; only our constants (CSP, stylesheet, script) are marked
# safe. Each template line is stripped and the lines joined (`_compact`), so the page is one line
# of markup as before: a space that matters sits inside a line, never at its ends.
_MACROS = """
{% macro thead(header, cls="") %}
<table class="{{ cls }}"><thead><tr>{% for h in header %}<th>{{ h }}</th>{% endfor %}</tr></thead><tbody>
{% endmacro %}

{% macro breaks(r) %}
{% if not r.fx_breaks %}<p class="muted">No graph breaks.</p>{% else %}
<input type="search" id="break-filter" placeholder="filter breaks">
{{ thead(["gb_type", "GB id", "explanation and hints", "user frame", "compile ids", "count"], "breaks") }}
{% for b in r.fx_breaks %}<tr>
<td><span class="gb">{{ b["gb_type"] }}</span></td>
<td>{% if b.get("doc") %}<a href="{{ b['doc'] }}">{{ b.get("gb_id") or "-" }}</a>{% else %}{{ b.get("gb_id") or "-" }}{% endif %}</td>
<td>{{ b.get("explanation") or b.get("dynamo_reason") or "" }}
{% for h in b.get("hints", []) %}<div class="hint">Hint: {{ h }}</div>{% endfor %}
{% if b.get("inherited") %}<div class="hint">{{ b["inherited"] }} of these split the calling frame at {% for c in b.get("split_at") or [] %}<code>{{ c }}</code>{% if not loop.last %}, {% endif %}{% endfor %} (Dynamo says only &ldquo;step_unsupported&rdquo; there)</div>{% endif %}
</td>
<td><code>{{ b["frame"] }}</code><br><span class="muted">{{ b.get("function", "") }}</span></td>
<td>{{ b.get("compile_ids", [])[:8]|join(", ") }}</td>
<td class="n">{{ b["count"] }}</td>
</tr>{% endfor %}
</tbody></table>
{% endif %}
{% endmacro %}

{% macro joined(r) %}
{% if not r.joined %}<p class="muted">No Dynamo compile in this region.</p>{% else %}
{% set per_step = r.steps or 0 %}
<div class="tree">
{% for c in r.joined %}
<details open><summary><b>[{{ c["compile_id"] }}]</b> <code>{{ c["name"] }}</code> <span class="muted">{{ c["frame"] }}{% if c.get("ms") is not none %}, {{ "%.1f"|format(c["ms"]) }} ms{% endif %}</span>
{% if c.get("recompile_reason") %} &mdash; recompile: {{ c["recompile_reason"] }}{% endif %}
{% if c.get("error") %} <span class="bad">{{ c["error"] }}</span>{% endif %}
</summary>
{% for b in c.get("breaks", []) %}<div>graph break: <span class="gb">{{ b }}</span></div>{% endfor %}
{% for g in c.get("graphs", []) %}
<details open><summary>Dynamo graph {{ g["graph"] }}: {{ g["ops"] }} ops, {% if g.get("ended_by") %}ended by <span class="gb">{{ g["ended_by"] }}</span>{% else %}ends at return{% endif %}</summary>
{% for a in g.get("aot", []) %}
<details open><summary>AOT {{ a["kind"] }} <code>{{ a["name"] }}</code> ({{ a["nodes"] }} nodes)</summary>
{% for br in a.get("bridge", []) %}
<details open><summary>bridge: {{ br["partitions"]|length }} XLA partition(s), fallback nodes: {{ br.get("fallback_nodes", [])|join(", ") or "none" }}
{% if br.get("ms") is not none %}, extracted in {{ "%.1f"|format(br["ms"]) }} ms{% endif %}
{% if br.get("error") %} <span class="bad">{{ br["error"] }}</span>{% endif %}
</summary>
{{ thead(["XLA graph hash", "nodes", "compile ms", "executions", "per step"]) }}
{% for p in br["partitions"] %}
{% set h = r.per_graph_hash.get(p["graph_hash"], {}) %}{% set ex = h.get("executions", 0) %}
<tr><td><code>{{ p["graph_hash"][:16] }}</code></td><td class="n">{{ p["nodes"] }}</td>
<td class="n">{{ "%.1f"|format(h.get("compile_ms", 0.0)) }}</td><td class="n">{{ ex }}</td>
<td class="n">{% if per_step %}{{ "%g"|format(ex / per_step) }}{% else %}-{% endif %}</td></tr>
{% endfor %}
</tbody></table></details>
{% endfor %}
</details>
{% endfor %}
</details>
{% endfor %}
</details>
{% endfor %}
</div>
{% endif %}
{% endmacro %}

{% macro timeline(t) %}
{% if not t %}<p class="muted">No timeline events.</p>{% else %}
<svg xmlns="http://www.w3.org/2000/svg" width="{{ t.width }}" height="{{ t.height }}" role="img" aria-label="timeline">
{% for track in t.tracks %}
<text x="4" y="{{ track.y + 13 }}">{{ track.name }}</text>
<line x1="{{ t.label_w }}" x2="{{ t.width - 10 }}" y1="{{ track.y + t.row_h - 1 }}" y2="{{ track.y + t.row_h - 1 }}" stroke="#e3e8ed"/>
{% endfor %}
{% for e in t.rects %}
<rect x="{{ "%.1f"|format(e.x) }}" y="{{ e.y }}" width="{{ "%.1f"|format(e.w) }}" height="{{ t.row_h - 6 }}" fill="{{ e.color }}"><title>{{ e.tip }}</title></rect>
{% endfor %}
<text x="{{ t.label_w }}" y="{{ t.bottom }}">0 ms</text><text x="{{ t.width - 80 }}" y="{{ t.bottom }}">{{ "%.1f"|format(t.end / 1e3) }} ms</text></svg>
{% endif %}
{% endmacro %}

{% macro report(r, title, timeline_data) %}
{% set who = r.rank %}
<h2>{{ title }}</h2><div class="sub">
{% if who %}rank {{ who.get("rank") }} of {{ who.get("world_size") }} ({{ who.get("source", "") }}), host {{ who.get("host", "?") }}, pid {{ who.get("pid", "?") }}{% endif %}
{% if r.steps %}; {{ r.steps }} steps marked{% endif %}
</div>
<h3>Figures</h3>{{ thead(["figure", "value", "counted upstream by"]) }}
{% for k, v, o in r.figures() %}<tr><td>{{ k }}</td><td class="n">{{ v }}</td><td><span class="muted">{{ o }}</span></td></tr>{% endfor %}
</tbody></table>
{% if r.aot_graphs %}<div class="muted">AOT graphs by kind: {% for k, v in r.aot_graphs.items() %}{{ k }} {{ v }}{% if not loop.last %}, {% endif %}{% endfor %}</div>{% endif %}
<h3>What each break figure counts</h3>{{ thead(["figure", "value", "counts", "upstream record of the same events"]) }}
{% for f in r.break_figures() %}<tr><td>{{ f["label"] }}</td><td class="n">{{ f["value"] }}</td><td>{{ f["counts"] }}</td><td><span class="muted">{{ f["oracle"] }}</span></td></tr>{% endfor %}
</tbody></table>
<h3>Graph breaks (Dynamo's structured records)</h3>{{ breaks(r) }}
{% if r.recompile_reasons %}<h3>Recompiles (first failed guard)</h3>{{ thead(["failed guard", "frame", "compile ids", "count"]) }}
{% for b in r.recompile_reasons %}<tr><td>{{ b["reason"] }}</td><td><code>{{ b["frame"] }}</code></td><td>{{ b["compile_ids"]|join(", ") }}</td><td class="n">{{ b["count"] }}</td></tr>{% endfor %}
</tbody></table>{% endif %}
<h3>Per compile id: frame &rarr; graph &rarr; AOT graphs &rarr; bridge &rarr; XLA graphs</h3>{{ joined(r) }}
{% if r.per_graph_hash %}<h3>XLA graphs (bridge)</h3>
{{ thead(["graph hash", "of", "compiles", "compile ms", "executions", "dispatch ms", "by replica"]) }}
{% for h, v in r.per_graph_hash.items() %}<tr><td><code>{{ h[:16] }}</code></td><td>{{ v.get("partition_of") or "-" }}</td>
<td class="n">{{ v["compiles"] }}</td><td class="n">{{ "%.1f"|format(v["compile_ms"]) }}</td><td class="n">{{ v["executions"] }}</td>
<td class="n">{{ "%.2f"|format(v["dispatch_ms"]) }}</td>
<td>{% for k, n in v.get("by_replica", {}).items() %}r{{ k }}: {{ n }}{% if not loop.last %}, {% endif %}{% else %}-{% endfor %}</td></tr>{% endfor %}
</tbody></table>{% endif %}
{% if r.fallback_nodes or r.fallback_ops or r.eager_nodes %}<h3>CPU fallback</h3>{{ thead(["what", "count"]) }}
{% for k, v in r.fallback_nodes.items() %}<tr><td>eager node (graph time) <code>{{ k }}</code></td><td class="n">{{ v }}</td></tr>{% endfor %}
{% for k, v in r.eager_nodes.items() %}<tr><td>other node left to eager <code>{{ k }}</code></td><td class="n">{{ v }}</td></tr>{% endfor %}
{% for k, v in r.fallback_ops.items() %}<tr><td>fallback op execution (run time) <code>{{ k }}</code></td><td class="n">{{ v }}</td></tr>{% endfor %}
</tbody></table>{% endif %}
{% if r.replicas|length > 1 %}<h3>Replicas in this process</h3>{{ thead(["replica", "syncs", "bridge executions"]) }}
{% for k, v in r.replicas.items() %}<tr><td>{{ k }}</td><td class="n">{{ v.get("syncs", 0) }}</td><td class="n">{{ v.get("executions", 0) }}</td></tr>{% endfor %}
</tbody></table>{% endif %}
{% for n in r.notes %}<div class="note">{{ n }}</div>{% endfor %}
<h3>Timeline</h3>{{ timeline(timeline_data(r)) }}
{% endmacro %}

{% macro failure(f, tries) %}
<h2>Finding: {{ f["mode"] }} mode failed ({{ f.get("where") or f.get("kind", "") }})</h2>{{ thead(["", ""]) }}
<tr><td>exception</td><td><code>{{ f["exception"] }}</code></td></tr><tr><td>raised by</td><td>{{ f["raised_by"] }}</td></tr>
{% if f.get("node") %}{% set n = f["node"] %}<tr><td>FX node</td><td><code>{{ n["name"] }}</code> ({{ n["op"] }} <code>{{ n["target"] }}</code>)</td></tr>{% endif %}
{% if f.get("aten_op") %}<tr><td>aten op</td><td><code>{{ f["aten_op"] }}</code>
{% if f.get("raised_in_op") not in [none, f["aten_op"]] %} (raised in <code>{{ f["raised_in_op"] }}</code>){% endif %}</td></tr>{% endif %}
{% if f.get("source") %}{% set s = f["source"] %}<tr><td>model source</td><td><code>{{ s["file"] }}:{{ s["line"] }}</code> in {{ s["function"] }}: <code>{{ s.get("code") or "" }}</code></td></tr>{% endif %}
{% if f.get("known") %}<tr><td>known failure</td><td>{{ f["known"]["cause"] }}</td></tr>{% endif %}
{% if f.get("stderr_tail") %}<tr><td>last lines of stderr</td><td><pre>{{ f["stderr_tail"][-10:]|join("\\n") }}</pre></td></tr>{% endif %}
</tbody></table>
{% if tries %}<h3>What to try</h3><ol>{% for t in tries %}<li>{{ t }}</li>{% endfor %}</ol>{% endif %}
{% endmacro %}
"""

_PAGE = """
{% import "macros" as m %}
<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{{ csp|safe }}">
<title>{{ title }}</title><style>{{ css|safe }}</style></head><body>
<h1>{{ title }}</h1>{% block body %}{% endblock %}<script>{{ js|safe }}</script></body></html>
"""

_REPORT = """
{% extends "page" %}{% import "macros" as m %}
{% block body %}{{ m.report(report, heading, timeline_data) }}{% endblock %}
"""

_COMPARISON = """
{% extends "page" %}{% import "macros" as m %}
{% block body %}
<div class="sub">{{ cmp.model }}: {{ what }}, {{ cmp.warmup }} warmup + {{ cmp.steps }} timed steps</div>
<h2>Side by side</h2>{{ m.thead([""] + names) }}
{% for label, fn in cmp.rows() %}<tr><td>{{ label }}</td>{% for n in names %}<td class="n">{{ cmp.cell(fn, n) }}</td>{% endfor %}</tr>{% endfor %}
</tbody></table>
{% for f in cmp.failures.values() %}{{ m.failure(f, cmp.try_instead(f)) }}{% endfor %}
{% for n in names %}{{ m.report(cmp.modes[n].report, n ~ (": whole run" if cmp.modes[n].ok else ": what ran before the failure"), timeline_data) }}{% endfor %}
{% endblock %}
"""

_MERGED = """
{% extends "page" %}{% import "macros" as m %}
{% block body %}
<div class="sub">{{ ranks|length }} ranks: {% for r in ranks %}{{ r }} ({{ merged.files[r] }}){% if not loop.last %}, {% endif %}{% endfor %}</div>
<h2>Divergence</h2>
{% if merged.divergences %}<p class="bad">Ranks that differ: {{ merged.differing_ranks|join(", ") }}</p>{{ m.thead(["what", "ranks", "detail"]) }}
{% for d in merged.divergences %}<tr><td>{{ d["what"] }}</td><td>{{ d["ranks"]|join(", ") }}</td><td>{{ d["detail"] }}</td></tr>{% endfor %}
</tbody></table>
{% else %}<p class="ok">All ranks agree: same figures, graph hashes, breaks and recompiles.</p>{% endif %}
<h2>Per rank</h2>{{ m.thead(["figure"] + rank_headers) }}
{% for name, vals in merged.table() %}<tr><td>{{ name }}</td>{% for r in ranks %}<td class="n">{{ vals[r] }}</td>{% endfor %}</tr>{% endfor %}
</tbody></table>
{% for r in ranks %}{{ m.report(merged.reports[r], "rank " ~ r ~ mode, timeline_data) }}{% endfor %}
{% endblock %}
"""


def _compact(template: str) -> str:
    return "".join(line.strip() for line in template.splitlines())


@functools.lru_cache(maxsize=None)
def _env() -> Any:
    return _html.environment({"macros": _compact(_MACROS), "page": _compact(_PAGE), "report": _compact(_REPORT),
                              "comparison": _compact(_COMPARISON), "merged": _compact(_MERGED)})


def _timeline(r: GraphBreakReport, width: int = 1100) -> dict[str, Any] | None:
    """The timeline's SVG geometry (one row per track; the template draws it)."""
    events = r.timeline
    if not events:
        return None
    tracks: list[str] = []
    for ev in events:
        if ev["track"] not in tracks:
            tracks.append(ev["track"])
    end = max(ev["ts"] + ev["dur"] for ev in events) or 1.0
    label_w, row_h = 150, 18
    plot_w = width - label_w - 10
    rects = []
    for ev in events[:6000]:
        rects.append({
            "x": label_w + plot_w * ev["ts"] / end, "y": tracks.index(ev["track"]) * row_h + 3,
            "w": max(plot_w * ev["dur"] / end, 1.0), "color": _TRACK_COLORS.get(ev["cat"], "#777"),
            "tip": f"{ev['name']} at {ev['ts'] / 1e3:.3f} ms" + (f", {ev['dur'] / 1e3:.3f} ms" if ev["dur"] else "")})
    return {"width": width, "height": row_h * len(tracks) + 24, "label_w": label_w, "row_h": row_h, "end": end,
            "bottom": row_h * len(tracks) + 16, "rects": rects,
            "tracks": [{"name": t, "y": i * row_h} for i, t in enumerate(tracks)]}


def _render(template: str, title: str, **values: Any) -> str:
    return _env().get_template(template).render(csp=CSP, css=_CSS, js=_JS, title=title,
                                                 timeline_data=_timeline, **values)


def render_report(r: GraphBreakReport, title: str = "Region") -> str:
    """The body of one report (no page chrome)."""
    return str(_env().get_template("macros").module.report(r, title, _timeline))


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
    return _write(path, _render("report", title, report=report, heading="Region"))


def write_comparison(path: str, cmp: Any) -> str:
    """Writes a compare() result: the side-by-side table, a finding per failed mode (what, where,
    whose, what to try), then each mode's whole-run report."""
    names = list(cmp.modes)
    return _write(path, _render("comparison", f"torch_xla graph breaks: {' vs '.join(names)}", cmp=cmp, names=names,
                                what="training step" if cmp.train else "forward pass"))


def write_merged(path: str, merged: Any) -> str:
    """Writes a merge() result: the ranks that differ and why, the per-rank table, each report."""
    ranks = merged.ranks
    mode = f", {merged.shown} mode" if getattr(merged, "kind", "report") == "compare" else ""
    return _write(path, _render("merged", f"torch_xla graph breaks across {len(ranks)} ranks", merged=merged,
                                ranks=ranks, rank_headers=[f"rank {r}" for r in ranks], mode=mode))
