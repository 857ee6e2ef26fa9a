"""A zoo model we did not design (BERT from transformers), a training step compiled with
openxla through the CLI with `--torch-trace`, parsed by the real tlparse. Its graphs break at
`loss.backward()` and inside the optimizer, so there are compile ids with and without graphs;
AOTAutograd's backward graph is extracted by the bridge at the first backward pass, after
Dynamo's compile has ended, and must still sit under its compile id. Oracles: Dynamo's own
records in the same trace (`tlparse_checks`), and AOTAutograd's `aot_backward_graph` artifact."""

import glob
import json
import os
import subprocess
import sys

from torch_xla_ext import graph_breaks as gb

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
from tests.graph_breaks import tlparse_checks

MODEL = "tests.zoo:bert"
WARMUP, STEPS = 1, 1


def test_zoo_training_step_in_tlparse(tmp_path):
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(gb.__file__)))
    env = {k: v for k, v in os.environ.items() if k not in ("TORCH_TRACE", "RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(PJRT_DEVICE="CPU", PYTHONPATH=os.pathsep.join(p for p in [pkg_parent, ROOT, *sys.path] if p))
    trace = tmp_path / "trace"
    cmd = [sys.executable, "-m", "torch_xla_ext", "graph-breaks", "--model", MODEL, "--train", "--modes", "dynamo",
           "--warmup", str(WARMUP), "--steps", str(STEPS), "--timeout", "600", "--json", str(tmp_path / "r.json"),
           "--torch-trace", str(trace)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (log,) = glob.glob(str(trace / "dedicated_log_torch_trace_*.log"))
    out = tmp_path / "tl"
    tlparse_checks.run_tlparse(tlparse_checks.tlparse_binary(), log, "-o", out)
    ours, summary = tlparse_checks.check_tlparse_output(out, log, 0, WARMUP + STEPS)
    tlparse_checks.check_chromium_events(out, WARMUP + STEPS)
    assert len(ours) >= 3  # the backward and the optimizer split the step
    backward = {cid for cid, p in ours.items() for g in p["dynamo_graphs"] for a in g["aot"]
                if a["kind"] == "backward" and a["bridge"] and a["bridge"][0]["partitions"]}
    directory = json.loads((out / "compile_directory.json").read_text())
    aot_backward = {key.strip("[]").split("_")[0] for key, e in directory.items()
                    if any(a["name"].startswith("aot_backward_graph_") for a in e["artifacts"])}
    assert backward == aot_backward and backward
    assert summary["figures"]["graph breaks (logged)"] >= 1
