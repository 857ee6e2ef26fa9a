"""A two-rank job under the pinned torch's torchrun (``python -m torch.distributed.run
--nproc-per-node 2``), rank 1 made to diverge at step 3 (longer sequences): traced through the
CLI, each rank's compiles against the same job run untraced under PT_XLA_DEBUG_LEVEL=2 with
torchrun's per-rank logs; the report names step 3, rank 1, the input whose shape differs and the
line that made it. tlparse --all-ranks-html over the run's structured trace shows one artifact per
lazy compile of each rank. A copy of the trace with a rank file removed or cut short names the
missing rank and the damage."""

import glob
import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.trace import runs

ARGS = ["--steps", "4", "--diverge-rank", "1", "--diverge-step", "3"]


def _torchrun(*extra):
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", *extra,
            runs.script("two_ranks.py"), *ARGS]


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ranks")
    status, out, err, report = runs.traced(tmp / "trace", _torchrun())
    assert status == 0 and report is not None, err[-4000:]
    # The oracle: the same job untraced, torch_xla's analysis per rank in torchrun's own log files.
    logs = tmp / "logs"
    proc = subprocess.run(_torchrun("--log-dir", str(logs), "--redirects", "3", "--tee", "0"),
                          env=runs.env(PT_XLA_DEBUG_LEVEL="2"), capture_output=True, text=True,
                          timeout=runs.TIMEOUT, cwd=runs.ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    oracle = {}
    for rank in (0, 1):
        (path,) = glob.glob(str(logs / "**" / f"attempt_0/{rank}/stderr.log"), recursive=True)
        oracle[rank] = runs.analysis(open(path).read())
    return {"dir": tmp / "trace", "report": report, "oracle": oracle, "stdout": out, "tmp": tmp}


def test_each_rank_compiles_what_torch_xla_reports_for_it(job):
    for rank in (0, 1):
        ours = runs.rank_compiles(job["report"], rank)
        assert [c["graph_hash"] for c in ours] == job["oracle"][rank]["compile_hashes"]
        assert len(ours) == job["oracle"][rank]["compile_blocks"]
        r = next(x for x in job["report"]["ranks"] if x["rank"] == rank)
        assert r["torch_xla_compile_count"] == len(ours) and r["steps"] == 4 and r["ended"]
    assert sorted(os.path.basename(p) for p in glob.glob(str(job["dir"] / "rank-*.jsonl"))) == \
        ["rank-0.jsonl", "rank-1.jsonl"]
    assert "rank 0 done" in job["stdout"] and "rank 1 done" in job["stdout"]


def test_the_report_names_the_step_the_rank_and_the_input_that_diverge(job):
    d = job["report"]["divergence"]
    assert d["first_step"] == 3 and d["ranks_that_differ"] == [1] and d["no_majority"]
    assert d["missing_ranks"] == [] and d["stopped_early"] == []
    (row,) = d["details"]
    assert row["rank"] == 1 and row["reference_rank"] == 0
    change = next(c for c in row["differences"] if c["what"] == "input")
    assert (change["old"], change["new"], change["names"]) == ([4, 8], [4, 12], ["ids"])
    op = next(c for c in row["differences"] if c["what"] == "op")
    made_at = f"{runs.script('two_ranks.py')}:{_line('torch.randint(0, 64')}"
    sites = {op.get("new_site"), (op.get("first_with_source") or {}).get("site")}
    assert made_at in sites or any(s and s.startswith(runs.script("two_ranks.py")) for s in sites)
    assert "ranks diverge at step 3" in "\n".join(job["report"]["summary"])


def _line(text):
    with open(runs.script("two_ranks.py")) as f:
        return next(n for n, line in enumerate(f, 1) if text in line)


def test_tlparse_all_ranks_shows_a_lazy_compile_artifact_per_compile(job, tmp_path):
    from tests.graph_breaks import tlparse_checks

    out = tmp_path / "tl"
    tlparse_checks.run_tlparse(tlparse_checks.tlparse_binary(), job["dir"] / "torch_trace", "--all-ranks-html",
                               "-o", out)
    index = (out / "index.html").read_text()
    for rank in (0, 1):
        assert f"rank_{rank}" in index
        arts = sorted(glob.glob(str(out / f"rank_{rank}" / "-_-_-_-" / "torch_xla_ext_lazy_compile_*.json")))
        ours = runs.rank_compiles(job["report"], rank)
        assert len(arts) == len(ours)
        payloads = sorted((json.load(open(a)) for a in arts), key=lambda p: p["k"])
        assert [p["graph_hash"] for p in payloads] == [c["graph_hash"] for c in ours]
        assert all(p["trigger"]["site"].endswith(".py:" + p["trigger"]["site"].rsplit(":", 1)[1]) for p in payloads)


def test_a_missing_and_a_cut_rank_file_are_named(job, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(job["dir"], copy, ignore=shutil.ignore_patterns("report.*", "trace.perfetto.json"))
    os.remove(copy / "rank-1.jsonl")
    report = _report(copy)
    assert report["divergence"]["missing_ranks"] == [1]
    # rank 1 back, cut in the middle of a record, as a kill while writing leaves it
    data = open(job["dir"] / "rank-1.jsonl", "rb").read()
    lines = data.split(b"\n")
    keep = b"\n".join(lines[:6]) + b"\n" + lines[6][: len(lines[6]) // 2]
    (copy / "rank-1.jsonl").write_bytes(keep)
    report = _report(copy)
    r1 = next(r for r in report["ranks"] if r["rank"] == 1)
    assert r1["damage"].startswith("line 7 is cut short") and "line 7" in r1["stopped"]
    assert not r1["ended"]
    assert report["divergence"]["missing_ranks"] == []
    # a line that is no record: read up to it, named
    bad = b"\n".join(lines[:4]) + b'\n{"ev": "step", "n": "three"}\n' + b"\n".join(lines[4:])
    (copy / "rank-1.jsonl").write_bytes(bad)
    r1 = next(r for r in _report(copy)["ranks"] if r["rank"] == 1)
    assert "line 5" in r1["damage"] and "'n'" in r1["damage"]


def _report(directory):
    proc = subprocess.run([sys.executable, "-m", "torch_xla_ext", "trace", "--report", str(directory)],
                          env=runs.env(), capture_output=True, text=True, timeout=300, cwd=runs.ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.load(open(os.path.join(directory, "report.json")))
