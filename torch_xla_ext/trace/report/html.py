"""``report.html``: the report as one self-contained page (the graph-break page's CSP and
stylesheet, ``torch_xla_ext/_html.py``; Jinja2 with autoescape, so a site, a guard or an
exception text never becomes markup)."""

from __future__ import annotations

from typing import Any

from torch_xla_ext import _html
from torch_xla_ext.trace.report.model import Report
from torch_xla_ext.trace.report.render import NO_SITE, change_text, has_ranks_section, ranks_phrase

__all__ = ["render"]

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{{ csp }}">
<title>torch_xla trace</title><style>{{ css|safe }}</style></head><body>
{% macro where(site, code) %}{% if site %}{{ site }}{% else %}<span class="muted">{{ no_site }}</span>{% endif %}{% if code %}<br><code>{{ code }}</code>{% endif %}{% endmacro %}
<h1>torch_xla trace</h1>
<div class="sub">{% if r.command %}<code>{{ r.command|join(' ') }}</code>{% endif %}
{% if r.exit %} &middot; exit {{ r.exit.code if r.exit.code is not none else r.exit.signal }}{% endif %}</div>
<pre>{{ r.summary|join('\n') }}</pre>
<h2>Processes</h2>
<table><tr><th>process</th><th>steps</th><th>compiles</th><th>torch_xla CompileTime</th><th>how it ended</th><th>steady state</th></tr>
{% for p in r.ranks %}<tr><td>{{ p.label }}</td><td class="n">{{ p.steps }}</td><td class="n">{{ p.compiles }}</td>
<td class="n">{{ p.torch_xla_compile_count if p.torch_xla_compile_count is not none else '-' }}</td>
<td{% if not p.ended or p.exception or p.damage %} class="bad"{% endif %}>{{ p.stopped }}</td><td>{{ p.steady }}</td></tr>
{% endfor %}</table>
{% for p in r.ranks %}{% if p.notes or p.problems %}<ul>{% for n in p.notes %}<li>{{ p.label }}: {{ n }}</li>{% endfor %}
{% for n in p.problems %}<li class="bad">{{ p.label }}: problem {{ n }}</li>{% endfor %}</ul>{% endif %}{% endfor %}
<h2>Compiles</h2>
<input type="search" id="filter" placeholder="filter compiles (site, hash, trigger)">
<table id="compiles"><tr><th>rank</th><th>step</th><th>graph hash</th><th>trigger</th><th>site</th><th>ms</th><th>what changed</th><th>advice</th></tr>
{% for c in r.compiles %}<tr><td class="n">{{ c.rank }}</td><td class="n">{{ c.step }}</td><td><code>{{ c.graph_hash[:16] }}</code></td>
<td>{{ c.trigger.kind }}{% if c.trigger.op %} ({{ c.trigger.op }}){% endif %}{% if c.compile_id %} [{{ c.compile_id }}]{% endif %}</td>
<td>{{ where(c.trigger.site, c.trigger.code) }}</td>
<td class="n">{{ c.ms if c.ms is not none else '' }}</td>
<td>{% for x in c.changed %}{{ change(x) }}<br>{% else %}{% if c.previous_step is none %}<span class="muted">first at this site</span>{% endif %}{% endfor %}</td>
<td>{{ c.advice }}</td></tr>
{% endfor %}</table>
<h2>Sites that compile</h2>
<table><tr><th>rank</th><th>site</th><th>trigger</th><th>compiles</th><th>graphs</th><th>steps run</th><th>every step</th></tr>
{% for s in r.sites %}<tr><td class="n">{{ s.rank }}</td><td>{{ where(s.site, s.code) }}</td><td>{{ s.kind }}{% if s.op %} ({{ s.op }}){% endif %}</td>
<td class="n">{{ s.compiles }}</td><td class="n">{{ s.graphs }}</td><td class="n">{{ s.steps_run }}</td>
<td>{% if s.every_step %}<span class="bad">compiles every step</span>{% endif %}</td></tr>
{% endfor %}</table>
<h2>Where it syncs</h2>
<table><tr><th>rank</th><th>kind</th><th>site</th><th>executions</th><th>in steps</th><th>step markers</th></tr>
{% for s in r.sync_points %}<tr><td class="n">{{ s.rank }}</td><td>{{ s.kind }}{% if s.op %} ({{ s.op }}){% endif %}</td>
<td>{{ where(s.site, s.code) }}</td><td class="n">{{ s.executions }}</td><td class="n">{{ s.steps }}</td>
<td class="n">{{ s.markers }}</td></tr>
{% endfor %}</table>
{% for d in r.dynamo %}<h2>Dynamo, rank {{ d.rank }}</h2>
<table><tr><th>figure</th><th>value</th><th>equals</th></tr>
{% for f in r.dynamo_figures %}<tr><td>{{ f.label }}</td><td class="n">{{ figure(d.figures[f.key]) }}</td><td>{{ f.oracle }}</td></tr>{% endfor %}
</table>
<table><tr><th>compile id</th><th>function</th><th>recompile: failed guard</th><th>breaks</th><th>graphs</th><th>XLA graphs</th></tr>
{% for c in d.compile_ids %}<tr><td>{{ c.compile_id }}</td><td>{{ c.name }}<br><span class="muted">{{ c.frame }}</span></td>
<td>{{ c.recompile_reason or '' }}</td>
<td>{% for b in c.breaks %}<span class="gb">{{ b.gb_type }}</span> {{ b.gb_id or '' }} at {{ b.frame }}<br>{% endfor %}</td>
<td>{% for g in c.graphs %}{{ g.nodes }} nodes{% if g.ended_by %}, ended by {{ g.ended_by }}{% endif %}<br>{% endfor %}</td>
<td>{% for b in c.bridges %}{{ (b.partitions or [])|length }} partitions{% if b.fallback_nodes %}, fallback {{ b.fallback_nodes|join(', ') }}{% endif %}<br>{% endfor %}</td></tr>
{% endfor %}</table>{% endfor %}
{% if r.startup_errors %}<h2>Processes whose recorder did not start</h2>
<table><tr><th>pid</th><th>file</th><th>what it said</th></tr>
{% for e in r.startup_errors %}<tr><td class="n">{{ e.pid }}</td><td>{{ e.file }}</td><td class="bad"><code>{{ e.text }}</code></td></tr>{% endfor %}
</table>{% endif %}
{% if r.problems %}<ul>{% for p in r.problems %}<li class="bad">{{ p }}</li>{% endfor %}</ul>{% endif %}
{% set d = r.divergence %}
{% if ranks_section %}<h2>Ranks</h2>
{% if d.first_step is not none %}<p class="bad">The ranks' graphs first differ at step {{ d.first_step }}: {{ ranks_phrase(d.ranks_that_differ) }}.</p>
<ul>{% for row in d.details %}{% for x in row.differences %}<li>rank {{ row.rank }}: {{ change(x) }}</li>{% endfor %}{% endfor %}</ul>
{% elif d.ranks|length > 1 %}<p class="ok">Every rank compiled and ran the same graphs at every step they all reached.</p>{% endif %}
{% if d.missing_ranks %}<p class="bad">Missing ranks: {{ d.missing_ranks|join(', ') }}</p>{% endif %}
{% for e in d.stopped_early %}<p class="bad">rank {{ e.rank }} stopped early, at step {{ e.last_step }}</p>{% endfor %}
{% endif %}
<script>
document.getElementById('filter').addEventListener('input', function (ev) {
  var q = ev.target.value.toLowerCase();
  document.querySelectorAll('#compiles tr').forEach(function (tr, i) {
    if (i) tr.style.display = tr.textContent.toLowerCase().indexOf(q) < 0 ? 'none' : '';
  });
});
</script>
</body></html>
"""


def _figure(v: Any) -> str:
    if isinstance(v, dict):
        return ", ".join(f"{k}: {n}" for k, n in v.items()) or "0"
    return str(v)


def render(report: Report) -> str:
    env = _html.environment({"page": _PAGE})
    return env.get_template("page").render(r=report, csp=_html.CSP, css=_html.CSS, change=change_text, figure=_figure,
                                           ranks_section=has_ranks_section(report), ranks_phrase=ranks_phrase,
                                           no_site=NO_SITE)
