"""The replays on hand-written StableHLO, checked against numpy: the rounded replay computes bf16
in f32 and rounds where XLA:CPU rounds (a dot then an add round twice), keeps a value only
converted to f32 unrounded (excess precision), rounds a reduction's every step; the exact replay
is fp64 and rounds nothing; loops and calls run; bad programs and arguments raise typed errors.
No torch_xla needed."""

import ml_dtypes
import numpy as np
import pytest

from torch_xla_ext import parity
from torch_xla_ext._ext import parity as core
from torch_xla_ext.parity.program.replay import Widening

BF16 = ml_dtypes.bfloat16
f32 = np.float32

# The shape of torch_xla's bf16 F.linear: a bf16 dot, then a bf16 bias add.
LINEAR = """
func.func @main(%b: tensor<4xbf16>, %w: tensor<4x8xbf16>, %x: tensor<2x8xbf16>) -> tensor<2x4xbf16> {
  %t = stablehlo.transpose %w, dims = [1, 0] : (tensor<4x8xbf16>) -> tensor<8x4xbf16>
  %d = stablehlo.dot %x, %t : (tensor<2x8xbf16>, tensor<8x4xbf16>) -> tensor<2x4xbf16> loc("dot.5")
  %bb = stablehlo.broadcast_in_dim %b, dims = [1] : (tensor<4xbf16>) -> tensor<2x4xbf16>
  %a = stablehlo.add %d, %bb : tensor<2x4xbf16> loc("add.7")
  return %a : tensor<2x4xbf16>
}
"""


def _linear_args(seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(4).astype(BF16), rng.standard_normal((4, 8)).astype(BF16),
            rng.standard_normal((2, 8)).astype(BF16)]


@pytest.fixture(scope="module")
def linear():
    program = parity.Program(LINEAR)
    return program, parity.Replay(program, rounded=True), parity.Replay(program, rounded=False)


def test_rounded_replay_rounds_after_the_dot_and_after_the_add(linear):
    _, rounded, _ = linear
    differs = 0
    for seed in range(100):
        b, w, x = _linear_args(seed)
        (got,) = rounded([b, w, x])
        double = ((x.astype(f32) @ w.astype(f32).T).astype(BF16).astype(f32) + b.astype(f32)).astype(BF16)
        single = (x.astype(f32) @ w.astype(f32).T + b.astype(f32)).astype(BF16)
        assert got.dtype == np.float32 and got.shape == (2, 4)
        np.testing.assert_array_equal(got, double.astype(f32))
        differs += int((double != single).sum())
    assert differs > 0  # the two placements disagree somewhere, or the check above proves nothing


def test_exact_replay_is_fp64_without_rounding(linear):
    _, _, exact = linear
    b, w, x = _linear_args(7)
    (got,) = exact([b, w, x])
    assert got.dtype == np.float64
    want = x.astype(np.float64) @ w.astype(np.float64).T + b.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)


LINEAR_F32 = LINEAR.replace("bf16", "f32")


def test_exact_replay_takes_the_float64_copies_made_beforehand_and_checks_them():
    exact = parity.Replay(parity.Program(LINEAR_F32), rounded=False)
    rng = np.random.default_rng(3)
    b, w, x = (rng.standard_normal(s).astype(f32) for s in ((4,), (4, 8), (2, 8)))
    want = lambda x_: x_.astype(np.float64) @ w.astype(np.float64).T + b.astype(np.float64)  # noqa: E731
    (plain,) = exact([b, w, x])
    np.testing.assert_allclose(plain, want(x), rtol=1e-13, atol=1e-13)
    # The copies are taken as they are (made from other values of x here: the result follows them,
    # so they were used and not made again from the arguments).
    (ahead,) = exact([b, w, x], widening=Widening([b, w, 2 * x]))
    np.testing.assert_allclose(ahead, want(2 * x), rtol=1e-13, atol=1e-13)
    # A copy of another shape or dtype than main's argument is not: the replay widens the argument.
    (other,) = exact([b, w, x], widening=Widening([b, w, np.zeros((8, 2), f32)]))
    (half,) = exact([b, w, x], widening=Widening([b, w, (2 * x).astype(np.float16)]))
    np.testing.assert_array_equal(other, plain)
    np.testing.assert_array_equal(half, plain)
    cancelled = Widening([b, w, 2 * x])
    cancelled.cancel()
    np.testing.assert_array_equal(exact([b, w, x], widening=cancelled)[0], plain)


TIED = """func.func @main(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>, %c: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = stablehlo.multiply %a, %b : tensor<4x8xf32>
  %1 = stablehlo.subtract %0, %c : tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}"""


def test_an_array_passed_twice_is_widened_once():
    """Tied weights (one buffer, two arguments): one float64 copy, handed to both; a copy of
    another array with the same shape is its own. Oracle: numpy in float64."""
    rng = np.random.default_rng(5)
    w, other = (rng.standard_normal((4, 8)).astype(f32) for _ in range(2))
    ahead = Widening([w, w, other])
    first, second, third = (ahead.take(k, np.dtype(f32), (4, 8)) for k in range(3))
    assert first is second and third is not first
    np.testing.assert_array_equal(third, other.astype(np.float64))
    exact = parity.Replay(parity.Program(TIED), rounded=False)
    want = w.astype(np.float64) ** 2 - other.astype(np.float64)
    np.testing.assert_allclose(exact([w, w, other])[0], want, rtol=1e-15, atol=1e-15)
    np.testing.assert_allclose(exact([w, w, other], widening=Widening([w, w, other]))[0], want, rtol=1e-15,
                               atol=1e-15)
    # Not one buffer: a copy of w with the same values is widened on its own, to the same values.
    np.testing.assert_allclose(exact([w, w.copy(), other])[0], want, rtol=1e-15, atol=1e-15)


def test_unrounded_f32_replay_computes_bf16_in_f32_without_rounding(linear):
    """precision="f32": the program's bf16 values in f32, nothing rounded. Oracle: numpy in f32 and
    in f64. f32 keeps 16 more mantissa bits than bf16, so its distance from the exact values must
    sit far below the rounded replay's (2^8 of slack on that 2^16)."""
    program, rounded, exact = linear
    unrounded = parity.Replay(program, rounded=False, precision="f32")
    assert unrounded.precision == "f32" and exact.precision == "f64" and rounded.precision is None
    worst_f32 = worst_bf16 = 0.0
    for seed in range(20):
        b, w, x = _linear_args(seed)
        (got,) = unrounded([b, w, x])
        assert got.dtype == np.float32 and got.shape == (2, 4)
        want32 = x.astype(f32) @ w.astype(f32).T + b.astype(f32)
        want64 = x.astype(np.float64) @ w.astype(np.float64).T + b.astype(np.float64)
        # bf16 x bf16 products are exact in f32; only the 8-term sum and the add round (each at 2^-24).
        np.testing.assert_allclose(got, want32, rtol=0, atol=10 * 2.0 ** -24 * float(np.abs(want64).max() + 1))
        worst_f32 = max(worst_f32, float(np.abs(got - want64).max()))
        worst_bf16 = max(worst_bf16, float(np.abs(rounded([b, w, x])[0] - want64).max()))
    assert worst_bf16 > 0 and worst_f32 <= 2.0 ** -8 * worst_bf16, (worst_f32, worst_bf16)
    with pytest.raises(parity.ParityError, match="precision"):
        parity.Replay(program, rounded=False, precision="f16")


def test_unrounded_precision_is_f32_only_for_a_program_that_rounds_to_a_narrow_float(linear):
    program, _, _ = linear
    assert program.rounding_points and parity.unrounded_precision(program) == "f32"
    f32_program = parity.Program(LINEAR.replace("bf16", "f32"))
    assert f32_program.rounding_points == () and parity.unrounded_precision(f32_program) == "f64"


def test_rounding_points_name_the_double_rounding(linear):
    program, _, _ = linear
    points = program.rounding_points
    assert [(p.instruction, p.opcode, p.element_type) for p in points] == [("dot.5", "dot", "bf16"),
                                                                           ("add.7", "add", "bf16")]
    assert (points[1].after, points[1].after_opcode) == ("dot.5", "dot") and points[0].after is None


# torch_xla's bf16 (x * 1.7 + 0.3) * x: the bf16 add's only user converts it to f32.
WIDENED = """
func.func @main(%x: tensor<64xbf16>, %s: tensor<f32>, %c: tensor<bf16>) -> tensor<64xbf16> {
  %xf = stablehlo.convert %x : (tensor<64xbf16>) -> tensor<64xf32>
  %sb = stablehlo.broadcast_in_dim %s, dims = [] : (tensor<f32>) -> tensor<64xf32>
  %m = stablehlo.multiply %xf, %sb : tensor<64xf32>
  %mb = stablehlo.convert %m : (tensor<64xf32>) -> tensor<64xbf16>
  %cb = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<bf16>) -> tensor<64xbf16>
  %a = stablehlo.add %mb, %cb : tensor<64xbf16>
  %af = stablehlo.convert %a : (tensor<64xbf16>) -> tensor<64xf32>
  %p = stablehlo.multiply %af, %xf : tensor<64xf32>
  %out = stablehlo.convert %p : (tensor<64xf32>) -> tensor<64xbf16>
  return %out : tensor<64xbf16>
}
"""


def test_excess_precision_keeps_a_value_only_converted_to_f32():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(64).astype(BF16)
    args = [x, np.array(1.7, f32), np.array(0.3, BF16)]
    xf = x.astype(f32)
    m = (xf * f32(1.7)).astype(BF16).astype(f32)  # the explicit convert rounds
    add = m + np.array(0.3, BF16).astype(f32)
    kept = (add * xf).astype(BF16)  # XLA's default: the add stays f32
    rounded = (add.astype(BF16).astype(f32) * xf).astype(BF16)
    assert (kept != rounded).any()  # the rule matters on these inputs
    (got,) = parity.replay(WIDENED, args)
    np.testing.assert_array_equal(got, kept.astype(f32))
    strict = parity.Program(WIDENED, excess_precision=False)
    (got_strict,) = parity.Replay(strict, rounded=True)(args)
    np.testing.assert_array_equal(got_strict, rounded.astype(f32))
    assert [p.opcode for p in parity.Program(WIDENED).rounding_points] == ["convert", "convert"]
    assert [p.opcode for p in strict.rounding_points] == ["convert", "add", "convert"]


REDUCE = """
func.func @main(%x: tensor<8xbf16>) -> tensor<bf16> {
  %zero = stablehlo.constant dense<0.0> : tensor<bf16>
  %r = stablehlo.reduce(%x init: %zero) across dimensions = [0] : (tensor<8xbf16>, tensor<bf16>) -> tensor<bf16>
    reducer(%a: tensor<bf16>, %b: tensor<bf16>) {
      %s = stablehlo.add %a, %b : tensor<bf16>
      stablehlo.return %s : tensor<bf16>
    }
  return %r : tensor<bf16>
}
"""


def test_a_bf16_reduction_rounds_every_step():
    # 256 + 1 + 1 + ...: in bf16 each +1 is lost (256 has no room for it); in f32 they add up.
    x = np.array([256] + [1] * 7, BF16)
    (rounded,) = parity.replay(REDUCE, [x])
    (exact,) = parity.replay(REDUCE, [x], rounded=False)
    assert float(exact) == 263.0
    assert float(rounded) == 256.0
    assert [p.opcode for p in parity.Program(REDUCE).rounding_points] == ["reduce", "add"]


LOOP = """
func.func @main(%init: tensor<3xf32>, %xs: tensor<4x3xf32>) -> tensor<3xf32> {
  %zero = stablehlo.constant dense<0> : tensor<i64>
  %r:2 = stablehlo.while(%i = %zero, %c = %init) : tensor<i64>, tensor<3xf32>
    cond {
      %n = stablehlo.constant dense<4> : tensor<i64>
      %lt = stablehlo.compare LT, %i, %n : (tensor<i64>, tensor<i64>) -> tensor<i1>
      stablehlo.return %lt : tensor<i1>
    } do {
      %z = stablehlo.constant dense<0> : tensor<i64>
      %row = stablehlo.dynamic_slice %xs, %i, %z, sizes = [1, 3] : (tensor<4x3xf32>, tensor<i64>, tensor<i64>) -> tensor<1x3xf32>
      %v = stablehlo.reshape %row : (tensor<1x3xf32>) -> tensor<3xf32>
      %next = func.call @step(%c, %v) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
      %one = stablehlo.constant dense<1> : tensor<i64>
      %j = stablehlo.add %i, %one : tensor<i64>
      stablehlo.return %j, %next : tensor<i64>, tensor<3xf32>
    }
  return %r#1 : tensor<3xf32>
}
func.func private @step(%a: tensor<3xf32>, %b: tensor<3xf32>) -> tensor<3xf32> {
  %m = stablehlo.multiply %a, %b : tensor<3xf32>
  return %m : tensor<3xf32>
}
"""


def test_while_loops_and_calls_run_with_int64_state():
    init = np.float32([1.0, 2.0, 3.0])
    xs = np.arange(1, 13, dtype=np.float32).reshape(4, 3) / 7
    (got,) = parity.replay(LOOP, [init, xs])
    want = init.copy()
    for i in range(4):
        want = want * xs[i]
    np.testing.assert_array_equal(got, want)
    (exact,) = parity.replay(LOOP, [init, xs], rounded=False)
    np.testing.assert_allclose(exact, np.prod(xs.astype(np.float64), 0) * init, rtol=1e-14)


def test_arguments_are_checked_by_name(linear):
    _, rounded, _ = linear
    b, w, x = _linear_args(0)
    with pytest.raises(parity.ParityError, match=r"args\[1\]: main's argument 1 is bf16\[4, 8\], got float32"):
        rounded([b, w.astype(f32), x])
    with pytest.raises(parity.ParityError, match="main takes 3 arguments, got 2"):
        rounded([b, w])


def test_bad_programs_raise_typed_errors():
    with pytest.raises(parity.ParityError, match="not a parsable StableHLO module"):
        parity.Program("func.func @main( {")
    with pytest.raises(TypeError):
        parity.Program(b"bytes are not text")
    with pytest.raises(parity.ReplayError, match="no function 'main'"):
        parity.Replay(parity.Program("func.func @other() -> () { return }"), rounded=True)
    with pytest.raises(parity.ReplayError, match="hlo_to_stablehlo"):
        parity.Program.from_hlo_proto(b"\x00not a proto")


def test_the_analysis_rejects_a_malformed_graph():
    from torch_xla_ext._ext import graph

    with pytest.raises(ValueError, match=r"op 0 \(stablehlo.add\).*out of range"):  # INVALID_ARGUMENT
        core.find_rounding_points(graph.Graph([graph.TensorType([2], "bf16")], 1,
                                              [graph.Op("stablehlo.add", [0, 9], [])], []))
    assert core.op_class("stablehlo.gather") == core.OpClass.MOVES_DATA
    assert core.op_class("stablehlo.convolution") == core.OpClass.COMPUTES
