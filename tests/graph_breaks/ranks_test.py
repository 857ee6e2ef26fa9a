"""Many ranks: three real processes of one job, one made to diverge, merged by `graph-breaks
merge`; and torch_xla's thread-per-device replicas (CPU_NUM_DEVICES) in one process, attributed
per replica. Each rank's figures are checked against its own Dynamo counters, each replica's
syncs against the count its thread kept."""

import json
import os
import subprocess
import sys

import pytest

from torch_xla_ext import graph_breaks as gb
from torch_xla_ext.cli import main

HERE = os.path.dirname(os.path.abspath(__file__))
WORLD = 3
DIVERGE = 2


def _env(**extra):
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(gb.__file__)))
    path = os.pathsep.join(p for p in [pkg_parent, *sys.path] if p)
    return dict(os.environ, PJRT_DEVICE="CPU", PYTHONPATH=path, **extra)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    out = tmp_path_factory.mktemp("ranks")
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "rank_worker.py"), "ranks", str(out)],
                              env=_env(RANK=str(r), WORLD_SIZE=str(WORLD), LOCAL_RANK=str(r),
                                       DIVERGE_RANK=str(DIVERGE)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(WORLD)]
    for r, p in enumerate(procs):
        log, _ = p.communicate(timeout=600)
        assert p.returncode == 0, f"rank {r}:\n{log[-3000:]}"
    return out


def test_each_rank_tags_its_report_and_matches_its_own_dynamo_counters(job):
    for r in range(WORLD):
        rep = gb.load_report(str(job / f"gb-rank{r}.json"))
        assert rep.rank["rank"] == r and rep.rank["world_size"] == WORLD and rep.rank["source"] == "RANK"
        assert rep.rank["local_rank"] == r
        counters = json.loads((job / f"counters-rank{r}.json").read_text())
        assert (rep.fx_graphs, rep.num_fx_breaks) == (counters["unique_graphs"], counters["graph_breaks"])


def test_merge_names_the_rank_that_diverges(job):
    files = [str(job / f"gb-rank{r}.json") for r in range(WORLD)]
    merged = gb.merge(files)
    assert merged.ranks == list(range(WORLD))
    assert merged.differing_ranks == [DIVERGE]
    whats = {d["what"] for d in merged.divergences}
    assert "graph break only on some ranks" in whats        # the user-inserted break
    assert "recompiles differ" in whats                      # the bigger batch
    assert "XLA compiles (uncached) differ" in whats
    assert "XLA graph hash only on some ranks" in whats      # another graph on that rank
    brk = next(d for d in merged.divergences if d["what"] == "graph break only on some ranks")
    assert "Call to `torch._dynamo.graph_break()`" in brk["key"] and brk["ranks"] == [DIVERGE]
    assert f"Ranks that differ: {DIVERGE}" in merged.to_markdown()
    # The agreeing ranks alone agree.
    assert gb.merge(files[:DIVERGE]).divergences == []


def test_merge_cli_writes_json_html_and_a_trace_per_rank(job, tmp_path, capsys):
    files = [str(job / f"gb-rank{r}.json") for r in range(WORLD)]
    j, h, t = tmp_path / "m.json", tmp_path / "m.html", tmp_path / "m.trace.json"
    assert main(["graph-breaks", "merge", *files, "--json", str(j), "--html", str(h), "--trace", str(t)]) == 0
    assert f"Ranks that differ: {DIVERGE}" in capsys.readouterr().out
    assert json.loads(j.read_text())["differing_ranks"] == [DIVERGE]
    page = h.read_text()
    assert f"Ranks that differ: {DIVERGE}" in page and page.count("<h2>rank ") == WORLD
    trace = json.loads(t.read_text())
    names = {e["args"]["name"].split(" (")[0] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert names == {f"rank {r}" for r in range(WORLD)}


def test_merge_rejects_what_is_not_one_report_per_rank(job, tmp_path):
    f0 = str(job / "gb-rank0.json")
    with pytest.raises(gb.GraphBreakError, match="both claim rank 0"):
        gb.merge([f0, f0])
    cmp = tmp_path / "cmp.json"  # a compare() result without its reports
    cmp.write_text(json.dumps({"modes": {"lazy": {}}, "steps": 1}))
    with pytest.raises(gb.GraphBreakError, match="cmp.json: field 'modes.lazy.report'"):
        gb.merge([f0, str(cmp)])
    with pytest.raises(gb.GraphBreakError, match="non-empty list"):
        gb.merge(f0)
    assert main(["graph-breaks", "merge", str(tmp_path / "missing.json")]) == 2


def test_thread_per_device_replicas_are_attributed_per_replica(tmp_path):
    proc = subprocess.run([sys.executable, os.path.join(HERE, "rank_worker.py"), "replicas", str(tmp_path)],
                          env=_env(CPU_NUM_DEVICES="3"), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rep = gb.load_report(str(tmp_path / "replicas.json"))
    kept = json.loads((tmp_path / "syncs.json").read_text())
    assert {r: v["syncs"] for r, v in rep.replicas.items()} == kept == {"0": 3, "1": 4, "2": 3}
    assert rep.syncs == sum(kept.values())
    # What cannot be attributed is said, not guessed.
    assert any("cannot be split per replica" in n for n in rep.notes)
    assert "cannot be split per replica" in rep.to_markdown()
