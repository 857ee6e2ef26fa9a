"""The HTML report rendered by a real browser: Debian's headless Chromium (python/setup_env.sh
installs it) loads the file from disk with the network off, runs its script, and the rendered DOM
must show Dynamo's break records; the browser's console must stay silent (no script error, no
blocked load). A control page with a deliberate error proves the console check can fail."""

import os
import re
import shutil
import subprocess

import pytest
import torch
import torch._dynamo
import torch_xla

from torch_xla_ext import graph_breaks as gb

CHROMIUM = shutil.which("chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0"]
CONSOLE = re.compile(r":CONSOLE[:(]\d*\)?\]? ?(.*)")


def render(page, profile, screenshot=None):
    """(rendered DOM, console messages) of `page` in headless Chromium."""
    assert CHROMIUM, "chromium is not installed: run python/setup_env.sh (it installs Debian's chromium)"
    args = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}"]
    shot = []
    if screenshot:
        shot = subprocess.run(args + ["--window-size=1280,2200", f"--screenshot={screenshot}", f"file://{page}"],
                              capture_output=True, text=True, timeout=120).stderr.splitlines()
    proc = subprocess.run(args + ["--dump-dom", f"file://{page}"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [m.group(1) for ln in proc.stderr.splitlines() + shot if (m := CONSOLE.search(ln))]
    return proc.stdout, console


@pytest.fixture(scope="module")
def report():
    torch._dynamo.reset()
    dev = torch_xla.device()
    model = gb.example_model(width=24).to(dev)
    x = gb.example_inputs(width=24)[0].to(dev)
    torch_xla.sync()
    compiled = torch.compile(model, backend="openxla")
    with gb.account() as ledger:
        for _ in range(2):
            compiled(x)
            ledger.step()
    return ledger.report()


def test_report_renders_with_the_break_records_and_a_silent_console(report, tmp_path):
    page = gb.write_html(str(tmp_path / "report.html"), report)
    text = open(page).read()
    # Self-contained: nothing to fetch (the GB ids link to torch's docs, which a click would open).
    assert not re.search(r"<(link|img|iframe)\b|\bsrc=|url\(", text)
    outputs = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR", str(tmp_path))
    dom, console = render(page, tmp_path / "profile", screenshot=os.path.join(outputs, "graph_breaks_report.png"))
    assert console == [], console
    assert 'data-rendered="yes"' in dom  # the page's script ran to its end
    assert report.fx_breaks
    for b in report.fx_breaks:
        for field in ("gb_type", "gb_id", "explanation", "frame"):
            assert _escaped(b[field]) in dom, (field, b[field])
    assert f"[{report.joined[0]['compile_id']}]" in dom and "aten::digamma" in dom


def test_merged_ranks_page_renders(report, tmp_path):
    ranks = [gb.GraphBreakReport.from_dict(dict(report.to_dict(), rank=dict(report.rank, rank=r))) for r in range(3)]
    ranks[2].fx_breaks = []  # rank 2 takes none of the breaks: the page must name it
    page = gb.merge(ranks).write_html(str(tmp_path / "ranks.html"))
    dom, console = render(page, tmp_path / "profile")
    assert console == [], console
    assert "Ranks that differ: 2" in dom and "graph break missing on some ranks" in dom


def test_the_console_check_catches_a_script_error(tmp_path):
    page = tmp_path / "broken.html"
    page.write_text("<!DOCTYPE html><html><body><p>x</p><script>missingFunction();</script></body></html>")
    _, console = render(str(page), tmp_path / "profile")
    assert any("missingFunction" in m for m in console), console


def _escaped(s):
    import html

    return html.escape(str(s), quote=False)
