"""The rounded replay cut at a capture's block outputs: blocks of one structure compile once.

Oracles: numpy in float64 for a small program (each segment's math, to the f32 rounding bound);
the uncut replay of the same program for bit-equality where every value that crosses a cut is
rounded to bf16 before it does (then what differs between the two compiles, the fusion
boundaries, cannot change a bit: no product and sum fuse across a rounding); the recorded
module calls of a GPT-2 for where the cuts go."""

import ml_dtypes
import numpy as np
import pytest

from torch_xla_ext import _dtypes, parity
from torch_xla_ext.parity import capturing
from torch_xla_ext.parity.program import segments
from torch_xla_ext.parity.program.stablehlo import parse

BF16 = ml_dtypes.bfloat16
BLOCKS, D = 5, 64


def _blocks_program(dtype: str, biases=(0.5,) * BLOCKS, op: str = "tanh") -> str:
    """x -> f(x @ w_k + b_k) + x, BLOCKS times, each block's output a result after the last's."""
    t = f"tensor<8x{D}x{dtype}>"
    lines, args = [], [f"%x: {t}"]
    prev = "%x"
    for k in range(BLOCKS):
        args += [f"%w{k}: tensor<{D}x{D}x{dtype}>"]
        lines += [
            f"  %c{k} = stablehlo.constant dense<{biases[k]}> : {t}",
            f"  %d{k} = stablehlo.dot {prev}, %w{k} : ({t}, tensor<{D}x{D}x{dtype}>) -> {t}",
            f"  %a{k} = stablehlo.add %d{k}, %c{k} : {t}",
            f"  %h{k} = stablehlo.{op if k == BLOCKS - 1 else 'tanh'} %a{k} : {t}",
            f"  %y{k} = stablehlo.add %h{k}, {prev} : {t}",
        ]
        prev = f"%y{k}"
    results = [f"%y{BLOCKS - 1}"] + [f"%y{k}" for k in range(BLOCKS)]
    return (f"func.func @main({', '.join(args)}) -> ({', '.join([t] * len(results))}) {{\n" + "\n".join(lines)
            + f"\n  return {', '.join(results)} : {', '.join([t] * len(results))}\n}}")


def _args(dtype, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((8, D)).astype(dtype)] + [
        (rng.standard_normal((D, D)) / np.sqrt(D)).astype(dtype) for _ in range(BLOCKS)]


def _numpy(args, biases=(0.5,) * BLOCKS, op: str = "tanh"):
    x, out = args[0].astype(np.float64), []
    for k, w in enumerate(args[1:]):
        f = {"tanh": np.tanh, "logistic": lambda v: 1 / (1 + np.exp(-v))}[op if k == BLOCKS - 1 else "tanh"]
        x = f(x @ w.astype(np.float64) + biases[k]) + x
        out.append(x)
    return [out[-1]] + out


def test_blocks_of_one_structure_compile_once():
    program = parity.Program(_blocks_program("f32"))
    cuts = list(range(1, BLOCKS + 1))  # each block's output (results 1..BLOCKS)
    cut = parity.Replay(program, rounded=True, cuts=cuts)
    assert cut.plan is not None
    # One segment per block (the last also returns the first result); the first block reads
    # main's argument and the later ones the previous block's output, but all are one program.
    assert len(cut.plan.segments) == BLOCKS
    assert len(cut.plan.modules) == 1
    assert len(cut.executables) == 1
    args = _args(np.float32)
    got = cut(args)
    want = _numpy(args)
    assert len(got) == len(want) == BLOCKS + 1
    for g, w in zip(got, want):
        # f32 arithmetic on values of order 1: a few f32 roundings per block, BLOCKS blocks.
        np.testing.assert_allclose(g, w, rtol=0, atol=BLOCKS * D * np.finfo(np.float32).eps * 4)


@pytest.mark.parametrize("biases, op", [((0.5, 0.5, 0.25, 0.5, 0.5), "tanh"), ((0.5,) * BLOCKS, "logistic")])
def test_blocks_that_differ_in_a_constant_or_an_op_do_not_share_a_program(biases, op):
    program = parity.Program(_blocks_program("f32", biases, op))
    cut = parity.Replay(program, rounded=True, cuts=list(range(1, BLOCKS + 1)))
    assert cut.plan is not None
    assert len(cut.plan.modules) == 2  # the odd block's program, and the others'
    args = _args(np.float32, 3)
    for g, w in zip(cut(args), _numpy(args, biases, op)):
        np.testing.assert_allclose(g, w, rtol=0, atol=BLOCKS * D * np.finfo(np.float32).eps * 4)


def test_a_cut_bf16_program_equals_the_uncut_one_bit_for_bit():
    program = parity.Program(_blocks_program("bf16"))
    cuts = list(range(1, BLOCKS + 1))
    cut = parity.Replay(program, rounded=True, cuts=cuts)
    whole = parity.Replay(program, rounded=True)
    assert cut.plan is not None and whole.plan is None
    for seed in range(3):
        args = _args(BF16, seed)
        a, b = cut(args), whole(args)
        assert len(a) == len(b) == BLOCKS + 1
        for x, y in zip(a, b):
            assert x.dtype == y.dtype and x.shape == y.shape
            np.testing.assert_array_equal(x.view(np.uint32), y.view(np.uint32))


def test_nothing_to_share_is_not_cut():
    program = parity.Program(_blocks_program("f32"))
    # One cut: two segments of different programs (the blocks before it, and after it).
    assert parity.Replay(program, rounded=True, cuts=[2]).plan is None
    assert parity.Replay(program, rounded=True, cuts=[]).plan is None
    # An index that is not a result is no cut.
    assert parity.Replay(program, rounded=True, cuts=[99, -1]).plan is None


def test_a_region_that_reads_a_value_from_outside_is_not_cut():
    text = """func.func @main(%x: tensor<4xf32>, %n: tensor<i32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %y = stablehlo.add %x, %x : tensor<4xf32>
  %one = stablehlo.constant dense<1> : tensor<i32>
  %zero = stablehlo.constant dense<0> : tensor<i32>
  %r:2 = stablehlo.while(%i = %zero, %v = %y) : tensor<i32>, tensor<4xf32>
    cond {
      %c = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
    } do {
      %j = stablehlo.add %i, %one : tensor<i32>
      %w = stablehlo.add %v, %y : tensor<4xf32>
      stablehlo.return %j, %w : tensor<i32>, tensor<4xf32>
    }
  return %r#1, %y : tensor<4xf32>, tensor<4xf32>
}"""
    ctx, module = parse(text, "test")
    with ctx:
        assert segments.split(module, [1]) is None
    replay = parity.Replay(parity.Program(text), rounded=True, cuts=[1])
    assert replay.plan is None
    x = np.arange(4, dtype=np.float32)
    got = replay([x, np.array(3, np.int32)])
    np.testing.assert_array_equal(got[0], 2 * x * 4)  # y + 3 more y
    np.testing.assert_array_equal(got[1], 2 * x)


def test_repeated_blocks_are_the_outermost_numbered_children():
    paths = ["", "model", "model.embed", "model.layers", "model.layers.0", "model.layers.0.moe.experts",
             "model.layers.0.moe.experts.0", "model.layers.0.moe.experts.1", "model.layers.1",
             "model.layers.1.moe.experts.0", "model.layers.1.moe.experts.1", "model.layers.2",
             "encoder.block.0", "encoder.block.1", "decoder.block.0", "decoder.block.1", "head.0"]
    assert capturing.repeated_blocks(paths) == [
        ["model.layers.0", "model.layers.1", "model.layers.2"],
        ["encoder.block.0", "encoder.block.1"],
        ["decoder.block.0", "decoder.block.1"],
    ]
    assert capturing.repeated_blocks(["0", "1", "1.0", "1.1"]) == [["0", "1"]]  # an nn.Sequential
    assert capturing.repeated_blocks(["a", "a.0", "b.0"]) == []


@pytest.mark.parametrize("localize", [True, False])
def test_a_gpt2_run_cuts_at_its_blocks(localize):
    """verify on a 4-layer GPT-2 in bf16, with localize (the capture's cuts among every module's
    tensors) and without (capturing.BlockValues: the blocks' boundaries alone): the cuts are
    h.0's input and each block's output, the blocks after the first share one compiled program,
    and the cut rounded replay's results equal the uncut replay's bit for bit (every value
    crossing a cut is a bf16 value, rounded before it crosses)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from torch_xla_ext.parity.stages import replays

    layers = 4
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=layers, n_embd=64, n_head=2, vocab_size=256, n_positions=64,
                                       use_cache=False, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)).eval()
    ids = torch.randint(0, 256, (1, 16), generator=torch.Generator().manual_seed(1))
    seen = {}
    real = replays.compile_replays

    def compile_replays(program, unrounded="auto", capture_program=None, cuts=(), rules="xla-cpu", device=None,
                        **options):
        seen.update(program=program, capture_program=capture_program, cuts=list(cuts))
        compiled = real(program, unrounded, capture_program, cuts, rules, device, **options)
        seen["plan"] = compiled.rounded.plan
        return compiled

    replays.compile_replays = compile_replays
    try:
        report = parity.verify(model, (ids,), dtype="bf16", localize=localize)
    finally:
        replays.compile_replays = real
    assert bool(report.modules) == localize
    assert len(seen["cuts"]) == layers + 1
    plan = seen["plan"]
    assert plan is not None
    # Before h.0, h.0 (which also computes what every block reads, the mask), h.1..h.3, after.
    assert len(plan.segments) == layers + 2
    assert len(plan.modules) <= len(plan.segments) - (layers - 2)
    assert len({s.module for s in plan.segments[2:2 + layers - 1]}) == 1

    program = seen["capture_program"]
    offset = len(seen["program"].main.returned)
    cut = parity.Replay(program, rounded=True, cuts=[offset + c for c in seen["cuts"]])
    whole = parity.Replay(program, rounded=True)
    assert cut.plan is not None and whole.plan is None
    rng = np.random.default_rng(0)
    args = []
    for shape, et in whole.arg_types:
        dtype = _dtypes.numpy_dtype(_dtypes.by_mlir(et).name)
        if np.issubdtype(dtype, np.integer):  # token ids
            args.append(rng.integers(0, 256, shape).astype(dtype))
        else:
            args.append((rng.standard_normal(shape) * 0.05).astype(dtype))
    a, b = cut(args), whole(args)
    assert len(a) == len(b) > offset + layers
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert np.array_equal(x.view(np.uint8), y.view(np.uint8))
