"""Long-budget fuzzing of export.load: the property and strategies of
tests/export/bundle_fuzz_test.py (imported from tests/export/bundle_fuzz_strategies.py), run for
many random cases. Each case is a corrupted copy of a valid bundle that must either load (and
then run, or fail to run with RunInputError/BundleError) or raise BundleError /
BundleFileNotFoundError, without unpickling anything.

Prints cases/s, a count of each outcome, and, for a failure, the minimal case hypothesis shrank it
to (add it to the test as an @example). Exit code 1 on a failure.

Run: PJRT_DEVICE=CPU .venv/bin/python bench/export_fuzz.py --examples 5000 [--seed N]
"""

from __future__ import annotations

import argparse
import collections
import faulthandler
import os
import shutil
import sys
import tempfile
import time
import traceback

os.environ.setdefault("PJRT_DEVICE", "CPU")
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)  # the repository root: the package and tests.export

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import seed as hypothesis_seed  # noqa: E402

from tests.export import bundle_fuzz_strategies as S  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=5000, help="number of cases (default 5000)")
    parser.add_argument("--seed", type=int, default=None, help="hypothesis seed (default: random)")
    parser.add_argument("--last-case", default=os.path.join(tempfile.gettempdir(), "txe_export_fuzz_last_case.txt"),
                        help="each case is written here before it runs: after a crash it is the reproducer")
    parser.add_argument("--case-timeout", type=float, default=60.0,
                        help="seconds before a case counts as a hang (dumps stacks and exits)")
    args = parser.parse_args()

    faulthandler.enable()  # a crash in native code prints the Python stacks
    print(f"each case is written to {args.last_case} before it runs (the reproducer after a crash)")
    root = tempfile.mkdtemp(prefix="txe_fuzz_")
    try:
        t0 = time.perf_counter()
        seeds = S.make_seeds(os.path.join(root, "seeds"))
        print(f"seed bundles: {', '.join(S.SEEDS)} ({time.perf_counter() - t0:.1f} s)", flush=True)
        counts: collections.Counter[str] = collections.Counter()
        by_seed: collections.Counter[str] = collections.Counter()
        work = os.path.join(root, "work")
        os.makedirs(work)

        @settings(max_examples=args.examples, deadline=None, database=None, derandomize=False,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
        @given(S.CASES)
        def prop(case):
            seed, mutations = case
            with open(args.last_case, "w") as f:
                f.write(repr(case) + "\n")
            faulthandler.dump_traceback_later(args.case_timeout, exit=True)
            try:
                counts[S.check_case(seeds, seed, mutations, work)] += 1
                by_seed[seed] += 1
            finally:
                faulthandler.cancel_dump_traceback_later()

        if args.seed is not None:
            prop = hypothesis_seed(args.seed)(prop)
        t0 = time.perf_counter()
        failed = None
        try:
            prop()
        except Exception as e:  # noqa: BLE001 - report the shrunk failure, then exit 1
            failed = e
        dt = time.perf_counter() - t0
        n = sum(counts.values())
        print(f"cases: {n} in {dt:.1f} s = {n / dt:.1f} cases/s (seed {args.seed if args.seed is not None else 'random'})")
        print("outcomes:")
        for name, c in counts.most_common():
            print(f"  {name:34s} {c:6d}  {100 * c / max(n, 1):5.1f}%")
        print("cases per seed bundle: " + ", ".join(f"{k} {v}" for k, v in sorted(by_seed.items())))
        print(f"unpickled: {'YES' if os.path.exists(S.MARKER) else 'never'}")
        if failed is not None:
            for e in getattr(failed, "exceptions", [failed]):  # one per distinct failure, each shrunk
                traceback.print_exception(type(e), e, e.__traceback__, limit=-4)
            print(f"FAILURE: {type(failed).__name__}: {failed} (the minimal cases are above, "
                  "under 'Falsifying example')")
            return 1
        return 1 if os.path.exists(S.MARKER) else 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
