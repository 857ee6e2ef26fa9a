"""Parity under torchax: what ``verify(..., frontend="torchax")`` costs against the anchor a user
pays anyway, at GPT-2 124M (transformers' GPT2LMHeadModel with its default config, random init,
returning tuples: torchax.compile returns no ModelOutput).

    anchor = torchax's run of the model (``torchax.compile``'s first call: trace, compile, execute,
             copy back) + one CPU eager run
    ratio  = verify(model, (ids,), frontend="torchax") / anchor          (target: <= 2)

Each measurement in its own fresh process (JAX's and torch's caches start empty), in the order
anchor, verify; both import torchax (and with it JAX) and make its default environment before their
clock starts. Timings on a shared machine drift with the others' load: the ratio, taken in the
same run, is the figure. Printed as JSON lines.

    PYTHONPATH=. .venv/bin/python bench/torchax_parity_bench.py [--layers 12] [--seq 128] [--dtype fp32]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time


def _model(layers: int, seq: int):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=layers, use_cache=False, return_dict=False)).eval()
    ids = torch.randint(0, model.config.vocab_size, (1, seq))
    return model, ids


def _anchor(layers: int, seq: int, dtype: str) -> dict:
    import torch
    import torchax

    model, ids = _model(layers, seq)
    if dtype == "bf16":
        model = model.to(torch.bfloat16)
    t0 = time.perf_counter()
    with torch.no_grad():
        model(ids)
    cpu = time.perf_counter() - t0
    env = torchax.default_env()
    t0 = time.perf_counter()
    with env, torch.no_grad():
        jax_model = model.to("jax")
        fast = torchax.compile(jax_model)
        out = fast(ids.to("jax"))
        out[0].torch()
    run = time.perf_counter() - t0
    return {"cpu eager": cpu, "torchax run": run, "anchor": cpu + run}


def _verify(layers: int, seq: int, dtype: str) -> dict:
    import torchax

    from torch_xla_ext import parity

    model, ids = _model(layers, seq)
    torchax.default_env()  # made before the clock, as the anchor's is (its PRNG key is JAX's first computation)
    t0 = time.perf_counter()
    r = parity.verify(model, (ids,), dtype=dtype, frontend="torchax")
    total = time.perf_counter() - t0
    return {"verify": total, "verdict": r.verdict.value, "causes": r.causes, "emulation": r.emulation,
            "how": next((n for n in r.explanation.split(". ") if "eager run" in n), None),
            "seconds": {k: round(v, 2) for k, v in r.seconds.items()}}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--dtype", default="fp32")
    p.add_argument("--worker", choices=("anchor", "verify"))
    p.add_argument("--timeout", type=int, default=1800)
    a = p.parse_args()
    if a.worker:
        out = (_anchor if a.worker == "anchor" else _verify)(a.layers, a.seq, a.dtype)
        print("RESULT " + json.dumps(out, default=str), flush=True)
        return
    results = {}
    for worker in ("anchor", "verify"):
        done = subprocess.run([sys.executable, __file__, "--worker", worker, "--layers", str(a.layers), "--seq",
                               str(a.seq), "--dtype", a.dtype], capture_output=True, text=True, timeout=a.timeout)
        line = next((l for l in done.stdout.splitlines() if l.startswith("RESULT ")), None)
        if line is None:
            raise SystemExit(f"{worker} failed:\n{done.stderr[-3000:]}")
        results[worker] = json.loads(line.removeprefix("RESULT "))
        print(json.dumps({worker: results[worker]}), flush=True)
    ratio = results["verify"]["verify"] / results["anchor"]["anchor"]
    print(json.dumps({"layers": a.layers, "seq": a.seq, "dtype": a.dtype, "ratio": round(ratio, 2)}), flush=True)


if __name__ == "__main__":
    main()
