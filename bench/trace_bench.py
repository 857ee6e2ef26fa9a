"""What tracing a training script costs per step: the same 20-step GPT-2-class loop run untraced
and under ``torch-xla-ext trace``, in one invocation.

Each round runs the loop three times, each in a fresh process: untraced (the anchor), traced, and
untraced again (an A/A control that shows the noise floor of this machine); the order of the
traced run and the control alternates between rounds. A run builds a GPT-2 (transformers, from a
config, random weights), then runs ``--warmup`` steps and ``--steps`` timed steps of fixed shape:
forward with labels, backward, AdamW step, ``torch_xla.sync()``, waiting for the device, and the
loss read with ``.item()`` after the sync (the logging most scripts do). The trace's capture
window (its first steps and the steps after a compile) falls in the warmup. A round's ratio is
median(traced steps) / median(anchor steps); the reported ratio is the median over rounds.
Target: <= 1.02x per step.

Also printed: the fixed cost the trace adds to a step marker that runs one graph (the recorder's
callbacks and record, and torch_xla's own analysis of the execution), from 2000 tiny steps
(``x + 1``, sync) timed one by one in each process, as a share of the GPT-2 step (what the step
ratio resolves only down to this machine's noise), and the recorder's part of it measured inside the
traced process (the recorder paused and recording in alternating blocks); and each run's wall time from start to exit
(imports, compiles, the capture window, the report written by the CLI at the end).

    PYTHONPATH=. PJRT_DEVICE=CPU .venv/bin/python bench/trace_bench.py                  # tiny GPT-2, 3 rounds
    PYTHONPATH=. PJRT_DEVICE=CPU .venv/bin/python bench/trace_bench.py --size 124M --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import traced_worker  # bench/ (this script's folder) is on sys.path

SIZES = {  # GPT-2 configs: n_layer, n_embd, n_head, vocab, sequence length, batch
    "tiny": (2, 128, 4, 2048, 64, 4),
    "124M": (12, 768, 12, 50257, 128, 4),
}


def worker(out: str, size: str, warmup: int, steps: int, empty_syncs: int) -> None:
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    from transformers import GPT2Config, GPT2LMHeadModel

    n_layer, n_embd, n_head, vocab, seq, batch = SIZES[size]
    torch.manual_seed(0)
    device = torch_xla.device()
    model = GPT2LMHeadModel(GPT2Config(n_layer=n_layer, n_embd=n_embd, n_head=n_head, vocab_size=vocab,
                                       n_positions=seq, use_cache=False)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, vocab, (batch, seq)).to(device)
    torch_xla.sync()
    times = []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        torch_xla.sync()
        xm.wait_device_ops()
        loss.item()
        times.append(time.perf_counter() - t0)
    # A step marker that runs a tiny cached graph, many times: the recorder's and torch_xla's
    # analysis' fixed cost per step marker and execution, which step times resolve only to noise.
    x = torch.zeros(4, device=device)
    torch_xla.sync()
    tiny = []
    for i in range(empty_syncs + 50):
        t0 = time.perf_counter()
        x = x + 1
        torch_xla.sync()
        tiny.append(time.perf_counter() - t0)
    xm.wait_device_ops()
    # In a traced process: the same tiny steps with the recorder paused and recording, in
    # alternating blocks (one process, so this machine's drift cancels): the recorder's own cost.
    recorder_us = None
    from torch_xla_ext.trace import startup

    rec = startup.recorder()
    if rec is not None and rec.lazy is not None:
        on, off = [], []
        for block in range(20):
            rec.lazy.pause(block % 2 == 1)
            for _ in range(max(empty_syncs // 20, 10)):
                t0 = time.perf_counter()
                x = x + 1
                torch_xla.sync()
                (off if block % 2 else on).append(time.perf_counter() - t0)
        rec.lazy.pause(False)
        recorder_us = (statistics.median(on) - statistics.median(off)) * 1e6
    with open(out, "w") as f:
        json.dump({"steps_ms": [t * 1e3 for t in times[warmup:]], "warmup_ms": [t * 1e3 for t in times[:warmup]],
                   "tiny_step_us": statistics.median(tiny[50:]) * 1e6, "recorder_us": recorder_us}, f)


def _run(kind: str, args: argparse.Namespace, tmp: str, i: int) -> dict:
    out = os.path.join(tmp, f"{kind}-{i}.json")
    worker = [sys.executable, os.path.abspath(__file__), "--worker", out, "--size", args.size,
              "--warmup", str(args.warmup), "--steps", str(args.steps), "--empty-syncs", str(args.empty_syncs)]
    return traced_worker.run(kind, worker, out, os.path.join(tmp, f"trace-{i}"), env_defaults={"PJRT_DEVICE": "CPU"},
                             timeout=args.timeout)

def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", choices=sorted(SIZES), default="tiny")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--warmup", type=int, default=6, help="untimed steps first (default 6: the capture window)")
    p.add_argument("--steps", type=int, default=20, help="timed steps (default 20)")
    p.add_argument("--empty-syncs", type=int, default=2000,
                   help="tiny steps (x + 1, sync) timed for the fixed cost per step marker (default 2000)")
    p.add_argument("--timeout", type=float, default=1800.0)
    p.add_argument("--worker", metavar="OUT", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args.worker, args.size, args.warmup, args.steps, args.empty_syncs)
        return 0
    med = statistics.median
    ratios, controls, sync_cost, anchors, recorder, walls = [], [], [], [], [], {"untraced": [], "traced": []}
    with tempfile.TemporaryDirectory(prefix="txe-trace-bench-") as tmp:
        for r in range(args.rounds):
            order = ["untraced", "traced", "control"] if r % 2 == 0 else ["untraced", "control", "traced"]
            res = {k: _run("traced" if k == "traced" else "untraced", args, tmp, r * 3 + j) for j, k in enumerate(order)}
            anchor = med(res["untraced"]["steps_ms"])
            ratios.append(med(res["traced"]["steps_ms"]) / anchor)
            controls.append(med(res["control"]["steps_ms"]) / anchor)
            sync_cost.append(res["traced"]["tiny_step_us"] - med([res["untraced"]["tiny_step_us"],
                                                                 res["control"]["tiny_step_us"]]))
            anchors.append(anchor)
            recorder.append(res["traced"]["recorder_us"])
            walls["untraced"].append(res["untraced"]["wall_s"])
            walls["traced"].append(res["traced"]["wall_s"])
            print(f"round {r + 1}: step {anchor:.2f} ms untraced, traced/untraced {ratios[-1]:.4f}, "
                  f"control/untraced {controls[-1]:.4f}, {sync_cost[-1]:+.1f} us per tiny step "
                  f"({recorder[-1]:+.1f} us of it the recorder's, in-process), "
                  f"wall {res['untraced']['wall_s']:.1f} s / {res['traced']['wall_s']:.1f} s", flush=True)
    print(f"\nGPT-2 {args.size}, {args.steps} timed steps after {args.warmup}, {args.rounds} rounds")
    print(f"per step, traced / untraced: {med(ratios):.4f}x (target <= 1.02x); "
          f"A/A control: {med(controls):.4f}x (this machine's noise)")
    print(f"fixed cost per step marker running one graph: {med(sync_cost):+.1f} us "
          f"({med(sync_cost) / 1e3 / med(anchors) * 100:+.3f}% of the {med(anchors):.1f} ms step: the per-step "
          "overhead this machine's noise does not hide)")
    print(f"of which the recorder's callbacks and record, measured paused/recording in the traced process: "
          f"{med(recorder):+.1f} us ({med(recorder) / 1e3 / med(anchors) * 100:+.3f}% of the step); the rest is "
          "torch_xla's own analysis of each execution (PT_XLA_DEBUG_LEVEL=2 into a file)")
    print(f"whole run (start to exit, report included): {med(walls['traced']):.1f} s traced, "
          f"{med(walls['untraced']):.1f} s untraced ({med(walls['traced']) / med(walls['untraced']):.3f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
