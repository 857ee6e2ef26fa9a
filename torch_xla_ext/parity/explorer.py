"""The per-op error of the XLA run's program as Model Explorer node data.

Writes, into one directory, the program as StableHLO text (``program.mlir``, with each op's HLO
instruction name as its location) and ``node_data.json`` in the format of Model Explorer's
``node_data_builder`` (``{graph id: {"results": {node id: {"value": v}}, "gradient": [...]}}``).
Each value is an op's greatest |rounded - exact| over its result divided by the exact result's
greatest magnitude: how far the program as XLA:CPU rounds it has drifted from its exact fp64
math at that op. Node ids follow Model Explorer's MLIR adapter (a counter over each function's
ops in pre-order, nested regions after their op, terminators included); the values cover main's
top-level ops. Load both in Model Explorer (``model-explorer program.mlir --node_data_paths
node_data.json``) to see where in the graph the error appears.

Example:
    >>> write_model_explorer(program, graph_args, "explorer/")  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
from typing import Any, Sequence

import numpy as np

from torch_xla_ext.parity.errors import ParityError, ParityTypeError
from torch_xla_ext.parity.replays import Replay
from torch_xla_ext.parity.stablehlo import Program, functions, parse

__all__ = ["node_ids", "write_model_explorer"]

PROGRAM_FILE = "program.mlir"
NODE_DATA_FILE = "node_data.json"
# Model Explorer's gradient: white (no drift) to red (the largest drift in the program).
_GRADIENT = [{"stop": 0, "bgColor": "#ffffff"}, {"stop": 0.5, "bgColor": "#fdd0a2"}, {"stop": 1, "bgColor": "#d94801"}]


def node_ids(text: str) -> dict[str, list[str]]:
    """Per function, the Model Explorer node id of each top-level op (in order).

    Example:
        >>> node_ids(open("explorer/program.mlir").read())["main"][:3]  # doctest: +SKIP
        ['0', '1', '2']
    """
    from jax.extend.mlir import ir

    ctx, module = parse(text, "the program")
    out: dict[str, list[str]] = {}
    with ctx:
        for f in functions(module):
            counter = [0]
            top: list[str] = []

            def visit(op: Any, record: bool) -> None:
                node = str(counter[0])
                counter[0] += 1
                if record:
                    top.append(node)
                for region in op.regions:
                    for blk in region.blocks:
                        for inner in blk.operations:
                            visit(inner.operation, False)

            for op in f.regions[0].blocks[0].operations:
                visit(op.operation, True)
            out[ir.StringAttr(f.attributes["sym_name"]).value] = top
    return out


def write_model_explorer(program: Program, graph_args: Sequence[Any], directory: str) -> dict[str, str]:
    """Runs the rounded and exact replays of ``program`` with every top-level value of main as an
    output and writes ``program.mlir`` and ``node_data.json`` to ``directory``; returns their paths.

    Example:
        >>> write_model_explorer(Program.from_hlo_proto(proto), args, "explorer")  # doctest: +SKIP
    """
    if not isinstance(program, Program):
        raise ParityTypeError(f"program: expected a parity Program, got {type(program).__name__}")
    if not isinstance(directory, str) or not directory:
        raise ParityError(f"directory: expected a directory path, got {directory!r}")
    rounded = Replay(program, rounded=True, intermediates=True)
    exact = Replay(program, rounded=False, intermediates=True)
    r_out, e_out = rounded(graph_args), exact(graph_args)
    first = rounded.num_results
    ids = node_ids(program.text)["main"]
    results, names = {}, {}
    for k, (name, index) in enumerate(rounded.intermediates):
        r = np.asarray(r_out[first + k], dtype=np.float64)
        e = np.asarray(e_out[first + k], dtype=np.float64)
        finite = np.isfinite(e) & np.isfinite(r)
        if not finite.any():
            continue
        scale = float(np.abs(e[finite]).max())
        drift = float(np.abs(r[finite] - e[finite]).max()) / scale if scale > 0 else 0.0
        results[ids[index]] = {"value": drift}
        names[ids[index]] = name
    os.makedirs(directory, exist_ok=True)
    program_path = os.path.join(directory, PROGRAM_FILE)
    with open(program_path, "w") as f:
        f.write(program.text)
    data_path = os.path.join(directory, NODE_DATA_FILE)
    with open(data_path, "w") as f:
        json.dump({"main": {"results": results, "gradient": _GRADIENT}}, f, indent=1)
    with open(os.path.join(directory, "node_names.json"), "w") as f:
        json.dump(names, f, indent=1)  # node id -> HLO instruction, for reading node_data.json by hand
    return {"program": program_path, "node_data": data_path}
