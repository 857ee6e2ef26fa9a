"""Parity benchmark: what a verdict costs on the pytorch/xla#8747 stack (scan over 4 patched
nn.Linear(128, 128), input (3, 4, 5, 128), bf16).

Anchor: one XLA run of the stack (after a warm-up, so the compiled program is cached), measured
in the same run. Also timed: the C++ HLO parse (cc/parity) of that run's HLO, the
rounding-emulated replay (numpy), the exact fp64 replay, and the whole verify(). Best of
--repeat; prints times and ratios to the anchor.

    PYTHONPATH=. PJRT_DEVICE=CPU .venv/bin/python bench/parity_bench.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import time


def _best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault("PJRT_DEVICE", "CPU")

    import torch
    import torch_xla

    from torch_xla_ext import parity
    from torch_xla_ext._compat import hlo as _hlo
    from torch_xla_ext._compat.scan import scan_layers

    layers, reference, x = parity.scan_patched_linear_example("bf16")
    device = torch_xla.device()
    xla_layers = [l.to(torch.bfloat16).to(device) for l in layers]
    xx = x.bfloat16().to(device)

    def xla_run():
        y = scan_layers(xla_layers, xx)
        torch_xla.sync()
        return y.cpu()

    xla_run()  # compile once
    anchor = _best(xla_run, args.repeat)

    y = scan_layers(xla_layers, xx)
    text = _hlo.lowered_hlo_text([y])
    graph_args = [parity._to_numpy(a.cpu()) for a in _hlo.graph_inputs([y])]
    torch_xla.sync()

    ScannedStack, LoopStack = parity._stack_modules()
    rows = [
        ("XLA run of the stack (anchor)", anchor),
        (f"parse_hlo_text, C++ ({len(text)} chars of HLO)", _best(lambda: parity._core.parse_hlo_text(text), args.repeat)),
        ("parse_hlo_text incl. Python graph objects", _best(lambda: parity.parse_hlo_text(text), args.repeat)),
        ("rounding_points", _best(lambda: parity.rounding_points(text), args.repeat)),
        ("emulate_hlo, rounded (numpy)", _best(lambda: parity.emulate_hlo(text, graph_args), args.repeat)),
        ("emulate_hlo, exact fp64 (numpy)", _best(lambda: parity.emulate_hlo(text, graph_args, exact=True), args.repeat)),
        ("verify() end to end", _best(lambda: parity.verify(ScannedStack(layers), (x,), dtype="bf16",
                                                              reference=LoopStack(reference)), max(1, args.repeat // 2))),
    ]
    print(f"parity bench, #8747 stack, bf16, best of {args.repeat}")
    for name, t in rows:
        print(f"{name:52s} {t * 1e3:9.3f} ms   {t / anchor:8.3f}x anchor")


if __name__ == "__main__":
    main()
