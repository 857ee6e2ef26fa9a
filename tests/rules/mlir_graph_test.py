"""The one MLIR -> value-graph walker (torch_xla_ext/_mlir_graph.py), which export's collectives
analysis and parity's rounding analysis both read: checked against MLIR's own pre-order walk and
against a hand-written module whose graph is known, through both callers."""

import jax
import jax.numpy as jnp
import pytest
from jax.extend.mlir import ir

from torch_xla_ext import _mlir_graph, _mlir_text
from torch_xla_ext.errors import InvalidArgumentError

# A top-level all-reduce with groups and a splat scale, a while whose body holds another
# all-reduce, a bf16 dot with a batching dimension and a token argument.
HAND = """
module @m {
  func.func public @main(%x: tensor<2x4xf32>, %tok: !stablehlo.token, %b: tensor<3x2x2xbf16>) -> (tensor<2x4xf32>, tensor<3x2x2xbf16>) {
    %r = "stablehlo.all_reduce"(%x) ({
      ^bb0(%a: tensor<f32>, %c: tensor<f32>):
        %s = stablehlo.add %a, %c : tensor<f32>
        stablehlo.return %s : tensor<f32>
    }) {replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<2x4xf32>) -> tensor<2x4xf32>
    %half = stablehlo.constant dense<5.000000e-01> : tensor<2x4xf32>
    %m = stablehlo.multiply %r, %half : tensor<2x4xf32>
    %w:1 = stablehlo.while(%it = %m) : tensor<2x4xf32>
      cond {
        %t = stablehlo.constant dense<true> : tensor<i1>
        stablehlo.return %t : tensor<i1>
      } do {
        %n = "stablehlo.all_reduce"(%it) ({
          ^bb0(%a: tensor<f32>, %c: tensor<f32>):
            %s = stablehlo.maximum %a, %c : tensor<f32>
            stablehlo.return %s : tensor<f32>
        }) {replica_groups = dense<[[0]]> : tensor<1x1xi64>} : (tensor<2x4xf32>) -> tensor<2x4xf32>
        stablehlo.return %n : tensor<2x4xf32>
      }
    %d = stablehlo.dot_general %b, %b, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<3x2x2xbf16>, tensor<3x2x2xbf16>) -> tensor<3x2x2xbf16>
    return %w#0, %d : tensor<2x4xf32>, tensor<3x2x2xbf16>
  }
}
"""


def parse(text):
    return _mlir_text.parse(text, "hand.mlir", error=ValueError)


def main_of(module):
    return next(op.operation for op in module.body.operations
                if ir.StringAttr(op.operation.attributes["sym_name"]).value == "main")


def test_hand_written_module():
    ctx, module = parse(HAND)
    with ctx:
        g = _mlir_graph.walk(main_of(module))
    names = [o.name for o in g.graph_ops]
    assert names == ["stablehlo.all_reduce", "stablehlo.add", "stablehlo.return", "stablehlo.constant",
                     "stablehlo.multiply", "stablehlo.while", "stablehlo.constant", "stablehlo.return",
                     "stablehlo.all_reduce", "stablehlo.maximum", "stablehlo.return", "stablehlo.return",
                     "stablehlo.dot_general"]
    assert [o.parent for o in g.graph_ops] == [-1, 0, 0, -1, -1, -1, 5, 5, 5, 8, 8, 5, -1]
    assert g.num_args == 3 and g.value_types[:3] == [([2, 4], "f32"), ([], ""), ([3, 2, 2], "bf16")]
    ar, const, dot = g.graph_ops[0], g.graph_ops[3], g.graph_ops[12]
    assert ar.operands == [0] and ar.reduction == "stablehlo.add" and ar.replica_groups == [[0, 1]]
    assert len(ar.region_args) == 2 and all(g.value_types[v] == ([], "f32") for v in ar.region_args)
    assert g.graph_ops[8].reduction == "stablehlo.maximum" and g.graph_ops[8].replica_groups == [[0]]
    assert const.splat == 0.5 and dot.attributes == [("batching_dims", "1")]
    assert g.returned == [g.graph_ops[5].results[0], dot.results[0]]
    # the top level alone: the function's own ops, no region values
    with ctx:
        flat = _mlir_graph.walk(main_of(module), nested=False)
    assert [o.name for o in flat.graph_ops] == [n for n, o in zip(names, g.graph_ops) if o.parent == -1]
    assert all(not o.region_args for o in flat.graph_ops)


def test_pre_order_is_mlir_s_own():
    def f(x, w):
        return jax.lax.fori_loop(0, 3, lambda i, c: jnp.tanh(c @ w), x) + jnp.float32(2)

    ctx, module = parse(jax.jit(f).lower(jnp.ones((2, 2)), jnp.ones((2, 2))).as_text())
    with ctx:
        for func in (op.operation for op in module.body.operations):
            seen = []

            def visit(op):
                seen.append(op.name)
                return ir.WalkResult.ADVANCE

            func.walk(visit, ir.WalkOrder.PRE_ORDER)
            g = _mlir_graph.walk(func)
            # MLIR's walk visits the func itself first and includes the function's return
            assert [o.name for o in g.graph_ops] == seen[1:-1] and seen[-1] == "func.return"
            n_values = len(func.regions[0].blocks[0].arguments) + sum(
                len(o.results) + sum(len(b.arguments) for r in o.regions for b in r.blocks) for o in g.ops)
            assert len(g.values) == len(g.value_types) == n_values


def test_both_callers_read_the_walk():
    from torch_xla_ext.export import graph as export_graph
    from torch_xla_ext.parity import stablehlo

    ctx, module = parse(HAND.replace("%tok: !stablehlo.token, ", "").replace("%x, %tok", "%x"))
    with ctx:
        g = _mlir_graph.walk(main_of(module))
        flat = _mlir_graph.walk(main_of(module), nested=False)
        fg = stablehlo.build_graph(main_of(module))
    assert [o.name for o in fg.ops] == [o.name for o in g.graph_ops] and fg.operand_ids == [o.operands for o in g.graph_ops]
    core = export_graph.build_graph(ctx, module, "hand.mlir")  # the one converter's graph (cc/graph)
    assert [o.name for o in core.ops] == [o.name for o in flat.graph_ops] and core.returned == flat.returned
    assert [(v.shape, v.element_type) for v in core.values[:core.num_args]] == [([2, 4], "f32"), ([3, 2, 2], "bf16")]
    assert (core.ops[0].reduction, core.ops[0].replica_groups, core.ops[0].splat_value) == ("stablehlo.add", [[0, 1]], None)
    assert [o.parent for o in core.ops] == [-1] * len(core.ops)  # main's top level only
    assert export_graph.nested_collectives(ctx, module, "hand.mlir") == [{"op": "all_reduce", "inside": "stablehlo.while"}]


def test_outside_value_names_the_function():
    from torch_xla_ext.parity.errors import ReplayError

    ctx, module = parse(HAND)
    with ctx:
        body = main_of(module).regions[0].blocks[0]
        ret = list(body.operations)[-1]
        # move the function's return up: it is then not the last op
        ret.move_before(list(body.operations)[0])
        with pytest.raises(ReplayError, match="main: func.return is not the function's last op"):
            _mlir_graph.walk(main_of(module), error=ReplayError)


def test_the_one_converter_checks_the_graph_it_builds():
    """core_graph is the one input layout of both C++ analyses: a graph whose op reads an id that
    is out of range, or a value before its definition, is refused naming the op (cc/graph's
    Validate), before any analysis sees it."""
    ctx, module = parse(HAND)
    with ctx:
        g = _mlir_graph.walk(main_of(module))
    core = _mlir_graph.core_graph(g)
    assert (len(core.values), core.num_args, len(core.ops)) == (len(g.value_types), g.num_args, len(g.graph_ops))
    assert [(o.parent, o.region_args, o.attributes) for o in core.ops] == \
        [(o.parent, o.region_args, o.attributes) for o in g.graph_ops]
    g.graph_ops[2].operands = [len(g.value_types) + 5]
    with pytest.raises(InvalidArgumentError, match=r"graph: op 2 \(stablehlo\.\w+\): operand id \d+ out of range"):
        _mlir_graph.core_graph(g)
    g.graph_ops[2].operands = [g.graph_ops[3].results[0]]  # defined by a later op
    with pytest.raises(InvalidArgumentError, match=r"op 2 .*used before its definition"):
        _mlir_graph.core_graph(g)

