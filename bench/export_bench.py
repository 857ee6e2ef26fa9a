"""Cost of the typed manifest: parsing torch_xla's StableHLO with JAX's MLIR bindings, building
main's graph, the C++ collective analysis and assembling the manifest, against torch_xla's own
export time (torch.export.export + exported_program_to_stablehlo), on a 48-layer MLP with an
all-reduce (scale 0.5) after every 8 layers. Target: manifest + analysis <= 10% of the export.

Run: PJRT_DEVICE=CPU .venv/bin/python bench/export_bench.py
"""

from __future__ import annotations

import os
import statistics
import sys
import time

os.environ.setdefault("PJRT_DEVICE", "CPU")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402

from torch_xla_ext import collectives, export  # noqa: E402
from torch_xla_ext._compat import stablehlo as compat  # noqa: E402
from torch_xla_ext._ext import collectives as _core  # noqa: E402

LAYERS, WIDTH, BATCH, REPEATS = 48, 256, 8, 5


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = torch.relu(layer(x))
            if i % 8 == 7:
                x = collectives.all_reduce("sum", x, scale=0.5)
        return x


def _median_seconds(fn, repeats=REPEATS):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    torch.manual_seed(0)
    model, x = MLP(), torch.randn(BATCH, WIDTH)
    ep = torch.export.export(model, (x,))
    compat.export_program(ep)  # warm up torch_xla's tracing caches

    state: dict = {}

    def torch_xla_export():
        state["tx"] = compat.export_program(torch.export.export(model, (x,)))

    t_export = _median_seconds(torch_xla_export)
    tx = state["tx"]
    kinds = {t: "parameter" for t in ep.graph_signature.inputs_to_parameters.values()}

    t_manifest = _median_seconds(lambda: export.bundle.from_torch_xla(tx, kinds, None, []))
    ctx, module = export.graph.parse(tx.text, "bench")
    graph = export.graph.build_graph(ctx, module, "bench")
    declared = [_core.DeclaredInput("constant" if loc.type == "constant" else "parameter" if loc.type == "parameter"
                                    else "user_input") for loc in tx.input_locations]
    t_parse = _median_seconds(lambda: export.graph.parse(tx.text, "bench"))
    t_graph = _median_seconds(lambda: export.graph.build_graph(ctx, module, "bench"))
    t_cc = _median_seconds(lambda: _core.analyze(graph, declared), repeats=50)
    analysis = _core.analyze(graph, declared)

    print(f"model: {LAYERS}-layer MLP, width {WIDTH}, batch {BATCH}; main has {graph.num_args} arguments, "
          f"{len(graph.ops)} top-level ops, {len(analysis.collectives)} all-reduces, "
          f"{len(analysis.token_inputs)} token argument(s)")
    print(f"torch_xla export (torch.export + exported_program_to_stablehlo): {t_export * 1e3:9.2f} ms  (anchor)")
    print(f"manifest + analysis (parse, graph, C++ analysis, manifest):      {t_manifest * 1e3:9.2f} ms")
    print(f"  of which MLIR parse {t_parse * 1e3:.2f} ms, graph walk {t_graph * 1e3:.2f} ms, "
          f"C++ analysis {t_cc * 1e3:.3f} ms")
    print(f"ratio manifest+analysis / torch_xla export: {t_manifest / t_export:.2%}  (target <= 10%)")


if __name__ == "__main__":
    main()
