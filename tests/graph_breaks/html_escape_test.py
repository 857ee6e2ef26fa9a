"""Every graph-break page is Jinja2 with autoescape: markup planted in every text a report holds
(frames, guards, break records, notes, timeline names, rank info, a merge's divergences) stays
text. The oracle is the standard library's HTML parser: the only elements are the page's own,
the one <script> is ours, and the planted text reads back whole."""

import html.parser

from torch_xla_ext import graph_breaks as gb

EVIL = '<script>alert("x")</script><img src=x onerror=1>&amp;'


class _Elements(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.text = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)

    def handle_data(self, data):
        self.text.append(data)


def _report(rank: int) -> gb.GraphBreakReport:
    r = gb.GraphBreakReport(device="CPU:0")
    r.rank = {"rank": rank, "world_size": 2, "source": EVIL, "host": EVIL, "pid": EVIL}
    r.steps = 1
    r.fx_breaks = [{"gb_type": EVIL, "gb_id": EVIL, "doc": EVIL, "explanation": EVIL, "hints": [EVIL],
                    "inherited": 1, "split_at": [EVIL], "frame": EVIL, "function": EVIL, "compile_ids": [EVIL],
                    "count": 2, "counted": 1}]
    r.recompile_reasons = [{"reason": EVIL, "frame": EVIL, "compile_ids": [EVIL], "count": 1}]
    r.aot_graphs = {EVIL: 1}
    r.joined = [{"compile_id": EVIL, "name": EVIL, "frame": EVIL, "ms": 1.0, "recompile_reason": EVIL, "error": EVIL,
                 "breaks": [EVIL], "graphs": [{"graph": EVIL, "ops": 1, "ended_by": EVIL, "aot": [
                     {"kind": EVIL, "name": EVIL, "nodes": 1, "bridge": [
                         {"fallback_nodes": [EVIL], "ms": 1.0, "error": EVIL, "partitions": [{"graph_hash": EVIL, "nodes": 1}]}]}]}]}]
    r.per_graph_hash = {EVIL: {"partition_of": EVIL, "compiles": 1, "compile_ms": 1.0, "executions": 1,
                               "dispatch_ms": 1.0, "by_replica": {EVIL: 1}}}
    r.fallback_nodes, r.eager_nodes, r.fallback_ops = {EVIL: 1}, {EVIL: 1}, {EVIL: 1}
    r.replicas = {EVIL: {"syncs": 1, "executions": 1}, "1": {}}
    r.notes = [EVIL]
    r.timeline = [{"track": EVIL, "cat": "xla", "name": EVIL, "ts": 0.0, "dur": 5.0}]
    return r


def _check(page: str, planted: int):
    parser = _Elements()
    parser.feed(page)
    assert "img" not in parser.tags  # no planted element became one
    assert parser.tags.count("script") == 1  # ours (the breaks filter)
    assert "".join(parser.text).count(EVIL) >= planted, "the planted text must read back whole"


def test_a_report_page_escapes_everything_it_shows(tmp_path):
    page = open(gb.write_html(str(tmp_path / "r.html"), _report(0), title=EVIL)).read()
    _check(page, planted=30)
    assert 'href="&lt;script&gt;' in page  # the doc link's URL is an attribute value, escaped too


def test_a_merged_page_escapes_the_ranks_and_their_divergences(tmp_path):
    merged = gb.merge([_report(0), _report(1)])
    page = open(merged.write_html(str(tmp_path / "m.html"))).read()
    _check(page, planted=60)
