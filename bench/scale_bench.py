"""Scale benchmark: time and peak RSS of every stage at real model sizes, against torch_xla.

Sizes (random init, nothing downloaded; batch 1 x 128 token ids):
  14M   GPT-2, 2 layers, width 256 (vocab 50257: mostly the embedding)
  124M  GPT-2 (GPT2Config() defaults)
  355M  GPT-2 medium (24 layers, width 1024)
  0.9B  Llama-class: hidden 2048, 16 layers, MLP 5632, vocab 32000, untied (3.3 GiB of f32 weights)

Every (size, stage) runs in a fresh process with a timeout, watched by this process: its RSS is
sampled every 50 ms and the stage is stopped and reported as "out of memory" when it passes the
cap (--cap-gib, and never closer than 4 GiB to the machine's available memory), so a stage that
blows up is a figure, not a dead machine. Stages:

  anchor.export  torch.export + torch_xla's exported_program_to_stablehlo (torch_xla's own export)
  export         torch_xla_ext.export.export                        (ratio to anchor.export)
  save / load    Bundle.save / export.load of that bundle            (ratio to anchor.export)
  to_jax         export.to_jax of the loaded bundle                  (ratio to anchor.export)
  serialize      jax.export.serialize of to_jax's Exported           (ratio to anchor.export)
  anchor.run     the model's first torch_xla run in f32 (move, trace, compile, execute, copy back)
  run            export.run of the loaded bundle (PJRT CPU via jaxlib) (ratio to anchor.run)
  anchor.verify  a bf16 torch_xla run + a bf16 CPU eager run (what verify's budget is stated in)
  verify         parity.verify(model, dtype="bf16")                  (ratio to anchor.verify)
  localize       parity.verify(model, dtype="bf16", localize=True)   (ratio to anchor.verify)

Times are the stage's own wall seconds (imports, model building and the stage's inputs are made
before the clock starts); "peak" is the process's greatest RSS while the stage ran, with the
model in memory. The memory budget column is verify's: 3x the f32 weights + 2 GiB. The scaling
exponent is the least-squares slope of log(time) and log(peak) over log(parameters).
It is a benchmark: nothing is asserted.

    PYTHONPATH=. PJRT_DEVICE=CPU .venv/bin/python bench/scale_bench.py [--sizes 14M,124M,355M,0.9B]
        [--stages export,verify,...] [--json out.json] [--cap-gib 14]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time

SIZES = ("14M", "124M", "355M", "0.9B")
STAGES = ("anchor.export", "export", "save", "load", "to_jax", "serialize", "anchor.run", "run", "anchor.verify",
          "verify", "localize")
ANCHOR = {"export": "anchor.export", "save": "anchor.export", "load": "anchor.export", "to_jax": "anchor.export",
          "serialize": "anchor.export", "run": "anchor.run", "verify": "anchor.verify", "localize": "anchor.verify"}
BATCH, SEQ = 1, 128
# f32 weights per size (GiB), for the default memory cap before the model is built.
WEIGHTS_GIB = {"14M": 0.06, "124M": 0.47, "355M": 1.33, "0.9B": 3.55}
GIB = 2 ** 30


# ---- the worker (one stage in a fresh process) --------------------------------------------------


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _Peak:
    """Greatest RSS of this process between start() and stop(), sampled from a thread (torch's
    and XLA's buffers are invisible to tracemalloc)."""

    def __init__(self):
        self.value, self._on = 0, False
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self):
        while True:
            if self._on:
                self.value = max(self.value, _rss())
            time.sleep(0.02)

    def start(self):
        self.value, self._on = _rss(), True

    def stop(self) -> int:
        self._on = False
        return max(self.value, _rss())


def _model(size: str):
    import torch

    torch.manual_seed(0)
    if size == "0.9B":
        from transformers import LlamaConfig, LlamaForCausalLM

        config = LlamaConfig(hidden_size=2048, num_hidden_layers=16, intermediate_size=5632, vocab_size=32000,
                             num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=2048,
                             tie_word_embeddings=False, use_cache=False)
        model = LlamaForCausalLM(config)
    else:
        from transformers import GPT2Config, GPT2LMHeadModel

        layers, width, heads = {"14M": (2, 256, 4), "124M": (12, 768, 12), "355M": (24, 1024, 16)}[size]
        config = GPT2Config(n_layer=layers, n_embd=width, n_head=heads, use_cache=False, resid_pdrop=0.0,
                            embd_pdrop=0.0, attn_pdrop=0.0)
        model = GPT2LMHeadModel(config)
    model = model.eval()
    ids = torch.randint(0, 1000, (BATCH, SEQ), generator=torch.Generator().manual_seed(1))
    return model, (ids,)


def _worker(size: str, stage: str, workdir: str) -> dict:
    peak = _Peak()
    info: dict = {}
    bundle_dir = os.path.join(workdir, f"bundle-{size}")
    if stage in ("load", "to_jax", "serialize", "run"):  # JAX only, from the saved bundle
        import numpy as np

        from torch_xla_ext import export

        params = json.load(open(os.path.join(workdir, f"params-{size}.json")))["parameters"]
        ids = np.random.default_rng(1).integers(0, 1000, (BATCH, SEQ)).astype(np.int64)
        bundle = export.load(bundle_dir) if stage != "load" else None
        exp = export.to_jax(bundle) if stage == "serialize" else None
        peak.start()
        t0 = time.perf_counter()
        if stage == "load":
            export.load(bundle_dir)
        elif stage == "to_jax":
            export.to_jax(bundle)
        elif stage == "serialize":
            info["bytes"] = len(exp.serialize())
        else:
            export.run(bundle, ids)
        seconds = time.perf_counter() - t0
        return {"seconds": seconds, "peak": peak.stop(), "parameters": params, **info}

    import torch

    model, args = _model(size)
    params = sum(p.numel() for p in model.parameters())
    if stage == "anchor.export":
        with open(os.path.join(workdir, f"params-{size}.json"), "w") as f:
            json.dump({"parameters": params}, f)
    bundle = None
    if stage == "save":
        from torch_xla_ext import export

        bundle = export.export(model, args)
    peak.start()
    t0 = time.perf_counter()
    if stage == "anchor.export":
        from torch_xla_ext._compat import stablehlo as compat

        compat.export_program(torch.export.export(model, args))
    elif stage == "export":
        from torch_xla_ext import export

        export.export(model, args)
    elif stage == "save":
        bundle.save(bundle_dir)
    elif stage == "anchor.run":
        _xla_run(model, args, None)
    elif stage == "anchor.verify":
        t1 = time.perf_counter()
        _xla_run(model, args, torch.bfloat16)
        info["xla"] = time.perf_counter() - t1
        t1 = time.perf_counter()
        from torch_xla_ext.parity import casts

        with torch.no_grad():
            casts.prepare(model, "cpu", torch.bfloat16)(*casts.move(args, "cpu", torch.bfloat16))
        info["cpu"] = time.perf_counter() - t1
    elif stage in ("verify", "localize"):
        from torch_xla_ext import parity

        report = parity.verify(model, args, dtype="bf16", localize=stage == "localize")
        info["verdict"] = report.verdict.value
        info["emulation"] = report.emulation
        info["reproduced"] = report.reproduced
        info["hlo_math"] = report.hlo_math
        info["breakdown"] = {k: round(v, 2) for k, v in report.seconds.items()}
        if stage == "localize":
            info["first_divergent_module"] = report.first_divergent_module
    else:
        raise SystemExit(f"unknown stage {stage}")
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "peak": peak.stop(), "parameters": params,
            "weights_f32": params * 4, **info}


def _xla_run(model, args, dtype) -> None:
    """The user's own first torch_xla run: move, trace, compile, execute, copy back."""
    import torch
    import torch_xla

    from torch_xla_ext.parity import casts
    from torch_xla_ext.parity.leaves import float_leaves

    device = torch_xla.device()
    with torch.no_grad():
        m = casts.prepare(model, device, dtype)
        out = m(*casts.move(args, device, dtype))
        leaves = [t for _, t in float_leaves(out, "model")]
        torch_xla.sync()
        [t.cpu() for t in leaves]


# ---- the driver ---------------------------------------------------------------------------------


def _available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def _proc_rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def _run_stage(size: str, stage: str, workdir: str, timeout: float, cap: int) -> dict:
    env = dict(os.environ, PJRT_DEVICE="CPU")
    env["PYTHONPATH"] = os.pathsep.join([os.getcwd(), env.get("PYTHONPATH", "")])
    out_file = os.path.join(workdir, f"result-{size}-{stage}.json")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", size, stage, workdir, out_file]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    stderr: list[str] = []
    reader = threading.Thread(target=lambda: stderr.extend(proc.stderr), daemon=True)
    reader.start()
    status, greatest = None, 0
    while proc.poll() is None:
        rss = _proc_rss(proc.pid)
        greatest = max(greatest, rss)
        # Our own limit, or the machine's: other processes share it, so stop before it runs out.
        if rss > cap or _available() < 2 * GIB:
            status = f"out of memory (> {min(cap, rss) / GIB:.1f} GiB)"
        elif time.monotonic() - t0 > timeout:
            status = f"timeout ({timeout:.0f} s)"
        if status:
            proc.kill()
            proc.wait()
            break
        time.sleep(0.05)
    reader.join(timeout=5)
    if status:
        return {"status": status, "peak": greatest}
    if proc.returncode != 0 or not os.path.exists(out_file):
        tail = "".join(stderr)[-1500:]
        return {"status": f"failed (exit {proc.returncode})", "error": tail, "peak": greatest}
    with open(out_file) as f:
        result = json.load(f)
    result["status"] = "ok"
    return result


def _slope(xs: list[float], ys: list[float]) -> float | None:
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x > 0 and y and y > 0]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    den = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / den if den else None


def _table(results: dict) -> str:
    lines = []
    for size, stages in results.items():
        params = next((r.get("parameters") for r in stages.values() if r.get("parameters")), None)
        w = (params or 0) * 4
        budget = 3 * w + 2 * GIB
        lines.append(f"{size}: {params or '?'} parameters, f32 weights {w / GIB:.2f} GiB, verify's memory budget "
                     f"(3x weights + 2 GiB) {budget / GIB:.1f} GiB")
        lines.append(f"  {'stage':14s} {'seconds':>8s} {'x anchor':>8s} {'peak GiB':>8s} {'x anchor':>8s} "
                     f"{'x weights':>9s}  note")
        for stage, r in stages.items():
            anchor = stages.get(ANCHOR.get(stage, ""), {})
            if r.get("status") != "ok":
                lines.append(f"  {stage:14s} {'-':>8s} {'':8s} {r.get('peak', 0) / GIB:8.2f} {'':8s} {'':9s}  "
                             f"{r['status']}")
                continue
            a_s = anchor.get("seconds") if anchor.get("status") == "ok" else None
            if stage == "verify" or stage == "localize":
                a_s = (anchor.get("xla", 0) + anchor.get("cpu", 0)) if a_s is not None else None
            a_p = anchor.get("peak") if anchor.get("status") == "ok" else None
            rt = f"{r['seconds'] / a_s:8.2f}" if a_s else f"{'':8s}"
            rp = f"{r['peak'] / a_p:8.2f}" if a_p else f"{'':8s}"
            rw = f"{r['peak'] / w:9.2f}" if w else f"{'':9s}"
            note = ""
            if stage in ("verify", "localize"):
                note = (f"{r.get('verdict')}, replay {r.get('emulation')} bit for bit, "
                        f"{'within' if r.get('reproduced') else 'beyond'} its bound, "
                        f"{'within' if r['peak'] <= budget else 'OVER'} memory budget")
            if stage == "anchor.verify":
                note = f"xla {r.get('xla', 0):.1f} s + cpu {r.get('cpu', 0):.1f} s (verify's time anchor)"
            lines.append(f"  {stage:14s} {r['seconds']:8.2f} {rt} {r['peak'] / GIB:8.2f} {rp} {rw}  {note}")
        for stage in ("verify", "localize"):
            b = stages.get(stage, {}).get("breakdown")
            if b:
                lines.append(f"  {stage} breakdown (s): " + ", ".join(f"{k} {v}" for k, v in b.items()))
    sizes = [s for s in results]
    if len(sizes) >= 2:
        lines.append("")
        lines.append("scaling exponent (log-log slope over parameters; 1.0 = linear in model size)")
        lines.append(f"  {'stage':14s} {'time':>6s} {'peak':>6s}")
        for stage in STAGES:
            rows = [results[s].get(stage, {}) for s in sizes]
            ok = [r for r in rows if r.get("status") == "ok"]
            xs = [r["parameters"] for r in ok]
            ts = _slope(xs, [r["seconds"] for r in ok])
            ps = _slope(xs, [r["peak"] for r in ok])
            if ts is not None:
                lines.append(f"  {stage:14s} {ts:6.2f} {ps:6.2f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="14M,124M", help=f"any of {', '.join(SIZES)} (355M and 0.9B take "
                        "tens of minutes and up to 12 GiB)")
    parser.add_argument("--stages", default=",".join(STAGES))
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per stage")
    parser.add_argument("--cap-gib", type=float, help="RSS cap per stage process (default: 3x the f32 weights + "
                        "3 GiB, at least 6 GiB; never within 4 GiB of the machine's available memory)")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--table", help="print the table of a --json file written before, and exit")
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        size, stage, workdir, out_file = args.worker
        result = _worker(size, stage, workdir)
        with open(out_file, "w") as f:
            json.dump(result, f)
        return
    if args.table:
        with open(args.table) as f:
            print(_table(json.load(f)))
        return
    sizes = [s for s in args.sizes.split(",") if s]
    stages = [s for s in args.stages.split(",") if s]
    for s in sizes:
        if s not in SIZES:
            raise SystemExit(f"--sizes: {s} is not one of {', '.join(SIZES)}")
    for s in stages:
        if s not in STAGES:
            raise SystemExit(f"--stages: {s} is not one of {', '.join(STAGES)}")
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="txe-scale-") as workdir:
        for size in sizes:
            results[size] = {}
            for stage in [s for s in STAGES if s in stages]:
                want = args.cap_gib or max(6.0, 3 * WEIGHTS_GIB[size] + 3)
                cap = min(int(want * GIB), _available() - 4 * GIB)
                print(f"[scale bench] {size} {stage} (cap {cap / GIB:.1f} GiB) ...", file=sys.stderr, flush=True)
                r = _run_stage(size, stage, workdir, args.timeout, cap)
                print(f"[scale bench]   {r['status']}" + (f" {r['seconds']:.1f} s, peak {r['peak'] / GIB:.2f} GiB"
                                                          if r["status"] == "ok" else
                                                          (" " + r.get("error", "")[-300:])), file=sys.stderr,
                      flush=True)
                results[size][stage] = r
                if args.json:  # as it goes: a long run stopped early keeps what it measured
                    with open(args.json, "w") as f:
                        json.dump(results, f, indent=1)
    print(_table(results))


if __name__ == "__main__":
    main()
