"""A two-rank job under the pinned torch's torchrun (``python -m torch.distributed.run
--nproc-per-node 2``), rank 1 made to diverge from step 2 on (4 tokens longer at every step),
traced once through the CLI; each rank's compiles against torch_xla's own records of that rank
(``runs.traced_script``: CompileTime and the PT_XLA_DEBUG_LEVEL=2 analysis of each process). The
report names step 2, rank 1, the input whose shape differs and the line that made it, and flags
rank 1's site as compiling every step. tlparse --all-ranks-html over the run's structured trace
shows one artifact per lazy compile of each rank. Copies of the trace with a rank file removed,
cut short or damaged are rendered again with ``--report``: the missing rank and the damage named."""

import glob
import html
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from tests.trace import runs

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    r = runs.traced_script(tmp_path_factory.mktemp("ranks"), "two_ranks.py", "--steps", "4", "--diverge-rank", "1",
                           "--diverge-step", "2", launcher=TORCHRUN)
    assert r.status == 0, r.stderr[-4000:]
    return r


def test_each_rank_compiles_what_torch_xla_reports_for_it(job):
    assert sorted(os.path.basename(p) for p in glob.glob(os.path.join(job.dir, "rank-*.jsonl"))) == \
        ["rank-0.jsonl", "rank-1.jsonl"]
    for rank in (0, 1):
        runs.check_compiles(job, rank)
        r = job.rank(rank)
        assert r["steps"] == 4 and r["ended"] and r["world_size"] == 2
    assert "rank 0 done" in job.stdout and "rank 1 done" in job.stdout
    assert job.rank(0)["steady"].startswith("no new graphs after step 1")
    # Rank 1's loop compiles at every step from step 1 to its last: flagged.
    (every,) = [s for s in job.report["sites"] if s["every_step"]]
    assert every["rank"] == 1 and every["site"] == runs.site("two_ranks.py", "torch_xla.sync()", last=True)
    assert every["compiles"] == len(job.compiles(1)) == 4


def test_the_report_names_the_step_the_rank_and_the_input_that_diverge(job):
    d = job.report["divergence"]
    assert d["first_step"] == 2 and d["ranks_that_differ"] == [1] and d["no_majority"]
    assert d["missing_ranks"] == [] and d["stopped_early"] == []
    (row,) = d["details"]
    assert row["rank"] == 1 and row["reference_rank"] == 0
    change = next(c for c in row["differences"] if c["what"] == "input")
    assert (change["old"], change["new"], change["names"]) == ([4, 8], [4, 12], ["ids"])
    op = next(c for c in row["differences"] if c["what"] == "op")
    sites = {op.get("new_site"), (op.get("first_with_source") or {}).get("site")}
    assert any(s and s.startswith(runs.script("two_ranks.py") + ":") for s in sites)
    summary = "\n".join(job.report["summary"])
    assert "ranks diverge at step 2: rank 1 runs other graphs" in summary and "EVERY STEP" in summary


def test_tlparse_all_ranks_shows_a_lazy_compile_artifact_per_compile(job, tmp_path):
    from tests.graph_breaks import tlparse_checks

    out = tmp_path / "tl"
    tlparse_checks.run_tlparse(tlparse_checks.tlparse_binary(), os.path.join(job.dir, "torch_trace"),
                               "--all-ranks-html", "-o", out)
    index = (out / "index.html").read_text()
    for rank in (0, 1):
        assert f"rank_{rank}/index.html" in index
        arts = glob.glob(str(out / f"rank_{rank}" / "-_-_-_-" / "torch_xla_ext_lazy_compile_*.json"))
        page = (out / f"rank_{rank}" / "index.html").read_text()
        assert all(os.path.basename(a) in page for a in arts)
        payloads = sorted((json.load(open(a)) for a in arts), key=lambda p: p["k"])
        # One per compile torch_xla reported for that rank, with its hash, in order.
        assert [p["graph_hash"] for p in payloads] == job.analysis[rank]["compile_hashes"]
        assert all(p["trigger"]["site"].startswith(runs.script("two_ranks.py") + ":") for p in payloads)


def test_a_missing_a_cut_and_a_damaged_rank_file_are_named(job, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(job.dir, copy, ignore=shutil.ignore_patterns("report.*", "trace.perfetto.json"))
    os.remove(copy / "rank-1.jsonl")
    report = _report(copy)
    assert report["divergence"]["missing_ranks"] == [1]
    assert "missing ranks: 1" in "\n".join(report["summary"])
    # rank 1 back, cut in the middle of its 7th record, as a kill while writing leaves it
    lines = open(os.path.join(job.dir, "rank-1.jsonl"), "rb").read().split(b"\n")
    (copy / "rank-1.jsonl").write_bytes(b"\n".join(lines[:6]) + b"\n" + lines[6][: len(lines[6]) // 2])
    report = _report(copy)
    r1 = next(r for r in report["ranks"] if r["rank"] == 1)
    assert r1["damage"].startswith("line 7 is cut short") and "line 7" in r1["stopped"] and not r1["ended"]
    assert report["divergence"]["missing_ranks"] == []
    kept = [json.loads(x) for x in lines[:6]]
    assert r1["steps"] == max([x["n"] for x in kept if x["ev"] == "step"], default=0)  # read up to the damage
    # a line that is no record: read up to it, named with its field
    bad = b"\n".join(lines[:4]) + b'\n{"ev": "step", "n": "three"}\n' + b"\n".join(lines[4:])
    (copy / "rank-1.jsonl").write_bytes(bad)
    r1 = next(r for r in _report(copy)["ranks"] if r["rank"] == 1)
    assert "line 5" in r1["damage"] and "'n'" in r1["damage"]
    # bytes that are not JSON
    (copy / "rank-1.jsonl").write_bytes(b"\n".join(lines[:3]) + b"\n\x00\xff garbage\n" + b"\n".join(lines[3:]))
    r1 = next(r for r in _report(copy)["ranks"] if r["rank"] == 1)
    assert r1["damage"].startswith("line 4 is not JSON")


def _report(directory):
    proc = subprocess.run([sys.executable, "-m", "torch_xla_ext", "trace", "--report", str(directory)],
                          env=runs.env(), capture_output=True, text=True, timeout=300, cwd=runs.ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(os.path.join(directory, "report.json")) as f:
        report = json.load(f)
    assert proc.stderr.strip().splitlines()[-len(report["summary"]):] == report["summary"]
    return report


def test_the_html_page_and_the_perfetto_trace(job, tmp_path):
    """report.html rendered by headless Chromium (Playwright, tests/parity/browser.py) from disk:
    once its script has drawn the page, every compile's hash and the divergence are in the DOM.
    trace.perfetto.json read field by field: one named process per rank, a slice per compile with
    its hash."""
    from tests.parity import browser

    page = pathlib.Path(job.dir) / "report.html"
    assert "default-src 'none'" in html.unescape(page.read_text())  # nothing loads from anywhere
    dom = browser.render(page.as_uri(), "document.body !== null && document.body.innerText.includes('first differ')",
                         evaluate={"dom": "document.documentElement.outerHTML"}, settle_s=0.5, timeout=120)["dom"]
    for c in job.report["compiles"]:
        assert c["graph_hash"][:16] in dom
    assert job.report["divergence"]["ranks_that_differ"] == [1]
    assert f"first differ at step {job.report['divergence']['first_step']}: rank 1." in dom  # one rank: "rank"
    events = json.load(open(os.path.join(job.dir, "trace.perfetto.json")))["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert sorted(names.values()) == ["rank 0", "rank 1"]
    for e in events:
        assert e["ph"] in ("M", "X") and isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] == "X":
            assert e["dur"] > 0 and e["ts"] >= 0 and e["name"]
    slices = [e for e in events if e.get("cat") == "compile"]
    assert sorted((names[e["pid"]], e["args"]["graph_hash"]) for e in slices) == \
        sorted((f"rank {c['rank']}", c["graph_hash"]) for c in job.report["compiles"])
