"""The ledger in tlparse, and `graph-breaks merge` of what the CLI writes, with real processes.

Three ranks of one job run the CLI as a user would (`RANK`/`WORLD_SIZE` set, `--json` and
`--torch-trace` per rank); rank DIVERGE_RANK's model takes an extra graph break and runs a
CPU-fallback op (digamma). The real tlparse binary (pinned, in a cached venv made by
`python/tool_venv.py`) then parses the traces, per file and with `--all-ranks-html`.

Oracles: the compile ids come from Dynamo's own `dynamo_start` records in each trace file; which
compile breaks and which compile's graph holds digamma come from Dynamo's own artifacts
(`dynamo_graph_break_reason`, `dynamo_output_graph`) as tlparse files them; executions per XLA
graph from the run's design (each partition runs once per step); the timeline in tlparse's
`chromium_events.json` against the compile ids of Dynamo's own chromium events there.
"""

import glob
import json
import os
import subprocess
import sys

import pytest

from torch_xla_ext import graph_breaks as gb
from torch_xla_ext.cli import main

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
from tests.graph_breaks import tlparse_checks
from tests.graph_breaks.tlparse_checks import check_tlparse_output, dynamo_compile_ids

WORLD = 3
DIVERGE = 1
MODEL = "tests.graph_breaks.factories:rank_mlp"
WARMUP, STEPS = 1, 2


def _env(**extra):
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(gb.__file__)))
    path = os.pathsep.join(p for p in [pkg_parent, ROOT, *sys.path] if p)
    env = {k: v for k, v in os.environ.items() if k not in ("TORCH_TRACE", "RANK", "WORLD_SIZE", "LOCAL_RANK")}
    return dict(env, PJRT_DEVICE="CPU", PYTHONPATH=path, **extra)


@pytest.fixture(scope="module")
def tlparse_bin():
    return tlparse_checks.tlparse_binary()


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    out = tmp_path_factory.mktemp("tl_ranks")
    procs = []
    for r in range(WORLD):
        cmd = [sys.executable, "-m", "torch_xla_ext", "graph-breaks", "--model", MODEL, "--warmup", str(WARMUP),
               "--steps", str(STEPS), "--timeout", "400", "--json", str(out / f"rank{r}.json"),
               "--torch-trace", str(out / "trace")]
        procs.append(subprocess.Popen(cmd, env=_env(RANK=str(r), WORLD_SIZE=str(WORLD), DIVERGE_RANK=str(DIVERGE)),
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    try:
        for r, p in enumerate(procs):
            log, _ = p.communicate(timeout=900)
            assert p.returncode == 0, f"rank {r}:\n{log[-3000:]}"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return out


def rank_log(job, rank):
    files = glob.glob(str(job / "trace" / f"dedicated_log_torch_trace_rank_{rank}_*.log"))
    assert len(files) == 1, files
    return files[0]


def test_a_rank_trace_in_tlparse_has_the_ledger_under_dynamos_compile_ids(job, tlparse_bin, tmp_path):
    for r in (0, DIVERGE):
        out = tmp_path / f"one{r}"
        tlparse_checks.run_tlparse(tlparse_bin, rank_log(job, r), "-o", out)
        ours, _ = check_tlparse_output(out, rank_log(job, r), r, WARMUP + STEPS)
        tlparse_checks.check_chromium_events(out, WARMUP + STEPS)
        fallback = {op for p in ours.values() for op in p["totals"]["fallback_nodes"]}
        assert fallback == ({"aten::digamma"} if r == DIVERGE else set())


def test_all_ranks_html_shows_each_ranks_artifacts(job, tlparse_bin, tmp_path):
    out = tmp_path / "all"
    tlparse_checks.run_tlparse(tlparse_bin, job / "trace", "--all-ranks-html", "-o", out)
    index = (out / "index.html").read_text()
    counts = {}
    for r in range(WORLD):
        assert f"rank_{r}/index.html" in index
        ours, _ = check_tlparse_output(out / f"rank_{r}", rank_log(job, r), r, WARMUP + STEPS)
        counts[r] = len(ours)
    # The break splits the diverging rank's forward into one more compile (Dynamo's own count).
    assert counts[DIVERGE] == counts[0] + 1 and all(counts[r] == counts[0] for r in range(WORLD) if r != DIVERGE)


def test_merge_reads_the_json_the_cli_writes_and_names_the_diverging_rank(job):
    files = [str(job / f"rank{r}.json") for r in range(WORLD)]
    merged = gb.merge(files)
    assert merged.kind == "compare" and merged.ranks == list(range(WORLD))
    assert merged.differing_ranks == [DIVERGE]
    found = {(d.get("mode"), d["what"]) for d in merged.divergences}
    assert ("dynamo", "graph break only on some ranks") in found
    assert ("dynamo", "Dynamo frame compiles differ") in found
    assert ("lazy", "CPU fallback op only on some ranks") in found and \
        ("dynamo", "CPU fallback op only on some ranks") in found
    compiles = next(d for d in merged.divergences if d["what"] == "Dynamo frame compiles differ")
    assert compiles["values"] == {str(r): len(dynamo_compile_ids(rank_log(job, r))) for r in range(WORLD)}
    brk = next(d for d in merged.divergences if d["what"] == "graph break only on some ranks")
    assert "Call to `torch._dynamo.graph_break()`" in brk["key"]
    # The agreeing ranks alone agree, in both modes.
    assert gb.merge([files[0], files[2]]).divergences == []


def test_merge_cli_on_cli_json_exits_0_and_names_rank_and_figures(job, tmp_path, capsys):
    files = [str(job / f"rank{r}.json") for r in range(WORLD)]
    j = tmp_path / "merged.json"
    assert main(["graph-breaks", "merge", *files, "--json", str(j), "--html", str(tmp_path / "m.html")]) == 0
    out = capsys.readouterr().out
    assert f"Ranks that differ: {DIVERGE}" in out and "[dynamo] graph break only on some ranks" in out
    d = json.loads(j.read_text())
    assert d["differing_ranks"] == [DIVERGE] and set(d["modes"]) == {"lazy", "dynamo"}
    page = (tmp_path / "m.html").read_text()
    assert f"Ranks that differ: {DIVERGE}" in page and f"rank {DIVERGE}, dynamo mode" in page


def test_merge_bad_inputs_are_typed_errors_naming_the_file(job, tmp_path):
    good = str(job / "rank0.json")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"modes": {"dynamo": {"report": {"executions": "many"}}}}))
    with pytest.raises(gb.GraphBreakError, match=r"bad\.json: modes\.dynamo\.report: field 'executions'"):
        gb.merge([good, str(bad)])
    no_report = tmp_path / "no_report.json"
    no_report.write_text(json.dumps({"modes": {"lazy": {}}}))
    with pytest.raises(gb.GraphBreakError, match=r"no_report\.json: field 'modes\.lazy\.report'"):
        gb.merge([good, str(no_report)])
    region = gb.GraphBreakReport(rank={"rank": 7}).save(str(tmp_path / "region.json"))
    with pytest.raises(gb.GraphBreakError, match="merge files of one kind"):
        gb.merge([good, region])
    with pytest.raises(gb.GraphBreakError, match="both claim rank 0"):
        gb.merge([good, good])
    with pytest.raises(FileNotFoundError, match="missing.json"):
        gb.merge([good, str(tmp_path / "missing.json")])
    assert main(["graph-breaks", "merge", good, str(bad)]) == 2


def test_torch_trace_arguments_are_checked(tmp_path):
    with pytest.raises(gb.GraphBreakError, match="torch_trace.*dynamo mode"):
        gb.compare(MODEL, modes=("lazy",), torch_trace=str(tmp_path))
    with pytest.raises(gb.GraphBreakError, match="torch_trace"):
        gb.compare(MODEL, torch_trace=str(tmp_path), isolation="in-process")
    with pytest.raises(gb.GraphBreakError, match="torch_trace must be"):
        gb.account(torch_trace="yes")
    assert main(["graph-breaks", "--model", MODEL, "--modes", "lazy", "--torch-trace", str(tmp_path)]) == 2
