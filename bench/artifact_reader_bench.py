"""What the sandbox around MLIR's bytecode reader costs: ms per StableHLO portable artifact read
through `export.artifact_reader.portable_artifact_to_text` (the reader process: a request and a reply
over pipes, on a big-stack thread there), as a ratio to the anchor measured in the same run, the
same read in this process without a sandbox (`_compat.jax_mlir.portable_artifact_to_text`). The
reader process's start (about 1 s: Python and jaxlib's MLIR) is paid once and printed apart.

Run: .venv/bin/python bench/artifact_reader_bench.py [--ops 200] [--reads 30] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=200, help="stablehlo.add ops in the module")
    parser.add_argument("--reads", type=int, default=30, help="reads per round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    from jax.extend import mlir as jmlir
    from jax.extend.mlir import ir

    from torch_xla_ext._compat import jax_mlir
    from torch_xla_ext.export import artifact_reader as sandboxed

    ty = "tensor<4x4xf32>"
    body = "\n".join(f"  %{i + 1} = stablehlo.add %{i}, %{i} : {ty}" for i in range(args.ops))
    text = (f"func.func @main(%a: {ty}) -> {ty} {{\n  %0 = stablehlo.add %a, %a : {ty}\n{body}\n"
            f"  return %{args.ops} : {ty}\n}}\n")
    with jax_mlir.make_context():
        module = ir.Module.parse(text)
        data = jmlir.serialize_portable_artifact(jax_mlir.module_to_bytecode(module),
                                                 jax_mlir.stablehlo_export_target_version())
    t = time.perf_counter()
    sandboxed.portable_artifact_to_text(data, "bench")
    start_ms = (time.perf_counter() - t) * 1e3

    def per_read(fn) -> float:
        t = time.perf_counter()
        for _ in range(args.reads):
            assert "stablehlo.add" in fn()
        return (time.perf_counter() - t) / args.reads * 1e3

    anchor, sandbox = [], []
    for _ in range(args.rounds):  # interleaved, so both see the same machine load
        anchor.append(per_read(lambda: jax_mlir.portable_artifact_to_text(data)))
        sandbox.append(per_read(lambda: sandboxed.portable_artifact_to_text(data, "bench")))
    a, s = statistics.median(anchor), statistics.median(sandbox)
    print(f"artifact: {len(data)} bytes, {args.ops + 1} ops; reader process start + first read {start_ms:.0f} ms")
    print(f"anchor (in process, no sandbox): {a:.2f} ms/read; reader process: {s:.2f} ms/read; ratio {s / a:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
