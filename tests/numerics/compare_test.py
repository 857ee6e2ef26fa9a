"""The comparator against a plain numpy reference (random arrays with special values, strided
views, all four dtypes), against torch.testing itself, on XLA tensors, and its errors."""

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tests.numerics.reference import reference

from torch_xla_ext import numerics  # noqa: E402
from torch_xla_ext.errors import ArgumentTypeError, InvalidArgumentError  # noqa: E402

DTYPES = {
    "float64": np.dtype(np.float64),
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
}
SPECIALS = [0.0, -0.0, math.inf, -math.inf, math.nan, 1e-45, -1e-45, 5e-324, 1e-8, 65504.0, 3.0e38]


@st.composite
def pairs(draw):
    """(actual, expected) with the same shape, possibly different dtypes, possibly strided."""
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=6))
    da = draw(st.sampled_from(sorted(DTYPES)))
    de = da if draw(st.booleans()) else draw(st.sampled_from(sorted(DTYPES)))
    sometimes = st.sampled_from([True, False, False, False])
    base = draw(hnp.arrays(np.float64, shape, elements=st.floats(-1e3, 1e3, width=32)))
    noise = draw(hnp.arrays(np.float64, shape, elements=st.sampled_from([0.0, 0.0, 1e-7, -1e-4, 3e-2, 1.0])))
    special_a = draw(hnp.arrays(np.float64, shape, elements=st.sampled_from(SPECIALS)))
    special_e = draw(hnp.arrays(np.float64, shape, elements=st.sampled_from(SPECIALS)))
    both_nan = draw(hnp.arrays(np.bool_, shape, elements=sometimes))
    actual = np.where(draw(hnp.arrays(np.bool_, shape, elements=sometimes)), special_a, base + noise)
    expected = np.where(draw(hnp.arrays(np.bool_, shape, elements=sometimes)), special_e, base)
    actual[both_nan] = np.nan
    expected[both_nan] = np.nan
    with np.errstate(over="ignore"):
        a = actual.astype(DTYPES[da])
        e = expected.astype(DTYPES[de])
    if a.ndim >= 2 and draw(st.booleans()):
        a, e = a.T, e.T  # non-contiguous views
    if a.ndim >= 1 and draw(st.booleans()):
        a, e = a[::-1], e[::-1]  # negative strides
    return a, e


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(pairs(), st.sampled_from([(0.0, 0.0), (1.3e-6, 1e-5), (1.6e-2, 1e-5), (1e-3, 0.0)]), st.booleans())
def test_every_field_matches_numpy_reference(pair, tol, equal_nan):
    a, e = pair
    rtol, atol = tol
    got = numerics.compare(a, e, rtol=rtol, atol=atol, equal_nan=equal_nan, check_dtype=False)
    ref = reference(a, e, rtol, atol, equal_nan)
    assert got.total == ref["total"]
    assert got.mismatched == ref["mismatched"]
    assert got.passed == (ref["mismatched"] == 0)
    if ref["mismatched"]:
        abs_i, rel_i = ref["max_abs_index"], ref["max_rel_index"]
    else:
        abs_i, rel_i = ref["max_abs_index_all"], ref["max_rel_index_all"]
    unravel = lambda i: None if i < 0 else (tuple(int(x) for x in np.unravel_index(i, a.shape)) if a.shape else ())
    assert got.max_abs_index == unravel(abs_i)
    assert got.max_rel_index == unravel(rel_i)
    if abs_i >= 0:
        np.testing.assert_equal(got.max_abs_diff, ref["abs_diff"][abs_i])
        np.testing.assert_equal(got.max_rel_diff, ref["rel_diff"][rel_i])
    assert got.max_ulp == ref["max_ulp"]
    assert list(got.ulp_histogram.values()) == ref["ulp_histogram"]
    assert got.ulp_undefined == ref["ulp_undefined"]


def test_report_reads_like_torch_testing_and_agrees_with_it():
    import torch

    g = torch.Generator().manual_seed(1)
    expected = torch.randn(40, 192, dtype=torch.float64, generator=g)
    actual = expected.clone()
    actual[3, 7] += 1e-3
    actual[39, 191] *= 1.5
    actual[20, 0] = float("nan")
    with pytest.raises(AssertionError) as theirs:
        torch.testing.assert_close(actual, expected)
    report = numerics.compare(actual, expected)
    ours = str(report).splitlines()
    their_lines = str(theirs.value).splitlines()
    assert ours[0] == their_lines[0] == "Tensor-likes are not close!"
    # Same mismatch line and the same greatest-difference lines, to the character.
    assert ours[2:5] == their_lines[2:5]
    assert report.mismatched == 3 and report.total == 7680
    assert "Mismatched elements: 3 / 7680 (0.0%)" in ours


def test_passing_report_still_says_how_close():
    a = np.linspace(1, 2, 11, dtype=np.float32)
    b = a + np.float32(1e-7)
    r = numerics.assert_close(b, a)
    assert r.passed and r.mismatched == 0
    assert r.max_abs_index is not None and r.max_abs_diff > 0
    assert str(r).startswith("Tensor-likes are close!")


def test_assert_close_raises_with_the_report():
    with pytest.raises(AssertionError, match=r"Mismatched elements: 1 / 3 \(33.3%\)"):
        numerics.assert_close(np.float32([1, 2, 3]), np.float32([1, 2, 4]))


def test_torch_tensors_any_layout_and_dtype():
    import torch

    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    view = base.t()[1:, ::2]  # strided, with a storage offset
    copy = view.contiguous().clone()
    copy[2, 1] += 0.5
    r = numerics.compare(view, copy)
    assert (r.mismatched, r.max_abs_index) == (1, (2, 1))
    bf = torch.tensor([1.0, 1.0078125, 2.0], dtype=torch.bfloat16)
    r = numerics.compare(bf, torch.tensor([1.0, 1.0, 2.0], dtype=torch.bfloat16), rtol=0, atol=0)
    assert (r.mismatched, r.max_ulp, r.ulp_dtype) == (1, 1, "bfloat16")


def test_xla_tensor_is_moved_once_and_compared():
    import torch
    import torch_xla
    import torch_xla.debug.metrics as met

    from torch_xla_ext.cli.numerics import example_bf16_matmul

    xla_out, cpu_out = example_bf16_matmul(m=16, k=64, n=8)
    assert xla_out.dtype == torch.bfloat16 and cpu_out.dtype == torch.bfloat16
    report = numerics.compare(xla_out, cpu_out)
    assert report.total == 128 and report.ulp_dtype == "bfloat16"
    # Passing an XLA tensor itself: one transfer to the host, same answer as the CPU copy.
    dev = torch_xla.device()
    t = torch.randn(8, 8).to(dev) * 2
    met.clear_all()
    r_xla = numerics.compare(t, t.cpu())
    assert r_xla.mismatched == 0
    assert met.metric_data("TransferFromDeviceTime")[0] == 2  # ours + the explicit .cpu()


@pytest.mark.parametrize(
    "actual, expected, error, pattern",
    [
        (np.arange(3), np.arange(3), ArgumentTypeError, r"actual has dtype numpy.int64 \(integer\)"),
        (np.zeros(3), np.zeros(3, dtype=np.complex64), ArgumentTypeError, r"expected has dtype numpy.complex64 \(complex\)"),
        (np.zeros(3, dtype=bool), np.zeros(3), ArgumentTypeError, r"actual has dtype numpy.bool \(bool\)"),
        (np.zeros((2, 3)), np.zeros((3, 2)), InvalidArgumentError, r"actual has shape \(2, 3\), expected has shape \(3, 2\)"),
        (np.zeros(3, np.float32), np.zeros(3), ArgumentTypeError, r"actual is numpy.float32, expected is numpy.float64"),
        ([1.0, 2.0], np.zeros(2), ArgumentTypeError, r"actual: expected a torch.Tensor or a numpy.ndarray, got builtins.list"),
    ],
)
def test_bad_inputs_name_both_sides(actual, expected, error, pattern):
    with pytest.raises(error, match=pattern):
        numerics.compare(actual, expected)


def test_torch_dtype_errors_and_tolerance_pairs():
    import torch

    with pytest.raises(ArgumentTypeError, match=r"actual has dtype torch.int32 \(integer\)"):
        numerics.compare(torch.zeros(2, dtype=torch.int32), torch.zeros(2))
    with pytest.raises(InvalidArgumentError, match="Both 'rtol' and 'atol'"):
        numerics.compare(np.zeros(2), np.zeros(2), rtol=1e-3)
    with pytest.raises(InvalidArgumentError, match="rtol and atol must be finite"):
        numerics.compare(np.zeros(2), np.zeros(2), rtol=-1.0, atol=0.0)
    # check_dtype=False compares in the promoted dtype with the looser default tolerances.
    r = numerics.compare(torch.ones(2, dtype=torch.bfloat16), torch.ones(2), check_dtype=False)
    assert (r.rtol, r.atol, r.ulp_dtype) == (1.6e-2, 1e-5, "float32")


def test_empty_and_scalar():
    r = numerics.compare(np.zeros((0, 4), np.float32), np.zeros((0, 4), np.float32))
    assert (r.total, r.mismatched, r.max_abs_index, r.passed) == (0, 0, None, True)
    assert "Mismatched elements: 0 / 0 (0.0%)" in str(r)
    r = numerics.compare(np.float64(1.0) * np.ones(()), np.ones(()) * 2)
    assert (r.total, r.mismatched, r.max_abs_index) == (1, 1, ())


def test_json_round_trip_with_non_finite_values():
    import json

    r = numerics.compare(np.float32([1, np.inf]), np.float32([1, 1]))
    d = json.loads(r.to_json())
    assert d["max_abs_diff"] == "inf" and d["passed"] is False and d["max_abs_index"] == [1]
