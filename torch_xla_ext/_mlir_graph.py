"""The one MLIR -> value-graph walker: a ``func.func`` parsed with JAX's MLIR bindings as the value
graph of cc/graph/graph.h, which both C++ analyses read (export's collectives analysis,
cc/collectives/analysis.h, and parity's rounding points, cc/parity/rounding.h), and the one
converter to the graph those analyses take (:func:`core_graph`, a ``_ext.graph.Graph``).

Ops come in pre-order: an op with regions before the ops of its regions, which name it as
``parent``; its regions' block arguments are values it defines (``region_args``). With
``nested=False`` only the function's top level is walked (every ``parent`` -1, no region
arguments). Values are typed ``(shape, MLIR element type)``: -1 for a dynamic dimension,
``([], "")`` for a non-tensor (a token, a tuple). Imports JAX's MLIR bindings only when walking.

Example:
    >>> from torch_xla_ext.export import graph
    >>> ctx, module = graph.parse('''func.func public @main(%a: tensor<2xf32>, %b: tensor<2xf32>) -> tensor<2xf32> {
    ...   %0 = stablehlo.add %a, %b : tensor<2xf32>
    ...   return %0 : tensor<2xf32>
    ... }''', "example")
    >>> with ctx:
    ...     g = walk(graph.main_func(module, "example"))
    >>> [(o.name, o.operands, o.results) for o in g.graph_ops][:1]
    [('stablehlo.add', [0, 1], [2])]
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np

from torch_xla_ext._compat import jax_mlir
from torch_xla_ext._ext import graph as _core

__all__ = ["COLLECTIVE_OPS", "GraphOp", "ValueGraph", "core_graph", "dot_dimensions", "pre_order", "tensor_type",
           "walk"]

COLLECTIVE_OPS = frozenset(f"stablehlo.{n}" for n in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                                      "collective_permute", "collective_broadcast"))


@dataclasses.dataclass(slots=True)
class GraphOp:
    """One op of cc/graph/graph.h's Graph."""

    name: str
    operands: list[int]
    results: list[int]
    parent: int = -1
    region_args: list[int] = dataclasses.field(default_factory=list)
    reduction: str = ""  # the one op of a single-op reduction body (all_reduce's "stablehlo.add")
    replica_groups: list[list[int]] = dataclasses.field(default_factory=list)
    splat: float | None = None  # a splat stablehlo.constant's value
    attributes: list[tuple[str, str]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class ValueGraph:
    """A function's value graph, with the MLIR objects it came from (aligned by index)."""

    name: str
    values: list[Any]                         # MLIR values by id
    value_types: list[tuple[list[int], str]]  # per value id: (shape, MLIR element type)
    mlir_types: list[Any]                     # per value id: its MLIR type
    num_args: int
    ops: list[Any]                            # MLIR ops, pre-order, without the function's return
    graph_ops: list[GraphOp]                  # aligned with ops
    next_op: list[Any]                        # each op's next sibling in its block (None: the last)
    returned: list[int]                       # operands of the function's return


def tensor_type(t: Any) -> tuple[list[int], str]:
    """(shape, MLIR element type) of a ranked tensor type (-1: dynamic); ([], "") otherwise."""
    return _type_reader()(t)


def _type_reader() -> Any:
    from jax.extend.mlir import ir

    ranked, is_ranked = ir.RankedTensorType, jax_mlir.isa_check(ir.RankedTensorType)

    def read(t: Any) -> tuple[list[int], str]:
        if is_ranked(t):
            rt = ranked(t)
            return [d if d >= 0 else -1 for d in rt.shape], str(rt.element_type)
        return [], ""
    return read


def pre_order(block: Any, nested: bool = True) -> list[tuple[Any, int, Any]]:
    """(op, index of its parent op or -1, its next sibling or None) of every op in ``block``, in
    pre-order (only the block's own ops when not ``nested``)."""
    out: list[tuple[Any, int, Any]] = []
    _pre_order(block, -1, nested, out)
    return out


def _pre_order(block: Any, parent: int, nested: bool, out: list[tuple[Any, int, Any]]) -> None:
    ops = list(block.operations)
    for i, op in enumerate(ops):
        op = op.operation
        out.append((op, parent, ops[i + 1].operation if i + 1 < len(ops) else None))
        me = len(out) - 1
        if nested:
            for region in op.regions:
                for inner in region.blocks:
                    _pre_order(inner, me, nested, out)


def walk(func: Any, *, nested: bool = True, error: type[Exception] = ValueError) -> ValueGraph:
    """The value graph of one ``func.func`` (call inside its MLIR context); ``error`` (naming the
    function) when its return is not its last op or an op reads a value defined outside it."""
    from jax.extend.mlir import ir

    name = ir.StringAttr(func.attributes["sym_name"]).value
    body = func.regions[0].blocks[0]
    ids: dict[Any, int] = {}
    values: list[Any] = []
    types: list[tuple[list[int], str]] = []
    mlir_types: list[Any] = []

    read_type = _type_reader()

    def define(v: Any) -> int:
        ids[v] = len(values)
        values.append(v)
        t = v.type
        mlir_types.append(t)
        types.append(read_type(t))
        return len(values) - 1

    for a in body.arguments:
        define(a)
    num_args = len(values)
    walked = pre_order(body, nested)
    ops, graph_ops, next_op, returned = [], [], [], []
    for w, (op, parent, nxt) in enumerate(walked):
        op_name = op.name
        if op_name == "func.return" and parent == -1:
            if w != len(walked) - 1:
                raise error(f"{name}: func.return is not the function's last op")
            returned = [ids[v] for v in op.operands]
            continue
        regions = op.regions
        region_args = [define(a) for region in regions for blk in region.blocks for a in blk.arguments] \
            if nested else []
        try:
            operands = [ids[v] for v in op.operands]
        except KeyError:
            raise error(f"{name}: {op_name} reads a value defined outside the function") from None
        g = GraphOp(op_name, operands, [define(r) for r in op.results], parent, region_args, "", [], None, [])
        if op_name == "stablehlo.constant":
            attr = ir.DenseElementsAttr(op.attributes["value"])
            if attr.is_splat:
                g.splat = _splat_float(attr)
        elif op_name == "stablehlo.dot_general":
            dims = ir.Attribute(op.attributes["dot_dimension_numbers"])
            g.attributes.append(("batching_dims", str(len(dot_dimensions(dims).get("lhs_batching_dimensions", [])))))
        if op_name in COLLECTIVE_OPS and "replica_groups" in op.attributes:
            arr = np.array(ir.DenseIntElementsAttr(op.attributes["replica_groups"]))
            g.replica_groups = [[int(x) for x in row] for row in arr.reshape(arr.shape[0], -1)] if arr.size else []
        if len(regions) == 1 and op_name.startswith("stablehlo."):
            blocks = regions[0].blocks
            inner = [b.operation.name for b in blocks[0].operations] if len(blocks) else []
            if len(inner) == 2 and inner[1] == "stablehlo.return":
                g.reduction = inner[0]
        ops.append(op)
        graph_ops.append(g)
        next_op.append(nxt)
    return ValueGraph(name, values, types, mlir_types, num_args, ops, graph_ops, next_op, returned)


def core_graph(g: ValueGraph) -> _core.Graph:
    """The graph cc/graph/graph.h holds (what every C++ analysis takes), checked on the way in:
    InvalidArgumentError naming the op when an id is out of range or used before its definition."""
    TensorType, Op = _core.TensorType, _core.Op
    return _core.Graph(
        [TensorType(shape, element_type) for shape, element_type in g.value_types], g.num_args,
        [Op(o.name, o.operands, o.results, parent=o.parent, region_args=o.region_args, reduction=o.reduction,
            replica_groups=o.replica_groups, splat_value=o.splat, attributes=o.attributes) for o in g.graph_ops],
        g.returned)


def _splat_float(attr: Any) -> float | None:
    from jax.extend.mlir import ir

    v = attr.get_splat_value()
    try:
        if jax_mlir.isa(v, ir.FloatAttr):
            return float(ir.FloatAttr(v).value)
        if jax_mlir.isa(v, ir.IntegerAttr):
            return float(ir.IntegerAttr(v).value)
    except (TypeError, ValueError):
        pass
    return None


def dot_dimensions(dims: Any) -> dict[str, list[int]]:
    """The dimension lists of a ``#stablehlo.dot<...>`` attribute by name
    (``lhs_batching_dimensions``, ``rhs_contracting_dimensions``, ...); a list the attribute
    leaves out (no batch dimensions) is missing."""
    return {name: [int(x) for x in inner.split(",") if x.strip()]
            for name, inner in re.findall(r"(\w+) = \[([\d, ]*)\]", str(dims))}
