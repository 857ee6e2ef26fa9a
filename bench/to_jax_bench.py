"""to_jax at real sizes: GPT-2 124M (random init, ~500 MB of float32 weights) through
``to_jax`` + ``JaxExport.save`` + ``load_jax`` + ``call``, in a fresh process whose peak RSS
(``resource.getrusage``) is compared with the budget 3 x float32 weights + 2 GiB.
Anchor, measured in the same run: ``export.run`` of the same bundle in its own fresh process (load +
compile + run), so the figures read as ratios to what running the bundle costs anyway.
A third fresh process measures ``inline_constants(weights=True)`` + ``Bundle.save`` + ``load`` +
``run`` against the same budget (the inlined weights stay arrays: ``dense_resource`` constants);
``--no-inline`` skips it.

The bundle is made once in a first process (torch + torch_xla export; its memory is not counted).
Check ``free -g`` first: the export process needs ~4 GB, the measured ones ~2-3 GB.

Run: PYTHONPATH=. .venv/bin/python bench/to_jax_bench.py [--layers 12] [--width 768] [--keep DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

SEQ = 32
TIMEOUT_S = 1800


def _peak_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


@contextlib.contextmanager
def _timed(times: dict, key: str):
    """Wall seconds of the block, as ``times[key]``."""
    t0 = time.perf_counter()
    yield
    times[key] = time.perf_counter() - t0


def make(bundle_dir: str, layers: int, width: int) -> dict:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from torch_xla_ext import export

    torch.manual_seed(0)
    config = GPT2Config(n_layer=layers, n_embd=width, n_head=max(1, width // 64), use_cache=False,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, config.vocab_size, (1, SEQ))
    t0 = time.perf_counter()
    bundle = export.export(model, (ids,))
    bundle.save(bundle_dir)
    import numpy as np

    np.save(os.path.join(bundle_dir, "ids.npy"), ids.numpy())
    return {"export_and_save_s": time.perf_counter() - t0,
            "params": sum(p.numel() for p in model.parameters()),
            "weight_bytes": sum(a.nbytes for a in bundle.arrays.values())}


def anchor(bundle_dir: str) -> dict:
    import numpy as np

    from torch_xla_ext import export

    ids = np.load(os.path.join(bundle_dir, "ids.npy"))
    t0 = time.perf_counter()
    (logits,) = export.run(bundle_dir, ids)
    seconds = time.perf_counter() - t0
    np.save(os.path.join(bundle_dir, "run_logits.npy"), logits)
    return {"run_s": seconds, "peak_rss": _peak_bytes()}


def measure(bundle_dir: str, out_dir: str) -> dict:
    import numpy as np

    from torch_xla_ext import export

    ids = np.load(os.path.join(bundle_dir, "ids.npy"))
    times = {}
    with _timed(times, "load_bundle_s"):
        bundle = export.load(bundle_dir)
    with _timed(times, "to_jax_s"):
        exp = export.to_jax(bundle)
    module_bytes = len(exp.exported.mlir_module_serialized)
    with _timed(times, "save_s"):
        exp.save(out_dir)
    del exp, bundle
    with _timed(times, "load_jax_s"):
        again = export.load_jax(out_dir)
    import jax

    with _timed(times, "call_s"):
        with jax.experimental.enable_x64():  # GPT-2's token ids are int64
            (logits,) = again.call(ids)
            logits = np.asarray(logits)
    want = np.load(os.path.join(bundle_dir, "run_logits.npy"))
    scale = float(np.abs(want).max())
    return {**times, "peak_rss": _peak_bytes(), "module_bytes": module_bytes,
            "saved_bytes": {f: os.path.getsize(os.path.join(out_dir, f)) for f in os.listdir(out_dir)},
            "max_abs_diff_vs_run": float(np.abs(logits - want).max()), "logit_scale": scale}


def inline(bundle_dir: str, out_dir: str) -> dict:
    import numpy as np

    from torch_xla_ext import export

    ids = np.load(os.path.join(bundle_dir, "ids.npy"))
    times = {}
    with _timed(times, "load_bundle_s"):
        bundle = export.load(bundle_dir)
    with _timed(times, "inline_constants_s"):
        lean = export.inline_constants(bundle, weights=True)
    text_bytes = len(lean.module_text)
    with _timed(times, "save_s"):
        lean.save(out_dir)
    del lean, bundle
    with _timed(times, "load_s"):
        again = export.load(out_dir)
    with _timed(times, "run_s"):
        (logits,) = export.run(again, ids)
    want = np.load(os.path.join(bundle_dir, "run_logits.npy"))
    saved = {}
    for root, _, files in os.walk(out_dir):
        for f in files:
            top = os.path.relpath(os.path.join(root, f), out_dir).split(os.sep)[0]
            saved[top] = saved.get(top, 0) + os.path.getsize(os.path.join(root, f))
    return {**times, "peak_rss": _peak_bytes(), "text_bytes": text_bytes, "saved_bytes": saved,
            "max_abs_diff_vs_run": float(np.abs(logits - want).max()),
            "bit_equal_fraction": float(np.mean(logits.view(np.uint32) == want.view(np.uint32)))}


def _child(step: str, *args: str) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--step", step, *args]
    env = dict(os.environ)
    env.setdefault("PJRT_DEVICE", "CPU")  # the export step runs torch_xla; this bench measures the CPU
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{step} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--step", choices=("make", "anchor", "measure", "inline"))
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--width", type=int, default=768)
    p.add_argument("--keep", help="directory for the bundle and the saved JaxExport (default: a temp dir)")
    p.add_argument("--no-inline", action="store_true", help="skip the inline_constants measurement")
    p.add_argument("--no-to-jax", action="store_true", help="skip the to_jax measurement")
    p.add_argument("dirs", nargs="*")
    a = p.parse_args()
    if a.step == "make":
        print(json.dumps(make(a.dirs[0], a.layers, a.width)))
        return
    if a.step == "anchor":
        print(json.dumps(anchor(a.dirs[0])))
        return
    if a.step == "measure":
        print(json.dumps(measure(a.dirs[0], a.dirs[1])))
        return
    if a.step == "inline":
        print(json.dumps(inline(a.dirs[0], a.dirs[1])))
        return
    root = a.keep or tempfile.mkdtemp(prefix="to_jax_bench_")
    bundle_dir, out_dir = os.path.join(root, "bundle"), os.path.join(root, "m.jax")
    made_file = os.path.join(root, "made.json")
    if os.path.exists(made_file):  # --keep DIR of an earlier run: its bundle again
        with open(made_file) as f:
            made = json.load(f)
    else:
        made = _child("make", "--layers", str(a.layers), "--width", str(a.width), bundle_dir)
        with open(made_file, "w") as f:
            json.dump(made, f)
    ran = _child("anchor", bundle_dir)
    w = made["weight_bytes"]
    budget = 3 * w + 2 * 2**30
    print(f"GPT-2 {a.layers} layers x {a.width}: {made['params'] / 1e6:.1f}M parameters, "
          f"{w / 2**20:.0f} MiB of weights (export + save {made['export_and_save_s']:.1f} s)")
    print(f"anchor export.run (load + compile + run): {ran['run_s']:.1f} s, peak RSS {ran['peak_rss'] / 2**30:.2f} GiB")
    over = False
    if not a.no_to_jax:
        got = _child("measure", bundle_dir, out_dir)
        over |= _report("to_jax path", got, ran, w, budget)
        print(f"  serialized module {got['module_bytes'] / 2**10:.0f} KiB (weights not in it); files "
              f"{ {k: round(v / 2**20, 1) for k, v in got['saved_bytes'].items()} } MiB")
        print(f"  logits vs export.run: max |diff| {got['max_abs_diff_vs_run']:.3g} (scale {got['logit_scale']:.3g})")
    if not a.no_inline:
        got = _child("inline", bundle_dir, os.path.join(root, "inlined"))
        over |= _report("inline_constants path", got, ran, w, budget)
        print(f"  module text {got['text_bytes'] / 2**10:.0f} KiB (weights not in it); files "
              f"{ {k: round(v / 2**20, 1) for k, v in got['saved_bytes'].items()} } MiB")
        print(f"  logits vs export.run of the plain bundle: max |diff| {got['max_abs_diff_vs_run']:.3g}, "
              f"bit-equal {got['bit_equal_fraction']:.4f}")
    if over:
        sys.exit(1)


def _report(title: str, got: dict, ran: dict, w: int, budget: int) -> bool:
    print(f"{title}: " + ", ".join(f"{k[:-2]} {v:.1f} s" for k, v in got.items() if k.endswith("_s")))
    total = sum(v for k, v in got.items() if k.endswith("_s"))
    print(f"  total {total:.1f} s = {total / ran['run_s']:.2f} x the anchor")
    print(f"  peak RSS {got['peak_rss'] / 2**30:.2f} GiB = {got['peak_rss'] / w:.2f} x the weights, "
          f"{got['peak_rss'] / ran['peak_rss']:.2f} x the anchor's; budget 3 x weights + 2 GiB = "
          f"{budget / 2**30:.2f} GiB: {'within' if got['peak_rss'] <= budget else 'OVER'}")
    return got["peak_rss"] > budget


if __name__ == "__main__":
    main()
