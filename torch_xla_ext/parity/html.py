"""A parity report as one self-contained HTML page (no network, opens from disk).

The page is the report's document (the one ``report.document`` holds): the verdict and its
lead sentence at the top, then the sections (outputs, rounding, per layer/module, figures) as
tables, with the rows a localisation marks (first divergent, diverges) highlighted. Same CSP
and stylesheet as the graph-breaks page (``torch_xla_ext/_html.py``); rendered with Jinja2 with
autoescape on, so a module or output name never becomes markup.

Example:
    >>> import torch
    >>> from torch_xla_ext import parity
    >>> write_html("parity.html", parity.verify(torch.nn.Linear(4, 4), (torch.randn(2, 4),), dtype="fp32"))
    'parity.html'
"""

from __future__ import annotations

import os

from torch_xla_ext import _html
from torch_xla_ext._html import CSP, CSS
from torch_xla_ext.parity.errors import ParityError, ParityTypeError
from torch_xla_ext.parity.report import ParityReport, Verdict

__all__ = ["render_html", "write_html"]

_TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{{ csp|safe }}">
<title>{{ title }}</title><style>{{ css|safe }}
.verdict{display:inline-block;padding:2px 10px;border-radius:4px;color:#fff;font-weight:600;margin-right:8px}
.verdict.PASS{background:#1a7f37}.verdict.FAIL{background:#b42318}
.verdict.EXCEPTION,.verdict.NONDETERMINISTIC_REFERENCE{background:#9a6700}
.lead{font-size:16px;background:#fff;border:1px solid #d7dde3;border-left:6px solid #5b6772;padding:10px 14px;
margin:10px 0 18px;max-width:1100px}
.lead.PASS{border-left-color:#1a7f37}.lead.FAIL{border-left-color:#b42318}
tr.mark td{background:#fff1f0}tr.mark td:first-child{font-weight:600}
p{max-width:1100px}nav a{margin-right:12px}
</style></head>
<body>
<h1>{{ title }}</h1>
<div class="sub"><span class="verdict {{ verdict }}" id="verdict">{{ verdict }}</span>{{ dtype }}</div>
<p class="lead {{ verdict }}" id="lead">{{ lead }}</p>
<nav>{% for s in sections %}<a href="#{{ s.key }}">{{ s.title }}</a>{% endfor %}</nav>
{% for s in sections %}
<section id="{{ s.key }}"><h2>{{ s.title }}</h2>
{% for p in s.paragraphs %}<p>{{ p }}</p>{% endfor %}
{% for t in s.tables %}
<table class="{{ s.key }}"><thead><tr>{% for h in t.header %}<th>{{ h }}</th>{% endfor %}</tr></thead>
<tbody>{% for row in t.rows %}{% set mark = t.marks.get(loop.index0) %}
<tr{% if mark %} class="mark" title="{{ mark }}"{% endif %}>{% for c in row %}<td{% if c is number %} class="n"{% endif %}>{{ c }}{% if loop.first and mark %} <span class="bad">&larr; {{ mark }}</span>{% endif %}</td>{% endfor %}</tr>
{% endfor %}</tbody></table>
{% endfor %}
</section>
{% endfor %}
<script>document.body.setAttribute('data-rendered','yes');</script>
</body></html>
"""


def render_html(report: ParityReport, title: str = "torch_xla parity") -> str:
    """The page's HTML text.

    Example:
        >>> import torch
        >>> from torch_xla_ext import parity
        >>> report = parity.verify(torch.nn.Linear(4, 4), (torch.randn(2, 4),), dtype="fp32")
        >>> "<h2>Outputs</h2>" in render_html(report)
        True
    """
    if not isinstance(report, ParityReport):
        raise ParityTypeError(f"report: expected a ParityReport, got {type(report).__name__}")
    # Autoescape: report text (module and output names, exception messages) never becomes markup; the
    # CSP and stylesheet are our constants and go in as they are (a <style> does not decode entities).
    env = _html.environment()
    verdict = report.verdict.value if isinstance(report.verdict, Verdict) else str(report.verdict)
    return env.from_string(_TEMPLATE).render(
        csp=CSP, css=CSS, title=title, verdict=verdict, dtype=report.dtype, lead=report.summary,
        sections=report.document.sections if report.document is not None else ())


def write_html(path: str, report: ParityReport, title: str = "torch_xla parity") -> str:
    """Writes the report as a self-contained HTML page; returns ``path``.

    Example:
        >>> import torch
        >>> from torch_xla_ext import parity
        >>> report = parity.verify(torch.nn.Linear(4, 4), (torch.randn(2, 4),), dtype="fp32")
        >>> write_html("parity.html", report)
        'parity.html'
    """
    if not isinstance(path, str) or not path:
        raise ParityError(f"path: expected a non-empty file path (str), got {path!r}")
    text = render_html(report, title)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path
