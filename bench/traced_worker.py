"""One run of a trace bench's worker in a fresh process, untraced or under `torch-xla-ext trace`:
what bench/trace_bench.py (torch_xla) and bench/torchax_trace_bench.py share."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(kind: str, worker: list[str], out: str, trace_dir: str, *, env_defaults: dict[str, str],
        timeout: float) -> dict:
    """Runs ``worker`` (a command that writes its figures to ``out`` as JSON), under the trace into
    ``trace_dir`` when ``kind`` is "traced"; returns the figures with the run's ``wall_s``."""
    command = list(worker)
    if kind == "traced":
        command = [sys.executable, "-m", "torch_xla_ext", "trace", "--out", trace_dir, "--", *command]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    for key, value in env_defaults.items():
        env.setdefault(key, value)
    t0 = time.perf_counter()
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{kind} run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    with open(out) as f:
        d = json.load(f)
    d["wall_s"] = wall
    return d
