"""The HLO-text interpreter on hand-written HLO: it rounds after every op to the op's element
type (so a dot then an add in bf16 round twice), keeps everything in float64 with exact=True,
follows call/while/tuples, and names what it cannot do. No torch_xla needed."""

import ml_dtypes
import numpy as np
import pytest

from torch_xla_ext import parity

BF16 = ml_dtypes.bfloat16

# The shape of torch_xla's bf16 F.linear lowering: dot in bf16, then a bf16 bias add.
LINEAR = """HloModule IrToHlo.14, entry_computation_layout={(bf16[4]{0}, bf16[4,8]{1,0}, bf16[2,8]{1,0})->(bf16[2,4]{1,0})}

ENTRY %IrToHlo.14 (p0.1: bf16[4], p1.2: bf16[4,8], p2.4: bf16[2,8]) -> (bf16[2,4]) {
  %p2.4 = bf16[2,8]{1,0} parameter(2)
  %p1.2 = bf16[4,8]{1,0} parameter(1)
  %transpose.3 = bf16[8,4]{0,1} transpose(bf16[4,8]{1,0} %p1.2), dimensions={1,0}
  %dot.5 = bf16[2,4]{1,0} dot(bf16[2,8]{1,0} %p2.4, bf16[8,4]{0,1} %transpose.3), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %p0.1 = bf16[4]{0} parameter(0)
  %broadcast.6 = bf16[2,4]{1,0} broadcast(bf16[4]{0} %p0.1), dimensions={1}
  %add.7 = bf16[2,4]{1,0} add(bf16[2,4]{1,0} %dot.5, bf16[2,4]{1,0} %broadcast.6)
  ROOT %tuple.8 = (bf16[2,4]{1,0}) tuple(bf16[2,4]{1,0} %add.7)
}
"""


def _linear_args(seed=0, n=2, k=8, m=4):
    rng = np.random.default_rng(seed)
    b = rng.standard_normal(m).astype(BF16)
    w = rng.standard_normal((m, k)).astype(BF16)
    x = rng.standard_normal((n, k)).astype(BF16)
    return b, w, x


def test_linear_rounds_after_the_dot_and_after_the_add():
    f32 = np.float32
    for seed in range(200):
        b, w, x = _linear_args(seed)
        (got,) = parity.emulate_hlo(LINEAR, [b, w, x])
        double = ((x.astype(f32) @ w.astype(f32).T).astype(BF16).astype(f32) + b.astype(f32)).astype(BF16)
        assert got.dtype == np.dtype(BF16) and got.shape == (2, 4)
        np.testing.assert_array_equal(got.view(np.uint16), double.view(np.uint16))


def test_double_rounding_differs_from_single_rounding_somewhere():
    # Over many draws the two placements must disagree at least once, or the test above proves nothing.
    differs = 0
    for seed in range(200):
        b, w, x = _linear_args(seed)
        (got,) = parity.emulate_hlo(LINEAR, [b, w, x])
        f32 = np.float32
        single = (x.astype(f32) @ w.astype(f32).T + b.astype(f32)).astype(BF16)
        differs += int((got.view(np.uint16) != single.view(np.uint16)).sum())
    assert differs > 0


def test_exact_replay_keeps_float64_and_does_not_round():
    b, w, x = _linear_args(2)
    (got,) = parity.emulate_hlo(LINEAR, [b, w, x], exact=True)
    assert got.dtype == np.float64
    want = x.astype(np.float64) @ w.astype(np.float64).T + b.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)


def test_rounding_points_find_the_dot_then_add_chain():
    points = parity.rounding_points(LINEAR)
    assert [(p.instruction, p.opcode, p.element_type) for p in points] == [("dot.5", "dot", "bf16"), ("add.7", "add", "bf16")]
    assert points[1].after == "dot.5" and points[1].after_opcode == "dot"
    assert points[0].after is None


# A while loop over a tuple state with a call, get-tuple-element, dynamic-slice,
# dynamic-update-slice, compare and comments inside shapes: the shape of torch_xla's scan.
WHILE = """HloModule scan

%Fn.1 (p0.2: f32[3], p1.3: f32[3]) -> (f32[3]) {
  %p0.2 = f32[3]{0} parameter(0)
  %p1.3 = f32[3]{0} parameter(1)
  %multiply.4 = f32[3]{0} multiply(f32[3]{0} %p0.2, f32[3]{0} %p1.3)
  ROOT %tuple.5 = (f32[3]{0}) tuple(f32[3]{0} %multiply.4)
}

%Body.10 (p0.11: (s64[], f32[3], f32[4,3], f32[4,3])) -> (s64[], f32[3], f32[4,3], f32[4,3]) {
  %p0.11 = (s64[], f32[3]{0}, f32[4,3]{1,0}, /*index=3*/f32[4,3]{1,0}) parameter(0)
  %gte.12 = s64[] get-tuple-element((s64[], f32[3]{0}, f32[4,3]{1,0}, f32[4,3]{1,0}) %p0.11), index=0
  %gte.13 = f32[3]{0} get-tuple-element((s64[], f32[3]{0}, f32[4,3]{1,0}, f32[4,3]{1,0}) %p0.11), index=1
  %gte.14 = f32[4,3]{1,0} get-tuple-element((s64[], f32[3]{0}, f32[4,3]{1,0}, f32[4,3]{1,0}) %p0.11), index=2
  %gte.15 = f32[4,3]{1,0} get-tuple-element((s64[], f32[3]{0}, f32[4,3]{1,0}, f32[4,3]{1,0}) %p0.11), index=3
  %constant.16 = s64[] constant(0)
  %dynamic-slice.17 = f32[1,3]{1,0} dynamic-slice(f32[4,3]{1,0} %gte.14, s64[] %gte.12, s64[] %constant.16), dynamic_slice_sizes={1,3}
  %reshape.18 = f32[3]{0} reshape(f32[1,3]{1,0} %dynamic-slice.17)
  %call.19 = (f32[3]{0}) call(f32[3]{0} %gte.13, f32[3]{0} %reshape.18), to_apply=%Fn.1
  %gte.20 = f32[3]{0} get-tuple-element((f32[3]{0}) %call.19), index=0
  %reshape.21 = f32[1,3]{1,0} reshape(f32[3]{0} %gte.20)
  %dus.22 = f32[4,3]{1,0} dynamic-update-slice(f32[4,3]{1,0} %gte.15, f32[1,3]{1,0} %reshape.21, s64[] %gte.12, s64[] %constant.16)
  %constant.23 = s64[] constant(1)
  %add.24 = s64[] add(s64[] %gte.12, s64[] %constant.23)
  ROOT %tuple.25 = (s64[], f32[3]{0}, f32[4,3]{1,0}, f32[4,3]{1,0}) tuple(s64[] %add.24, f32[3]{0} %gte.20, f32[4,3]{1,0} %gte.14, f32[4,3]{1,0} %dus.22)
}

%Cond.30 (p0.31: (s64[], f32[3], f32[4,3], f32[4,3])) -> pred[] {
  %p0.31 = (s64[], f32[3]{0}, f32[4,3]{1,0}, f32[4,3]{1,0}) parameter(0)
  %gte.32 = s64[] get-tuple-element((s64[], f32[3]{0}, f32[4,3]{1,0}, f32[4,3]{1,0}) %p0.31), index=0
  %constant.33 = s64[] constant(4)
  ROOT %compare.34 = pred[] compare(s64[] %gte.32, s64[] %constant.33), direction=LT
}

ENTRY %main.40 (p0.41: f32[3], p1.42: f32[4,3]) -> (f32[3], f32[4,3]) {
  %constant.43 = s64[] constant(0)
  %p0.41 = f32[3]{0} parameter(0)
  %p1.42 = f32[4,3]{1,0} parameter(1)
  %constant.44 = f32[] constant(0)
  %broadcast.45 = f32[4,3]{1,0} broadcast(f32[] %constant.44), dimensions={}
  %tuple.46 = (s64[], f32[3]{0}, f32[4,3]{1,0}, f32[4,3]{1,0}) tuple(s64[] %constant.43, f32[3]{0} %p0.41, f32[4,3]{1,0} %p1.42, f32[4,3]{1,0} %broadcast.45)
  %while.47 = (s64[], f32[3]{0}, f32[4,3]{1,0}, f32[4,3]{1,0}) while((s64[], f32[3]{0}, f32[4,3]{1,0}, f32[4,3]{1,0}) %tuple.46), condition=%Cond.30, body=%Body.10
  %gte.48 = f32[3]{0} get-tuple-element((s64[], f32[3]{0}, f32[4,3]{1,0}, f32[4,3]{1,0}) %while.47), index=1
  %gte.49 = f32[4,3]{1,0} get-tuple-element((s64[], f32[3]{0}, f32[4,3]{1,0}, f32[4,3]{1,0}) %while.47), index=3
  ROOT %tuple.50 = (f32[3]{0}, f32[4,3]{1,0}) tuple(f32[3]{0} %gte.48, f32[4,3]{1,0} %gte.49)
}
"""


def test_while_loop_scan_matches_a_python_loop():
    init = np.float32([1.0, 2.0, 3.0])
    xs = np.arange(1, 13, dtype=np.float32).reshape(4, 3) / 7
    carry, ys = parity.emulate_hlo(WHILE, [init, xs])
    want, rows = init, []
    for i in range(4):
        want = want * xs[i]
        rows.append(want)
    np.testing.assert_array_equal(carry, want)
    np.testing.assert_array_equal(ys, np.stack(rows))


DOT_GENERAL = """HloModule dg

ENTRY %e (p0: f32[2,3,5], p1: f32[2,5,4]) -> f32[2,3,4] {
  %p0 = f32[2,3,5]{2,1,0} parameter(0)
  %p1 = f32[2,5,4]{2,1,0} parameter(1)
  ROOT %dot = f32[2,3,4]{2,1,0} dot(f32[2,3,5]{2,1,0} %p0, f32[2,5,4]{2,1,0} %p1), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
}
"""


def test_batched_dot_general_matches_einsum():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 3, 5)), rng.standard_normal((2, 5, 4))
    (got,) = parity.emulate_hlo(DOT_GENERAL, [a.astype(np.float32), b.astype(np.float32)], exact=True)
    np.testing.assert_allclose(got, np.einsum("bij,bjk->bik", a.astype(np.float32).astype(np.float64),
                                              b.astype(np.float32).astype(np.float64)), rtol=1e-12)


def test_unsupported_op_is_named():
    hlo = LINEAR.replace("add(", "fft(")
    with pytest.raises(parity.HloEmulationError, match=r"'fft'.*add\.7"):
        parity.emulate_hlo(hlo, list(_linear_args()))


def test_argument_mismatch_names_the_parameter():
    b, w, x = _linear_args()
    with pytest.raises(parity.HloEmulationError, match=r"argument 1 .*p1\.2"):
        parity.emulate_hlo(LINEAR, [b, w.astype(np.float32), x])
    with pytest.raises(parity.HloEmulationError, match="takes 3 parameters, got 2"):
        parity.emulate_hlo(LINEAR, [b, w])


def test_hlo_errors_are_value_errors_of_the_project():
    from torch_xla_ext.errors import TorchXlaExtError

    with pytest.raises(ValueError) as info:
        parity.parse_hlo_text("HloModule m\n")
    assert isinstance(info.value, TorchXlaExtError)
    assert "ENTRY" in str(info.value)


# torch_xla's lowering of bf16 (x * 1.7 + 0.3) * x: the bf16 add's only user converts it to f32.
WIDENED = """HloModule m
ENTRY %e (p0: bf16[64], p1: f32[], p2: bf16[]) -> bf16[64] {
  %p0 = bf16[64]{0} parameter(0)
  %convert.1 = f32[64]{0} convert(bf16[64]{0} %p0)
  %p1 = f32[] parameter(1)
  %broadcast.2 = f32[64]{0} broadcast(f32[] %p1), dimensions={}
  %multiply.3 = f32[64]{0} multiply(f32[64]{0} %convert.1, f32[64]{0} %broadcast.2)
  %convert.4 = bf16[64]{0} convert(f32[64]{0} %multiply.3)
  %p2 = bf16[] parameter(2)
  %broadcast.5 = bf16[64]{0} broadcast(bf16[] %p2), dimensions={}
  %add.6 = bf16[64]{0} add(bf16[64]{0} %convert.4, bf16[64]{0} %broadcast.5)
  %convert.7 = f32[64]{0} convert(bf16[64]{0} %add.6)
  %multiply.8 = f32[64]{0} multiply(f32[64]{0} %convert.7, f32[64]{0} %convert.1)
  ROOT %convert.9 = bf16[64]{0} convert(f32[64]{0} %multiply.8)
}
"""


def test_excess_precision_keeps_an_op_only_converted_to_f32_unrounded():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(64).astype(BF16)
    args = [x, np.float32(1.7), np.array(0.3, BF16)]
    f32 = np.float32
    xf = x.astype(f32)
    m = (xf * f32(1.7)).astype(BF16).astype(f32)  # the explicit convert.4 rounds
    add = m + np.array(0.3, BF16).astype(f32)
    kept = (add * xf).astype(BF16)  # XLA's default: add.6 stays f32
    rounded = (add.astype(BF16).astype(f32) * xf).astype(BF16)
    assert (kept.view(np.uint16) != rounded.view(np.uint16)).any()  # the model matters here
    (got,) = parity.emulate_hlo(WIDENED, args)
    np.testing.assert_array_equal(got.view(np.uint16), kept.view(np.uint16))
    (strict,) = parity.emulate_hlo(WIDENED, args, excess_precision=False)
    np.testing.assert_array_equal(strict.view(np.uint16), rounded.view(np.uint16))
    assert parity.rounding_points(WIDENED) == []
    assert [p.instruction for p in parity.rounding_points(WIDENED, excess_precision=False)] == ["add.6"]
