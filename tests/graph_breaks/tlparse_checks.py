"""What tlparse shows of a traced run, checked against Dynamo's own records in the same trace
(shared by the tlparse tests; not collected).

* ``dynamo_compile_ids``: the compile ids of Dynamo's ``dynamo_start`` records, read from torch's
  trace file itself (glog prefix, then the JSON envelope).
* ``check_tlparse_output``: our artifacts in tlparse's ``compile_directory.json`` and
  ``index.html``, one per Dynamo compile id and nowhere else, and each one's content against
  Dynamo's own artifacts of that compile (its output graph, its break reasons).
"""

import json
import subprocess

import tool_venv  # python/ (//python:tool_venv; tests/conftest.py under plain pytest)

from torch_xla_ext.graph_breaks import tlparse as gb_tlparse


def tlparse_binary():
    """The pinned tlparse (python/tool_requirements/tlparse.txt), its cached venv made if missing."""
    return str(tool_venv.ensure("tlparse") / "bin" / "tlparse")


def run_tlparse(binary, *args):
    proc = subprocess.run([binary, *map(str, args), "--no-browser", "--overwrite"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _records(log_path):
    """The JSON envelope of every record of torch's trace file (glog prefix, then JSON)."""
    with open(log_path) as f:
        for line in f:
            if line.startswith("\t") or "] {" not in line:
                continue
            yield json.loads(line[line.index("] {") + 2:])


def dynamo_compile_ids(log_path):
    """Compile ids of Dynamo's own dynamo_start records."""
    return {f"{r['frame_id']}/{r['frame_compile_id']}" for r in _records(log_path) if "dynamo_start" in r}


def check_tlparse_output(out_dir, log_path, rank, runs):
    """Our artifacts in tlparse's output of one trace file, checked against Dynamo's records
    (every XLA partition ran ``runs`` times); returns {compile id: payload} and the summary."""
    directory = json.loads((out_dir / "compile_directory.json").read_text())
    index = (out_dir / "index.html").read_text()
    ours, summary, dynamo_art = {}, None, {}
    for key, entry in directory.items():
        cid = key.strip("[]").split("_")[0]  # "[0/0_1]" is compile id 0/0, attempt 1
        for a in entry["artifacts"]:
            dynamo_art.setdefault(cid, []).append(a)
            if a["name"].startswith(gb_tlparse.COMPILE_ARTIFACT + "_"):
                assert cid not in ours, f"two artifacts for {cid}"
                ours[cid] = json.loads((out_dir / a["url"]).read_text())
                assert a["url"] in index  # listed on tlparse's page
            elif a["name"].startswith(gb_tlparse.SUMMARY_ARTIFACT + "_"):
                assert key == "[-/-]" and a["url"] in index
                summary = json.loads((out_dir / a["url"]).read_text())
    dyn = dynamo_compile_ids(log_path)
    assert dyn and set(ours) == dyn
    assert summary is not None and sorted(summary["compile_ids"]) == sorted(dyn)
    assert summary["rank"]["rank"] == rank

    def dynamo_text(cid, prefix):
        return "".join((out_dir / a["url"]).read_text() for a in dynamo_art.get(cid, [])
                       if a["name"].startswith(prefix))

    for cid, p in ours.items():
        assert p["compile_id"] == cid and p["rank"] == rank
        # Dynamo's output graph for this compile holds digamma iff the bridge left it to the CPU.
        has_digamma = "digamma" in dynamo_text(cid, "dynamo_output_graph")
        assert ("aten::digamma" in p["totals"]["fallback_nodes"]) == has_digamma, cid
        # Dynamo logged a break in this compile iff the artifact names one.
        assert bool(p["graph_breaks"]) == bool(dynamo_text(cid, "dynamo_graph_break_reason")), cid
        # A compile that handed Dynamo's graph to the backend has its partitions here; one that
        # made no graph (a frame Dynamo skipped after a break) has none.
        assert (p["totals"]["xla_partitions"] >= 1) == bool(dynamo_text(cid, "dynamo_output_graph")), cid
        for g in p["dynamo_graphs"]:
            for a in g["aot"]:
                for b in a["bridge"]:
                    for part in b["partitions"]:  # every partition runs once per step
                        assert part["executions"] == runs, part
                        assert len(part["graph_hash"]) >= 16
    return ours, summary


def check_chromium_events(out_dir, runs):
    """Our timeline in tlparse's chromium_events.json (the Perfetto view tlparse writes), next to
    Dynamo's own `dynamo_timed` events: every field an importer needs, the Dynamo-compile slices
    exactly at the compile ids Dynamo's events carry, and each compile's XLA graphs run ``runs``
    times. Returns our events."""
    events = json.loads((out_dir / "chromium_events.json").read_text())
    dynamo_cids = {e["args"]["compile_id"] for e in events
                   if e.get("cat") == "dynamo_timed" and "compile_id" in (e.get("args") or {})}
    assert dynamo_cids
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    ours = [e for e in events if str(e.get("cat", "")).startswith(gb_tlparse.CHROMIUM_CAT + ".")]
    assert ours
    for e in ours:
        assert e["ph"] in ("X", "i") and isinstance(e["name"], str) and e["name"], e
        assert isinstance(e["ts"], (int, float)) and isinstance(e["pid"], int) and isinstance(e["tid"], int), e
        assert (e["dur"] > 0) if e["ph"] == "X" else (e["s"] == "t"), e
        assert threads[(e["pid"], e["tid"])].startswith("torch_xla_ext: "), e
        assert e["args"].get("compile_id", next(iter(dynamo_cids))) in dynamo_cids, e
    compiles = [e for e in ours if threads[(e["pid"], e["tid"])] == "torch_xla_ext: dynamo compile"]
    assert {e["args"]["compile_id"] for e in compiles} == dynamo_cids
    for cid in dynamo_cids:
        run = [e for e in ours if e["name"].startswith("run ") and e["args"].get("compile_id") == cid]
        assert len(run) == runs * len({e["args"]["graph_hash"] for e in run}), cid
    return ours
