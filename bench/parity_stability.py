"""The stability sweep: parity.verify on every zoo model in fp32 and bf16, once per way XLA may
sum (its default; Eigen on one thread; other intra-op thread counts), each configuration in a
fresh process (XLA reads XLA_FLAGS and PJRT_NPROC when its clients start). It prints, per model
and dtype, the verdict and causes in each configuration, whether XLA stayed within the rounded
replay's bound, and how many elements were bit-equal to the replay (a figure that may move),
then whether every verdict and cause held. tests/parity/stability_test.py runs three models of
it in CI; this is the whole zoo. A benchmark: nothing is asserted, the exit code says.

    PYTHONPATH=. PJRT_DEVICE=CPU .venv/bin/python bench/parity_stability.py [--models resnet18,gpt2]
        [--dtypes fp32,bf16] [--json stability.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WORKER = os.path.join(ROOT, "tests", "parity", "stability_worker.py")
CONFIGS = {
    "default": {},
    "eigen 1 thread": {"XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false"},
    "PJRT_NPROC=1": {"PJRT_NPROC": "1"},
    "PJRT_NPROC=8": {"PJRT_NPROC": "8"},
}


def sweep(models: list[str], dtypes: list[str], extra: dict, timeout: float) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "PJRT_NPROC", "NPROC")}
    env.update(PJRT_DEVICE="CPU", PYTHONPATH=ROOT, **extra)
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out.json")
        done = subprocess.run([sys.executable, WORKER, out, ",".join(models), ",".join(dtypes)], env=env,
                              capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise SystemExit(f"worker failed ({extra}):\n{done.stderr[-4000:]}")
        with open(out) as f:
            return json.load(f)


def main() -> int:
    sys.path.insert(0, ROOT)
    from tests import zoo

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(zoo.NAMES))
    p.add_argument("--dtypes", default="fp32,bf16")
    p.add_argument("--json", help="also write every record as JSON")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per configuration")
    a = p.parse_args()
    models, dtypes = a.models.split(","), a.dtypes.split(",")
    results = {}
    for name, extra in CONFIGS.items():
        print(f"[stability] {name} ...", file=sys.stderr, flush=True)
        results[name] = sweep(models, dtypes, extra, a.timeout)
    base = results["default"]
    from tests.parity.stability_worker import held

    stable = True
    print(f"{'model':13s} {'dtype':5s} {'config':15s} {'verdict':8s} {'within bound':12s} {'bit-equal':>15s} "
          f"{'dist/bound':>10s}  causes")
    for k, ref in enumerate(base):
        for name, rows in results.items():
            r = rows[k]
            ok, note = held(ref, r)
            stable &= ok and bool(r["reproduced"])
            causes = ", ".join(sorted({str(c) for c in r["causes"].values()}))
            print(f"{r['model']:13s} {r['dtype']:5s} {name:15s} {r['verdict']:8s} {str(r['reproduced']):12s} "
                  f"{r['bit_equal']:>7d}/{r['elements']:<7d} {r['distance_over_bound']:10.3g}  {causes}"
                  + ("" if ok and not note else f"   <- {note}" if ok else f"   <- CHANGED: {note}"))
    print(f"every cause held in every configuration, every verdict too except where all its differences are "
          f"rounding: {'yes' if stable else 'NO'}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0 if stable else 1


if __name__ == "__main__":
    sys.exit(main())
