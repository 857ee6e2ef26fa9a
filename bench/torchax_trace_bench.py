"""What tracing a torchax program costs per compiled call: a GPT-2-tiny forward compiled with
``torchax.compile`` and called with a fixed shape, run untraced and under ``torch-xla-ext trace``,
in one invocation.

Each round runs the loop three times, each in a fresh process: untraced (the anchor), traced, and
untraced again (an A/A control that shows the noise floor of this machine); the order of the
traced run and the control alternates between rounds. A run builds a GPT-2 (transformers, from a
config, random weights; the trace bench's "tiny" size), compiles it with ``torchax.compile``, runs
``--warmup`` calls (the first compiles) and ``--calls`` timed calls, each waited for
(``jax.block_until_ready`` on the logits). A round's ratio is median(traced calls) /
median(anchor calls); the reported ratio is the median over rounds. Target: <= 1.01x per call
once compiled.

Also printed: the fixed cost the trace adds to a compiled call (the jit seam's count and
thread-local push and pop), from 2000 calls of a tiny compiled function (``x + 1``) timed one by
one in each process, as a share of the GPT-2 call: what the call ratio resolves only down to this
machine's noise; and, inside the traced process, the same forward (``interop.jax_jit`` over the
module's functional call), and the tiny function, through the trace's seam and through torchax's
own callable in alternating blocks (one process, one compiled program: this machine's drift
cancels).

    PYTHONPATH=. JAX_PLATFORMS=cpu .venv/bin/python bench/torchax_trace_bench.py             # 3 rounds
    PYTHONPATH=. JAX_PLATFORMS=cpu .venv/bin/python bench/torchax_trace_bench.py --rounds 5 --calls 400
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

# n_layer, n_embd, n_head, vocab, sequence length, batch: bench/trace_bench.py's "tiny"
TINY = (2, 128, 4, 2048, 64, 4)


def worker(out: str, warmup: int, calls: int, tiny_calls: int) -> None:
    import jax
    import torch
    import torchax
    from torchax import interop
    from transformers import GPT2Config, GPT2LMHeadModel

    n_layer, n_embd, n_head, vocab, seq, batch = TINY
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=n_layer, n_embd=n_embd, n_head=n_head, vocab_size=vocab,
                                       n_positions=seq, use_cache=False, return_dict=False)).eval()
    env = torchax.default_env()
    with env, torch.no_grad():
        model.to("jax")
        fast = torchax.compile(model)
        ids = torch.randint(0, vocab, (batch, seq), device="jax")
        times = []
        for _ in range(warmup + calls):
            t0 = time.perf_counter()
            logits = fast(ids)[0]
            jax.block_until_ready(interop.jax_view(logits))
            times.append(time.perf_counter() - t0)
        # A tiny compiled function called many times: the fixed cost per compiled call, which
        # the GPT-2 call times resolve only down to this machine's noise.
        add_one = interop.jax_jit(lambda x: x + 1)
        x = torch.zeros(4, device="jax")
        tiny = []
        for _ in range(tiny_calls + 50):
            t0 = time.perf_counter()
            x = add_one(x)
            jax.block_until_ready(interop.jax_view(x))
            tiny.append(time.perf_counter() - t0)
        # In a traced process: the tiny function through the trace's jit seam and through
        # torchax's own callable (``__wrapped__``, the same jitted program) in alternating blocks:
        # the seam's fixed cost per call, in microseconds.
        seam_us = None
        own = getattr(add_one, "__wrapped__", None)
        if own is not None:
            on, off = [], []
            for block in range(20):
                f = own if block % 2 else add_one
                for _ in range(max(tiny_calls // 20, 20)):
                    t0 = time.perf_counter()
                    x = f(x)
                    jax.block_until_ready(interop.jax_view(x))
                    (off if block % 2 else on).append(time.perf_counter() - t0)
            seam_us = (statistics.median(on) - statistics.median(off)) * 1e6
        # In a traced process: the same forward through the trace's jit seam and through torchax's
        # own callable (``__wrapped__``; one jitted program, compiled once) in alternating blocks,
        # so this machine's drift cancels: the seam's own cost per call.
        seam = None
        jm = interop.JittableModule(model)
        forward = interop.jax_jit(lambda params, buffers, ids: jm.functional_call("forward", params, buffers, ids))
        untraced = getattr(forward, "__wrapped__", None)
        if untraced is not None:
            for f in (forward, untraced):
                jax.block_until_ready(interop.jax_view(f(jm.params, jm.buffers, ids)[0]))
            on, off = [], []
            for block in range(20):
                f = untraced if block % 2 else forward
                for _ in range(max(calls // 10, 5)):
                    t0 = time.perf_counter()
                    jax.block_until_ready(interop.jax_view(f(jm.params, jm.buffers, ids)[0]))
                    (off if block % 2 else on).append(time.perf_counter() - t0)
            seam = {"on_ms": statistics.median(on) * 1e3, "off_ms": statistics.median(off) * 1e3}
    with open(out, "w") as f:
        json.dump({"calls_ms": [t * 1e3 for t in times[warmup:]], "warmup_ms": [t * 1e3 for t in times[:warmup]],
                   "tiny_call_us": statistics.median(tiny[50:]) * 1e6, "seam": seam,
                   "seam_us": seam_us}, f)


def _run(kind: str, args: argparse.Namespace, tmp: str, i: int) -> dict:
    out = os.path.join(tmp, f"{kind}-{i}.json")
    worker = [sys.executable, os.path.abspath(__file__), "--worker", out, "--warmup", str(args.warmup),
              "--calls", str(args.calls), "--tiny-calls", str(args.tiny_calls)]
    return traced_worker.run(kind, worker, out, os.path.join(tmp, f"trace-{i}"),
                             env_defaults={"JAX_PLATFORMS": "cpu"}, timeout=args.timeout)

def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=5, help="untimed calls first (default 5; the first compiles)")
    p.add_argument("--calls", type=int, default=200, help="timed calls (default 200)")
    p.add_argument("--tiny-calls", type=int, default=2000,
                   help="calls of a tiny compiled function timed for the fixed cost per call (default 2000)")
    p.add_argument("--timeout", type=float, default=1200.0)
    p.add_argument("--worker", metavar="OUT", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args.worker, args.warmup, args.calls, args.tiny_calls)
        return 0
    med = statistics.median
    ratios, controls, call_cost, anchors, seam, seam_us, walls = [], [], [], [], [], [], {"untraced": [], "traced": []}
    with tempfile.TemporaryDirectory(prefix="txe-torchax-trace-bench-") as tmp:
        for r in range(args.rounds):
            order = ["untraced", "traced", "control"] if r % 2 == 0 else ["untraced", "control", "traced"]
            res = {k: _run("traced" if k == "traced" else "untraced", args, tmp, r * 3 + j) for j, k in enumerate(order)}
            anchor = med(res["untraced"]["calls_ms"])
            ratios.append(med(res["traced"]["calls_ms"]) / anchor)
            controls.append(med(res["control"]["calls_ms"]) / anchor)
            call_cost.append(res["traced"]["tiny_call_us"] - med([res["untraced"]["tiny_call_us"],
                                                                 res["control"]["tiny_call_us"]]))
            anchors.append(anchor)
            s = res["traced"]["seam"]
            seam.append(s["on_ms"] / s["off_ms"])
            seam_us.append(res["traced"]["seam_us"])
            walls["untraced"].append(res["untraced"]["wall_s"])
            walls["traced"].append(res["traced"]["wall_s"])
            print(f"round {r + 1}: call {anchor:.3f} ms untraced, traced/untraced {ratios[-1]:.4f}, "
                  f"control/untraced {controls[-1]:.4f}, {call_cost[-1]:+.1f} us per tiny call, "
                  f"in-process seam/own {seam[-1]:.4f} ({seam_us[-1]:+.1f} us per tiny call), "
                  f"wall {res['untraced']['wall_s']:.1f} s / {res['traced']['wall_s']:.1f} s", flush=True)
    print(f"\nGPT-2 tiny under torchax.compile, {args.calls} timed calls after {args.warmup}, {args.rounds} rounds")
    print(f"per compiled call, traced / untraced: {med(ratios):.4f}x (target <= 1.01x); "
          f"A/A control: {med(controls):.4f}x (this machine's noise)")
    print(f"fixed cost per compiled call: {med(call_cost):+.1f} us "
          f"({med(call_cost) / 1e3 / med(anchors) * 100:+.3f}% of the {med(anchors):.2f} ms call: the per-call "
          "overhead this machine's noise does not hide)")
    print(f"in the traced process, through the trace's seam / torchax's own callable, alternating blocks: "
          f"{med(seam):.4f}x per GPT-2 call; {med(seam_us):+.1f} us per tiny call "
          f"({med(seam_us) / 1e3 / med(anchors) * 100:+.3f}% of the GPT-2 call)")
    print(f"whole run (start to exit, report included): {med(walls['traced']):.1f} s traced, "
          f"{med(walls['untraced']):.1f} s untraced ({med(walls['traced']) / med(walls['untraced']):.3f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
