"""The page style our self-contained HTML reports share (graph breaks, parity): one CSP and one
stylesheet, so every page opens from disk with no network and looks the same.

Example:
    >>> "default-src 'none'" in CSP
    True
"""

# Nothing loads from anywhere: inline styles and scripts only, images as data: URLs.
CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#1d232a;
background:#fafbfc}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d7dde3;
padding-bottom:4px}h3{font-size:15px;margin:18px 0 6px}
.sub{color:#5b6772;margin-bottom:16px}
table{border-collapse:collapse;margin:6px 0 12px;background:#fff}
th,td{border:1px solid #d7dde3;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eef2f6;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums}
code{font:12px ui-monospace,Menlo,Consolas,monospace;background:#eef2f6;padding:1px 4px;border-radius:3px}
.gb{font-weight:600}.hint{color:#44515c;margin:2px 0 0 0;padding-left:16px}.muted{color:#7a8691}
.bad{color:#b42318;font-weight:600}.ok{color:#1a7f37;font-weight:600}
details{margin:3px 0 3px 14px}summary{cursor:pointer}
.tree>details{margin-left:0;background:#fff;border:1px solid #d7dde3;border-radius:4px;padding:4px 8px}
.note{background:#fff8e6;border-left:4px solid #e9a23b;padding:6px 10px;margin:8px 0}
input[type=search]{padding:4px 6px;width:320px;margin:4px 0}
svg text{font:11px system-ui,sans-serif}
"""


def environment(templates: dict[str, str] | None = None):
    """The Jinja2 environment every page renders through: autoescape on (a value from a report
    never becomes markup; our constants go in with ``|safe``), undefined names an error.
    ``templates``: named templates (``{% import "macros" as m %}``, ``{% extends "page" %}``)."""
    import jinja2

    return jinja2.Environment(loader=jinja2.DictLoader(templates or {}), autoescape=True,
                              undefined=jinja2.StrictUndefined)
