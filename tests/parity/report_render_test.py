"""A parity report reads: one lead sentence (verdict, cause, what to do), then the sections
outputs, rounding, per module, figures; in text, Markdown, JSON and a self-contained HTML page
rendered in headless Chromium. The JSON keeps every figure it had before the sections came."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest
import torch

from torch_xla_ext import parity

CHROMIUM = shutil.which("chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--enable-logging=stderr", "--v=0"]
CONSOLE = re.compile(r":CONSOLE[:(]\d*\)?\]? ?(.*)")

# The report's JSON keys before the lead sentence and the sections (all must stay).
OLD_KEYS = {"verdict", "explanation", "dtype", "rtol", "atol", "emulation", "hlo_math", "outputs", "rounding_points",
            "exception", "stage", "layers", "first_divergent_layer", "first_mismatched_layer", "modules",
            "first_divergent_module", "seconds"}
OLD_OUTPUT_KEYS = {"path", "xla_error", "cpu_error", "xla_mean_error", "cpu_mean_error", "closer", "scale",
                   "max_diff_to_scale", "max_ulp_magnitude", "emulated_error", "unrounded_error", "same_math", "cause",
                   "xla_vs_cpu", "significant", "emulated", "unrounded"}
OLD_MODULE_KEYS = {"path", "call", "depth", "order", "total_error", "inherited_error", "own_error", "rounding_level",
                   "scale", "diverges", "own_to_rounding"}
TITLES = ["Outputs", "Rounding", "Per module", "Figures"]


class Net(torch.nn.Module):
    """bf16 Linear + exact GELU + Linear, returning a dict whose key is markup (it must stay text)."""

    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(32, 64)
        self.act = torch.nn.GELU()
        self.down = torch.nn.Linear(64, 16)

    def forward(self, x):
        return {"<i>out</i>": self.down(self.act(self.up(x)))}


@pytest.fixture(scope="module")
def report():
    torch.manual_seed(0)
    return parity.verify(Net(), (torch.randn(8, 32),), dtype="bf16", localize=True)


def test_every_verdict_leads_with_one_sentence_verdict_cause_and_what_to_do(report):
    d = report.to_dict()
    lead = d["summary"]
    assert lead.startswith(f"{report.verdict.value}: ") and lead.endswith(".")
    assert lead.count(". ") == 0, "more than one sentence"
    # The cause named is the outputs' cause; the action follows from it.
    (o,) = report.outputs
    if report.verdict == parity.Verdict.FAIL:
        assert o.cause in lead and ("instead of CPU eager" in lead or "localise" in lead)
    # Text, Markdown and HTML lead with the same sentence.
    text = str(report).splitlines()
    assert text[0] == f"Parity verdict: {report.verdict.value} ({report.dtype}) on XLA:{report.device}" and text[2] == lead
    assert report.to_markdown().splitlines()[2] == f"**{lead}**"
    assert report.explanation.startswith(lead.split(";")[0])


def test_sections_come_in_order_in_text_markdown_and_json(report):
    md = report.to_markdown()
    pos = [md.index(f"\n## {t}\n") for t in TITLES]
    assert pos == sorted(pos)
    txt = str(report)
    pos = [txt.index(f"== {t} ==") for t in TITLES]
    assert pos == sorted(pos)
    assert [s["title"] for s in report.to_dict()["sections"]] == TITLES
    # The per-module section is the localisation result: one row per module call, same order.
    (mods,) = [s for s in report.to_dict()["sections"] if s["key"] == "modules"]
    assert [r[0].strip() for r in mods["tables"][0]["rows"]] == [m.name for m in report.modules]


def test_json_keeps_every_figure(report):
    d = json.loads(report.to_json())
    assert OLD_KEYS <= set(d)
    assert all(OLD_OUTPUT_KEYS <= set(o) for o in d["outputs"])
    assert d["modules"] and all(OLD_MODULE_KEYS <= set(m) for m in d["modules"])
    (o,) = report.outputs
    assert d["outputs"][0]["xla_error"] == o.xla_error and d["outputs"][0]["xla_vs_cpu"] == json.loads(json.dumps(o.xla_vs_cpu.to_dict()))


def _render(page: str, profile: str, screenshot: str) -> tuple[str, list[str]]:
    assert CHROMIUM, "chromium is not installed: run python/setup_env.sh (it installs Debian's chromium)"
    args = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=5000"]
    shot = subprocess.run(args + ["--window-size=1280,1800", f"--screenshot={screenshot}", f"file://{page}"],
                          capture_output=True, text=True, timeout=120).stderr.splitlines()
    proc = subprocess.run(args + ["--dump-dom", f"file://{page}"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, [m.group(1) for ln in proc.stderr.splitlines() + shot if (m := CONSOLE.search(ln))]


def test_html_page_renders_self_contained_and_escaped(report, tmp_path):
    page = parity.write_html(str(tmp_path / "parity.html"), report)
    text = open(page).read()
    assert not re.search(r"<(link|img|iframe)\b|\bsrc=|url\(", text)  # nothing to fetch
    assert "default-src 'none'" in text
    outputs = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR", str(tmp_path))
    shot = os.path.join(outputs, "parity_report.png")
    dom, console = _render(page, str(tmp_path / "profile"), shot)
    assert console == [], console
    assert 'data-rendered="yes"' in dom  # the page's script ran to its end
    assert f'id="verdict">{report.verdict.value}<' in dom
    for key in ("outputs", "rounding", "modules", "figures"):
        assert f'<section id="{key}">' in dom
    # The output named by markup stays text.
    assert "&lt;i&gt;out&lt;/i&gt;" in dom and "<i>out</i>" not in dom
    assert os.path.getsize(shot) > 10_000


def test_an_exception_leads_with_what_to_fix():
    class FailsOnXla(torch.nn.Module):
        def forward(self, x):
            if x.device.type == "xla":
                raise RuntimeError("no lowering here")
            return x * 2

    r = parity.verify(FailsOnXla(), (torch.randn(4),))
    lead = r.to_dict()["summary"]
    assert lead.startswith("EXCEPTION: the XLA run raised RuntimeError: no lowering here") and "fix" in lead
    assert [s["key"] for s in r.to_dict()["sections"]] == ["figures"]
    assert str(r).splitlines()[2] == lead and "EXCEPTION" in parity.html.render_html(r)
