"""Parity benchmark: what a verdict costs on real models, and how it scales with model size.

Per zoo model (bf16), in a fresh process so torch_xla's compile cache starts empty:
  anchor = the model's first XLA run (trace, compile, execute, copy back) + one CPU eager run,
  then verify() and verify(localize=True) on the same model, as a user who ran it once would.
Printed: each time, the ratios to the anchor (the budget is 10x), the verdict, the cause per
output, whether the rounded replay reproduced XLA, the first divergent module, and the program's
HLO opcodes the former numpy interpreter could not replay (op coverage before; after, the replay
runs every op XLA compiles). Then GPT-2 at growing sizes: the same ratios against model size.

    PYTHONPATH=. PJRT_DEVICE=CPU .venv/bin/python bench/parity_bench.py [--models gpt2,llama] [--sizes 2x64,4x128]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time

# The HLO opcodes the numpy interpreter replaced here replayed (torch_xla_ext/parity.py at commit
# 108b65e, _Interpreter._eval); any other opcode made the rounded replay "unavailable".
OLD_INTERPRETER_OPS = frozenset("""
parameter constant tuple get-tuple-element copy bitcast optimization-barrier all-reduce custom-call convert
reshape broadcast transpose concatenate slice dynamic-slice dynamic-update-slice iota compare select call
while batch-norm-training dot reduce clamp add subtract multiply divide maximum minimum power atan2
remainder and or negate abs exponential log sqrt rsqrt tanh logistic sine cosine floor ceil sign not
exponential-minus-one log-plus-one round-nearest-even cbrt tan erf
""".split())


def _opcodes(hlo_text: str) -> set[str]:
    return set(re.findall(r"=\s+\S+\s+([a-z][a-z0-9-]*)\(", hlo_text))


def _worker(name: str, size: str | None) -> dict:
    import torch
    import torch_xla

    from tests import zoo
    from torch_xla_ext import parity
    from torch_xla_ext._compat import hlo as _hlo
    from torch_xla_ext.parity import casts
    from torch_xla_ext.parity.leaves import float_leaves

    if size:
        from transformers import GPT2Config, GPT2LMHeadModel

        layers, width = (int(v) for v in size.split("x"))
        torch.manual_seed(0)
        config = GPT2Config(n_layer=layers, n_embd=width, n_head=max(2, width // 64), vocab_size=zoo.VOCAB,
                            n_positions=64, use_cache=False, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        model = GPT2LMHeadModel(config).eval()
        g = torch.Generator().manual_seed(1)
        args, kwargs = (torch.randint(0, zoo.VOCAB, (zoo.BATCH, zoo.SEQ), generator=g),), {}
    else:
        model, args, kwargs = zoo.build(name)
    dtype = torch.bfloat16
    device = torch_xla.device()
    # The anchor: a user's first XLA run and one CPU eager run.
    t0 = time.perf_counter()
    with torch.no_grad():
        m = casts.prepare(model, device, dtype)
        out = m(*casts.move(args, device, dtype), **casts.move(kwargs, device, dtype))
        leaves = [t for _, t in float_leaves(out, "model")]
        t1 = time.perf_counter()
        hlo_text = _hlo.lowered_hlo_text(leaves)  # not part of the anchor
        t_hlo = time.perf_counter() - t1
        torch_xla.sync()
        [t.cpu() for t in leaves]
    xla = time.perf_counter() - t0 - t_hlo  # trace + compile + run + copy back
    t0 = time.perf_counter()
    with torch.no_grad():
        casts.prepare(model, "cpu", dtype)(*casts.move(args, "cpu", dtype), **casts.move(kwargs, "cpu", dtype))
    cpu = time.perf_counter() - t0
    t0 = time.perf_counter()
    report = parity.verify(model, args, kwargs, dtype="bf16")
    verify = time.perf_counter() - t0
    t0 = time.perf_counter()
    localized = parity.verify(model, args, kwargs, dtype="bf16", localize=True)
    verify_localize = time.perf_counter() - t0
    ops = _opcodes(hlo_text)
    return {
        "model": name if not size else f"gpt2 {size}",
        "parameters": sum(p.numel() for p in model.parameters()),
        "xla": xla, "cpu": cpu, "verify": verify, "verify_localize": verify_localize,
        "verdict": report.verdict.value, "causes": sorted({o.cause or "bit-identical" for o in report.outputs}),
        "emulation": report.emulation, "hlo_math": report.hlo_math,
        "first_divergent_module": localized.first_divergent_module,
        "ops": sorted(ops), "ops_old_missing": sorted(ops - OLD_INTERPRETER_OPS),
        "seconds": {k: round(v, 3) for k, v in report.seconds.items()},
    }


def _run_worker(name: str, size: str | None) -> dict:
    env = dict(os.environ, PJRT_DEVICE="CPU")
    env["PYTHONPATH"] = os.pathsep.join([os.getcwd(), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, __file__, "--worker", name] + (["--size", size] if size else [])
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"{name} {size or ''}: worker failed\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,mobilenet_v3,vit,gpt2,bert,llama,t5,clip")
    parser.add_argument("--sizes", default="2x64,4x128,8x256", help="GPT-2 layers x width, for scaling")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--size", help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    if args.worker:
        print(json.dumps(_worker(args.worker, args.size)))
        return

    rows = []
    for name in [m for m in args.models.split(",") if m]:
        print(f"[parity bench] {name} ...", file=sys.stderr, flush=True)
        rows.append(_run_worker(name, None))
    print("parity bench: bf16 zoo, anchor = first XLA run (incl. compile) + one CPU eager run, same process")
    print(f"{'model':14s} {'verdict':8s} {'cause':28s} {'replay':8s} {'first divergent':16s} "
          f"{'anchor s':>8s} {'verify s':>8s} {'ratio':>6s} {'+localize':>9s} {'ratio':>6s}")
    for r in rows:
        anchor = r["xla"] + r["cpu"]
        print(f"{r['model']:14s} {r['verdict']:8s} {', '.join(r['causes']):28s} {r['emulation']:8s} "
              f"{str(r['first_divergent_module']):16s} {anchor:8.2f} {r['verify']:8.2f} {r['verify'] / anchor:6.2f} "
              f"{r['verify_localize']:9.2f} {r['verify_localize'] / anchor:6.2f}")
    print()
    print("op coverage of the rounded replay (HLO opcodes in each model's program)")
    for r in rows:
        n, miss = len(r["ops"]), r["ops_old_missing"]
        print(f"{r['model']:14s} {n:3d} opcodes; numpy interpreter: {n - len(miss)}/{n} "
              f"(lacked {', '.join(miss) or 'none'}); XLA-compiled replay: {n}/{n}")
    print()
    print("verify() breakdown (s):")
    for r in rows:
        print(f"{r['model']:14s} " + ", ".join(f"{k} {v:.2f}" for k, v in r["seconds"].items()))
    if args.sizes:
        print()
        print("scaling: GPT-2 (layers x width), bf16; ratios to the anchor measured in the same process")
        print(f"{'size':10s} {'params':>10s} {'anchor s':>8s} {'verify s':>8s} {'ratio':>6s} {'replay compile s':>16s}")
        for size in args.sizes.split(","):
            print(f"[parity bench] gpt2 {size} ...", file=sys.stderr, flush=True)
            r = _run_worker("gpt2", size)
            anchor = r["xla"] + r["cpu"]
            comp = r["seconds"].get("compile rounded replay", 0.0) + r["seconds"].get("compile exact replay", 0.0)
            print(f"{size:10s} {r['parameters']:10d} {anchor:8.2f} {r['verify']:8.2f} {r['verify'] / anchor:6.2f} "
                  f"{comp:16.2f}")


if __name__ == "__main__":
    main()
