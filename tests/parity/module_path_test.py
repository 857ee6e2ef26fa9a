"""Model Explorer nodes carry the module path of their op.

With ``XLA_HLO_DEBUG=1`` from the start of the process, parity's XLA run labels each op with the
``named_modules()`` path of the innermost module whose forward produced it. Oracles: the model's
own ``named_modules()`` (every path is one), and the dataflow of the program itself: a dot or
convolution that reads a module's own weight (an HLO parameter holding exactly that tensor, through
layout-only ops) must be attributed to that module. Model Explorer (the real server) must show the
path as the node's attribute and namespace.
"""

from __future__ import annotations

import os

os.environ["XLA_HLO_DEBUG"] = "1"  # before torch_xla lowers anything: it reads it once
OWN_PROCESS = "XLA_HLO_DEBUG must be set before torch_xla first lowers a graph, and it stays on"

import json  # noqa: E402
import re  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from torch_xla_ext.parity import explorer  # noqa: E402
from torch_xla_ext.parity.casts import to_numpy, torch_dtype  # noqa: E402
from torch_xla_ext.parity.stages.xla_run import run_xla  # noqa: E402

from tests.parity.model_explorer_test import Block, check_opens, convert, server  # noqa: E402,F401  (server: the fixture)

from tests import zoo  # noqa: E402

# Ops that only move or re-type a weight between its parameter and the op that reads it.
_LAYOUT = ("stablehlo.transpose", "stablehlo.reshape", "stablehlo.convert", "stablehlo.broadcast_in_dim",
           "stablehlo.copy")
_READERS = ("stablehlo.dot_general", "stablehlo.dot", "stablehlo.convolution")


def _weight_readers(model, run):
    """(HLO instruction, the module whose own weight it reads) for each dot/convolution of main
    that reads an HLO parameter equal, bit for bit, to exactly one module's ``weight``."""
    from jax.extend.mlir import ir

    from torch_xla_ext.parity.program.stablehlo import Program, location_name, functions, parse

    cast = torch_dtype("bf16")
    owners = {}
    for i, arg in enumerate(run.program.args):
        hits = [path for path, m in model.named_modules()
                if isinstance(getattr(m, "weight", None), torch.nn.Parameter) and m.weight.dim() >= 2
                and tuple(m.weight.shape) == arg.shape
                and np.array_equal(to_numpy(m.weight.detach().to(cast)).view(np.uint16), arg.view(np.uint16))]
        if len(hits) == 1:
            owners[i] = hits[0]
    program = Program.from_hlo_proto(run.program.proto)
    ctx, module = parse(program.text, "the program")
    out = []
    with ctx:
        (main,) = [f for f in functions(module) if ir.StringAttr(f.attributes["sym_name"]).value == "main"]
        source = {}  # value -> parameter index, through layout-only ops
        for i, arg in enumerate(main.regions[0].blocks[0].arguments):
            source[arg] = i
        for op in main.regions[0].blocks[0].operations:
            op = op.operation
            if op.name in _LAYOUT and len(op.operands) == 1 and op.operands[0] in source:
                source[op.results[0]] = source[op.operands[0]]
            if op.name in _READERS:
                for v in op.operands:
                    if source.get(v) in owners:
                        out.append((location_name(op.location), owners[source[v]]))
    return out


def _namespace_pattern(path: str) -> str:
    """The namespace the adapter makes of ``path`` (a segment may get a "_<k>" suffix of its own)."""
    ns = "/".join(re.escape(seg) + r"(_\d+)?" for seg in path.split(".")) if path else ""
    return ns + r"(/?\([^/()]+\))?"  # an op with regions sits in a group of its own, "(stablehlo.reduce_12)"


def _called(model) -> set[str]:
    """The ``named_modules()`` paths whose forward runs (the hooks travel with parity's copy)."""
    seen: set[str] = set()
    for path, m in model.named_modules():
        m.register_forward_pre_hook(lambda _m, _a, path=path: seen.add(path))
    return seen


def _innermost_called(owner: str, called: set[str]) -> str:
    """``owner`` if its forward ran, else its innermost ancestor whose forward ran: the module
    whose forward produced an op that reads ``owner``'s weight (nn.MultiheadAttention reads its
    ``out_proj.weight`` without calling ``out_proj``)."""
    parts = owner.split(".")
    for k in range(len(parts), 0, -1):
        if ".".join(parts[:k]) in called:
            return ".".join(parts[:k])
    return ""


@pytest.mark.parametrize("name", zoo.NAMES)
def test_ops_carry_the_module_that_produced_them(name, server, tmp_path):
    model, args, kwargs = zoo.build(name)
    called = _called(model)
    run = run_xla(model, args, kwargs, torch_dtype("bf16"), 0, True)
    paths = run.module_paths
    assert paths, "no op carries a module path with XLA_HLO_DEBUG=1"
    real = {p for p, _ in model.named_modules()}
    assert set(paths.values()) <= real, sorted(set(paths.values()) - real)[:5]
    assert len({p for p in paths.values() if p}) >= 3  # more than the root: the model's layers
    readers = _weight_readers(model, run)
    assert readers, f"{name}: no dot/convolution reads a module's own weight"
    assert called, "the forward hooks did not run"
    wrong = [(instr, owner, paths.get(instr)) for instr, owner in readers
             if paths.get(instr) != _innermost_called(owner, called)]
    assert not wrong, f"{name}: {len(wrong)}/{len(readers)} weight readers attributed elsewhere: {wrong[:5]}"
    # The program with the paths opens in Model Explorer, each path a node attribute and namespace.
    from torch_xla_ext.parity.program.stablehlo import Program

    path = tmp_path / "program.mlir"
    path.write_text(explorer.explorer_module_text(Program.from_hlo_proto(run.program.proto).text, paths))
    answer = convert(server, str(path))
    assert "error" not in answer, answer.get("error")
    shown = 0
    for g in answer["graphCollections"][0]["graphs"]:
        for node in g["nodes"]:
            attrs = {a["key"]: a["value"].strip('"') for a in node["attrs"]}
            if "module.path" in attrs:
                assert attrs["module.path"] == paths[attrs["hlo.instruction"]]
                assert re.fullmatch(_namespace_pattern(attrs["module.path"]), node["namespace"]), (
                    node["id"], node["label"], attrs["module.path"], node["namespace"])
                shown += 1
    assert shown >= len(readers)
    print(f"{name}: {len(paths)} instructions with a module path, {len(readers)} weight readers all attributed")


def test_model_explorer_shows_the_module_path(server, tmp_path):
    from torch_xla_ext import parity

    torch.manual_seed(0)
    model = Block()
    out = str(tmp_path / "explorer")
    parity.verify(model, (torch.randn(4, 8, 64),), dtype="bf16", explorer_dir=out)
    graph, nodes = check_opens(server, out)
    with open(os.path.join(out, "module_paths.json")) as f:
        table = json.load(f)
    assert table["available"] and table["paths"]
    real = {p for p, _ in model.named_modules()}
    for node_id, path in table["paths"].items():
        assert path in real
        attrs = {a["key"]: a["value"] for a in nodes[node_id]["attrs"]}
        assert attrs.get("module.path", "").strip('"') == path, (node_id, attrs)
        # The adapter made the path the node's namespace: Model Explorer groups the ops by layer.
        assert re.fullmatch(_namespace_pattern(path), nodes[node_id]["namespace"]), (node_id, path, nodes[node_id])
    # The exact GELU's erf is computed by the GELU module.
    erf = [i for i, n in nodes.items() if n["label"] == "chlo.erf"]
    assert erf and all(table["paths"].get(i) == "act" for i in erf)
    covered = sum(k in table["paths"] for k in graph["results"])
    print(f"{covered}/{len(graph['results'])} node-data nodes carry a module path")
    # Every op of the block is made inside some module's forward (the block's own: "", e.g. the
    # residual add that torch_xla builds under its own IR scope).
    assert covered == len(graph["results"])
    adds = [i for i, n in nodes.items() if n["label"] == "stablehlo.add" and i in table["paths"]]
    assert table["paths"][max(adds, key=int)] == ""  # the last add is the residual, in forward()
