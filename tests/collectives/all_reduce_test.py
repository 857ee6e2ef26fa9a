"""torch_xla_ext.collectives as a component of its own: the replica groups ``all_reduce`` takes are
checked against the world torch_xla reports (ids in range, ints, each in one group), the reduce
names are the C++ analysis' one list (every name it can put in a manifest, ``xor`` included) and
the lowering's refusal of one it cannot lower is a typed error, and the hook log comes back as
typed calls. Oracles: torch_xla's own world size and lowering, the analysis of a hand-written
StableHLO module."""

import pytest
import torch
import torch_xla

from torch_xla_ext import collectives, export
from torch_xla_ext.errors import UnimplementedError
from torch_xla_ext.export import graph
from torch_xla_ext.export.manifest import Input, Manifest


@pytest.fixture
def x():
    return torch.arange(4, dtype=torch.float32).to(torch_xla.device())


def test_the_world_is_torch_xlas():
    assert torch_xla.runtime.world_size() == 1  # one CPU process: replica 0 only


@pytest.mark.parametrize("groups,match", [
    ([[0, 1]], r"groups\[0\]\[1\]: replica 1 is not in \[0, world size 1\)"),
    ([[-1]], r"groups\[0\]\[0\]: replica -1 is not in \[0, world size 1\)"),
    ([[0.0]], r"groups\[0\]\[0\]: expected a replica id \(an int\), got 0\.0"),
    ([[True]], r"groups\[0\]\[0\]: replica True is not in"),
    ([[0], [0]], r"groups: a replica appears twice"),
    ([0], r"groups\[0\]: expected a list of replica ids, got 0"),
    ("0", r"groups: expected a list of lists of replica ids, got str"),
])
def test_groups_are_checked_against_the_world(x, groups, match):
    before = collectives.next_sequence()
    with pytest.raises(collectives.CollectiveArgumentError, match=match):
        collectives.all_reduce("sum", x, groups=groups)
    assert collectives.recorded_calls(before) == []  # refused before anything was lowered


def test_a_group_of_the_whole_world_is_the_traceable_all_reduce(x):
    before = collectives.next_sequence()
    y = collectives.all_reduce("sum", x, scale=0.5, groups=[[0]])
    torch.testing.assert_close(y.cpu(), torch.arange(4, dtype=torch.float32) * 0.5, rtol=0, atol=0)
    (call,) = collectives.recorded_calls(before)
    assert isinstance(call, collectives.AllReduceCall)
    assert (call.reduce, call.replica_groups, call.world_size, call.lowering) == ("sum", [], 1, "all_reduce+multiply")
    assert (call.requested_scale, call.applied_scale, call.sequence) == (0.5, 0.5, before)


def test_reduce_names_are_the_analysis_names():
    # every name the C++ analysis puts in a manifest, xor included; all_reduce takes torch_xla's
    assert collectives.REDUCE_NAMES == ("sum", "mul", "and", "or", "xor", "min", "max")
    assert set(collectives.REDUCE_TYPES) == {"sum", "mul", "and", "or", "min", "max"}
    assert set(collectives.REDUCE_TYPES) <= set(collectives.REDUCE_NAMES)


@pytest.mark.parametrize("reduction,name", [("add", "sum"), ("multiply", "mul"), ("and", "and"), ("or", "or"),
                                            ("xor", "xor"), ("minimum", "min"), ("maximum", "max")])
def test_every_reduce_name_is_what_the_analysis_reports(reduction, name):
    # The oracle: a hand-written all-reduce whose body is the StableHLO op itself.
    et = "i32" if reduction in ("and", "or", "xor") else "f32"
    text = f"""func.func public @main(%x: tensor<4x{et}>) -> tensor<4x{et}> {{
      %r = "stablehlo.all_reduce"(%x) ({{
        ^bb0(%a: tensor<{et}>, %b: tensor<{et}>):
          %s = stablehlo.{reduction} %a, %b : tensor<{et}>
          stablehlo.return %s : tensor<{et}>
      }}) {{replica_groups = dense<[[0]]> : tensor<1x1xi64>}} : (tensor<4x{et}>) -> tensor<4x{et}>
      return %r : tensor<4x{et}>
    }}"""
    dtype = "int32" if et == "i32" else "float32"
    m = Manifest(inputs=[Input(0, "user_input", [4], dtype, position=0)], collectives=[], outputs=[],
                 unused_inputs=[], num_user_inputs=1)
    graph.analyze_into(text, m, [], "hand.mlir")
    (c,) = m.collectives
    assert (c.op, c.reduce, c.replica_groups) == ("all_reduce", name, [[0]])
    assert c.reduce in collectives.REDUCE_NAMES


def test_a_name_torch_xla_cannot_lower_is_a_typed_error(x):
    with pytest.raises(UnimplementedError, match=r"reduce_type: 'xor' .*torch_xla's all-reduce lowering does not "
                                                  r"take it; it takes sum, mul, and, or, min, max"):
        collectives.all_reduce("xor", x.int())
    # the oracle: torch_xla itself refuses it
    with pytest.raises(RuntimeError, match="Unknown AllReduce type: xor"):
        torch.ops._c10d_functional.all_reduce(x.int(), "xor", "").cpu()
    with pytest.raises(collectives.CollectiveArgumentError, match=r"reduce_type: 'avg' is not one of sum, mul"):
        collectives.all_reduce("avg", x)


def test_an_exported_reduce_keeps_its_name(x):
    class Max(torch.nn.Module):
        def forward(self, t):
            return collectives.all_reduce("max", t)

    bundle = export.export(Max(), (torch.ones(4),))
    (c,) = bundle.manifest.collectives
    assert (c.op, c.reduce) == ("all_reduce", "max")
