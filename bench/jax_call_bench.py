"""torch_xla_ext.jax_call.call_jax against torch_xla 2.9's xla_builder.call_jax, in one process.

torch_xla's call_jax imports torchax, which imports flax; to measure it without installing flax,
this script puts a minimal stand-in `flax` package (only the module names torchax imports, which
it does not call on this path) in a temporary directory on sys.path, for this process only.

Prints: cached-call latency (recording the call in the lazy graph, no execution), HLO parameter
counts (of the JAX computation and of the whole lazy graph) and step time (call + sync) for a
function of 64 arguments that uses 4, and ratios theirs/ours (> 1 means ours is faster/smaller).

Run: PJRT_DEVICE=CPU .venv/bin/python bench/jax_call_bench.py
"""

from __future__ import annotations

import os
import re
import statistics
import sys
import tempfile
import time

os.environ.setdefault("PJRT_DEVICE", "CPU")


def _stand_in_flax() -> str:
    root = tempfile.mkdtemp(prefix="txe_bench_flax_")
    os.makedirs(os.path.join(root, "flax", "training"))
    for rel in ("flax/__init__.py", "flax/training/__init__.py"):
        open(os.path.join(root, rel), "w").close()
    with open(os.path.join(root, "flax", "training", "checkpoints.py"), "w") as f:
        f.write("def __getattr__(name):\n    raise NotImplementedError('stand-in flax for the bench')\n")
    return root


sys.path.insert(0, _stand_in_flax())
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import jax.numpy as jnp  # noqa: E402
import torch  # noqa: E402
import torch_xla  # noqa: E402
import torch_xla.core.xla_builder as xb  # noqa: E402

from torch_xla_ext import jax_call  # noqa: E402

REPEATS = 7


def timed(fn, n: int) -> float:
    """Median over REPEATS of the mean seconds per call of `n` calls."""
    samples = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter() - t0) / n)
    return statistics.median(samples)


def graph_params(tensors) -> int:
    hlo = torch_xla._XLAC._get_xla_tensors_hlo(list(tensors))
    entry = hlo[hlo.index("ENTRY"):]
    return len(re.findall(r"\bparameter\(\d+\)", entry))


def their_computation_params(fn) -> int:
    """Parameters of the computation torch_xla's call_jax cached for `fn` (read from its cache)."""
    for key, callable_ in xb._JAX_TO_XLA_COMPUTATION_CACHE.items():
        if key[0] != id(fn):
            continue
        for flat in callable_._cache.values():
            cells = {name: cell.cell_contents for name, cell in zip(flat.__code__.co_freevars, flat.__closure__)}
            hlo = xb.get_computation_hlo(cells["computation"])
            return len(re.findall(r"\bparameter\(\d+\)", hlo[hlo.index("ENTRY"):]))
    raise LookupError("torch_xla's call_jax cache has no entry for the function")


def small(a, b, unused):
    return jnp.sin(a) * b


def wide(*xs):
    return xs[3] * xs[17] + xs[40] - xs[63]


def main() -> None:
    theirs_call = xb.call_jax
    ours_call = jax_call.call_jax
    a = torch.randn(128, 128).to("xla")
    b = torch.randn(128, 128).to("xla")
    u = torch.randn(1024).to("xla")

    # Warm both caches, and check both give the same result.
    t_out = theirs_call(small, (a, b, u))
    o_out = ours_call(small, (a, b, u))
    torch_xla.sync()
    assert torch.equal(t_out.cpu(), o_out.cpu()), "results differ"

    n = 2000
    t_lat = timed(lambda: theirs_call(small, (a, b, u)), n)
    o_lat = timed(lambda: ours_call(small, (a, b, u)), n)
    torch_xla.sync()
    print(f"cached call latency (3 args, 1 unused): theirs {t_lat * 1e6:.1f} us, ours {o_lat * 1e6:.1f} us, "
          f"ratio theirs/ours {t_lat / o_lat:.2f}x")

    xs = tuple(torch.randn(256, 256).to("xla") for _ in range(64))
    torch_xla.sync()
    t_out = theirs_call(wide, xs)
    o_out = ours_call(wide, xs)
    t_graph, o_graph = graph_params([t_out]), graph_params([o_out])
    torch_xla.sync()
    assert torch.equal(t_out.cpu(), o_out.cpu()), "results differ"
    m = jax_call.explain(wide, xs)
    t_comp = their_computation_params(wide)
    print(f"HLO parameters, 64 args / 4 used: computation theirs {t_comp}, ours {m.num_hlo_params}; "
          f"lazy graph theirs {t_graph}, ours {o_graph}; ratio theirs/ours {t_graph / o_graph:.1f}x")

    def step(call):
        out = call(wide, xs)
        torch_xla.sync()
        return out

    for call in (theirs_call, ours_call):  # compile the step graphs
        step(call).cpu()
    steps = 200
    t_step = timed(lambda: step(theirs_call), steps)
    o_step = timed(lambda: step(ours_call), steps)
    print(f"step time (call + sync), 64 args / 4 used: theirs {t_step * 1e6:.1f} us, ours {o_step * 1e6:.1f} us, "
          f"ratio theirs/ours {t_step / o_step:.2f}x")
    print(f"target: cached call no slower ({'met' if o_lat <= t_lat else 'NOT met'}), fewer parameters "
          f"({'met' if o_graph < t_graph else 'NOT met'})")


if __name__ == "__main__":
    main()
