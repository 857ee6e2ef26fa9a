"""Comparator benchmark: 2^26 float32 pairs with planted mismatches.

Anchor: torch.testing.assert_close (AssertionError caught), measured in the same run. Each method
runs in its own child process on identical inputs, so its peak-RSS growth over the inputs is its
own extra memory. Prints wall time (best of --repeat) and extra memory, and the ratios.

    PYTHONPATH=. .venv/bin/python bench/numerics_bench.py [--log2n 26] [--repeat 3]   (or: make bench)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

METHODS = ("torch.testing.assert_close", "torch_xla_ext.numerics.compare", "numpy isclose+argmax")


def _inputs(n: int, scenario: str):
    """'planted': equal but for 16 elements (the issue's case); 'noisy': every element moved by
    about an ulp (the comparator's slow path on every element), plus the same 16."""
    import numpy as np

    rng = np.random.default_rng(0)
    expected = rng.standard_normal(n, dtype=np.float32)
    if scenario == "noisy":
        actual = np.nextafter(expected, np.float32(np.inf))
    else:
        actual = expected.copy()
    planted = rng.choice(n, size=16, replace=False)
    actual[planted] += 1.0
    return actual, expected, len(planted)


def _peak_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def _child(method: str, log2n: int, repeat: int, scenario: str) -> dict:
    import numpy as np
    import torch

    actual, expected, planted = _inputs(1 << log2n, scenario)
    ta, te = torch.from_numpy(actual), torch.from_numpy(expected)  # zero-copy views
    if method == METHODS[0]:
        def run():
            try:
                torch.testing.assert_close(ta, te)
            except AssertionError as e:
                return int(str(e).split("Mismatched elements: ")[1].split(" ")[0])
            return 0
    elif method == METHODS[1]:
        from torch_xla_ext import numerics

        def run():
            return numerics.compare(actual, expected).mismatched
    else:
        def run():
            close = np.isclose(actual, expected, rtol=1.3e-6, atol=1e-5)
            diff = np.abs(actual - expected)
            diff[close] = 0
            int(np.argmax(diff))
            return int(close.size - np.count_nonzero(close))

    base = _peak_bytes()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        mismatched = run()
        times.append(time.perf_counter() - t0)
    if mismatched != planted:
        raise SystemExit(f"{method}: found {mismatched} mismatches, planted {planted}")
    return {"method": method, "seconds": min(times), "extra_bytes": _peak_bytes() - base,
            "input_bytes": actual.nbytes + expected.nbytes}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--log2n", type=int, default=26)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--scenario", choices=("planted", "noisy"), action="append")
    p.add_argument("--child", help=argparse.SUPPRESS)
    a = p.parse_args()
    scenarios = a.scenario or ["planted", "noisy"]
    if a.child:
        print(json.dumps(_child(a.child, a.log2n, a.repeat, scenarios[0])))
        return 0
    for scenario in scenarios:
        _report(scenario, a.log2n, a.repeat)
    return 0


def _report(scenario: str, log2n: int, repeat: int) -> None:
    results = {}
    for m in METHODS:
        print(f"[bench] {scenario}: {m} on 2^{log2n} float32 pairs ...", file=sys.stderr, flush=True)
        out = subprocess.run([sys.executable, __file__, "--child", m, "--log2n", str(log2n), "--repeat", str(repeat),
                              "--scenario", scenario],
                             check=True, capture_output=True, text=True, env=dict(os.environ, PJRT_DEVICE="CPU"),
                             timeout=1800)
        results[m] = json.loads(out.stdout.strip().splitlines()[-1])
    anchor = results[METHODS[0]]
    print(f"numerics_bench [{scenario}]: 2^{log2n} float32 pairs, 16 planted mismatches, best of {repeat}, {os.cpu_count()} cores")
    print(f"{'method':34s} {'time s':>8s} {'x anchor':>9s} {'extra MiB':>10s} {'% of input':>11s}")
    for m in METHODS:
        r = results[m]
        print(f"{m:34s} {r['seconds']:8.3f} {r['seconds'] / anchor['seconds']:9.3f} "
              f"{r['extra_bytes'] / 2**20:10.1f} {100 * r['extra_bytes'] / r['input_bytes']:10.2f}%")
    ours = results[METHODS[1]]
    print(f"ratio time(compare)/time(assert_close) = {ours['seconds'] / anchor['seconds']:.3f} (target <= 0.2)")
    print(f"ratio extra_memory(compare)/input_bytes = {ours['extra_bytes'] / ours['input_bytes']:.4f} (target <= 0.05)")
    print()


if __name__ == "__main__":
    sys.exit(main())
