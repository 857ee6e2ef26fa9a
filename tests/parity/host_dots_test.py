"""The exact replay's large products on the host's BLAS (program/host_dots.py), where the exact
replay is compiled (a program the interpreter refuses: here, every program, by the fixture).

Oracle: NumPy in float64 (einsum over the dimension numbers, written out per case), to float64
rounding; and which products the split takes out, read from the program's own text."""

import math

import numpy as np
import pytest

from torch_xla_ext.parity.program import host_dots
from torch_xla_ext.parity.program import replay as replay_module
from torch_xla_ext.parity.program.interpreter import Unsupported
from torch_xla_ext.parity.program.mlir import ir
from torch_xla_ext.parity.program.replay import Replay
from torch_xla_ext.parity.program.stablehlo import Program, parse

RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def compiled_exact_replay(monkeypatch):
    """The exact replay compiled, as for a program with an op the interpreter does not know."""

    def refuse(module):
        raise Unsupported("the test's own refusal")

    monkeypatch.setattr(replay_module, "Interpreter", refuse)


def _close(got, want):
    """Equal to float64 rounding of sums of a few hundred terms."""
    scale = max(1.0, float(np.abs(want).max()))
    assert np.abs(np.asarray(got, np.float64) - want).max() <= 1e-12 * scale


@pytest.mark.parametrize("lhs_shape, rhs_shape, dims, spec", [
    ((8, 16), (16, 4), ((), (), (1,), (0,)), "mk,kn->mn"),
    ((8, 16), (4, 16), ((), (), (1,), (1,)), "mk,nk->mn"),
    ((1, 8, 16), (32, 16), ((), (), (2,), (1,)), "bmk,nk->bmn"),
    ((3, 8, 16), (3, 16, 5), ((0,), (0,), (2,), (1,)), "bmk,bkn->bmn"),
    ((16, 3, 8), (5, 3, 16), ((1,), (1,), (0,), (2,)), "kbm,nbk->bmn"),
    ((4, 6, 8), (6, 4, 2), ((), (), (0, 1), (1, 0)), "ijm,jin->mn"),
])
def test_host_dot_follows_the_dimension_numbers(lhs_shape, rhs_shape, dims, spec):
    lhs, rhs = RNG.standard_normal(lhs_shape), RNG.standard_normal(rhs_shape)
    want = np.einsum(spec, lhs, rhs)
    product = host_dots.Product(*dims, want.shape)
    _close(product(lhs, rhs), want)


def _chain_program() -> str:
    """x @ w1 -> tanh -> (. @ w2^T) returned directly, and a small product left to XLA."""
    return """func.func @main(%x: tensor<32x64xf32>, %w1: tensor<64x48xf32>, %w2: tensor<40x48xf32>, %s: tensor<2x2xf32>)
    -> (tensor<32x40xf32>, tensor<2x2xf32>, tensor<32x48xf32>) {
  %0 = stablehlo.dot_general %x, %w1, contracting_dims = [1] x [0] : (tensor<32x64xf32>, tensor<64x48xf32>) -> tensor<32x48xf32>
  %1 = stablehlo.tanh %0 : tensor<32x48xf32>
  %2 = stablehlo.dot_general %1, %w2, contracting_dims = [1] x [1] : (tensor<32x48xf32>, tensor<40x48xf32>) -> tensor<32x40xf32>
  %3 = stablehlo.dot_general %s, %s, contracting_dims = [1] x [0] : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  return %2, %3, %1 : tensor<32x40xf32>, tensor<2x2xf32>, tensor<32x48xf32>
}"""


def _chain_args():
    return [RNG.standard_normal(s).astype(np.float32) for s in ((32, 64), (64, 48), (40, 48), (2, 2))]


def _chain_oracle(x, w1, w2, s):
    h = np.tanh(x.astype(np.float64) @ w1.astype(np.float64))
    return [h @ w2.astype(np.float64).T, s.astype(np.float64) @ s.astype(np.float64), h]


def test_split_takes_out_the_large_f64_products_only():
    text = _chain_program().replace("f32", "f64")
    ctx, module = parse(text, "chain")
    before = str(module)
    with ctx, ir.Location.unknown():
        plan = host_dots.split(module, min_flops=2 * 32 * 40 * 48)  # both large ones, not the 2x2
    assert str(module) == before  # the caller's module is left as it is
    assert [d.shape for d in plan.host] == [(32, 48), (32, 40)]
    kept = "".join(str(m) for m in plan.modules)
    assert kept.count("stablehlo.dot_general") == 1 and "tensor<2x2xf64>" in kept
    with ctx, ir.Location.unknown():
        assert host_dots.split(module, min_flops=math.inf) is None


def test_f32_products_are_left_to_xla():
    ctx, module = parse(_chain_program(), "chain")
    with ctx, ir.Location.unknown():
        assert host_dots.split(module, min_flops=1) is None


def test_exact_replay_with_host_products_against_numpy(monkeypatch):
    monkeypatch.setattr(host_dots, "MIN_FLOPS", 1000.0)
    args = _chain_args()
    replay = Replay(Program(_chain_program()), rounded=False)
    assert replay.host is not None and len(replay.host.host) == 2
    got = replay(list(args))
    for g, w in zip(got, _chain_oracle(*args)):
        assert g.dtype == np.float64
        _close(g, w)
    again = replay(list(args))  # callable many times, the same results bit for bit
    assert all(np.array_equal(a, b) for a, b in zip(got, again))


def test_exact_replay_without_host_products_agrees(monkeypatch):
    args = _chain_args()
    monkeypatch.setattr(host_dots, "MIN_FLOPS", math.inf)
    whole = Replay(Program(_chain_program()), rounded=False)
    assert whole.host is None
    monkeypatch.setattr(host_dots, "MIN_FLOPS", 1000.0)
    cut = Replay(Program(_chain_program()), rounded=False)
    for a, b in zip(whole(list(args)), cut(list(args))):
        _close(a, np.asarray(b, np.float64))


def test_rounded_and_f32_replays_keep_their_products(monkeypatch):
    monkeypatch.setattr(host_dots, "MIN_FLOPS", 1.0)
    assert Replay(Program(_chain_program()), rounded=True).host is None
    assert Replay(Program(_chain_program()), rounded=False, precision="f32").host is None


def test_one_blas_thread_limits_numpys_blas_for_the_block_only():
    """The BLAS NumPy links, as its own library reports its threads (threadpoolctl reads
    openblas_get_num_threads), on one thread inside the block and as before after it."""
    threadpoolctl = pytest.importorskip("threadpoolctl")

    def blas_threads():
        return [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]

    np.ones((2, 2)) @ np.ones((2, 2))  # NumPy's BLAS loaded
    before = blas_threads()
    assert before
    with host_dots.one_blas_thread():
        assert blas_threads() == [1] * len(before)
        x = RNG.standard_normal((64, 64))
        _close(x @ x.T, np.einsum("ik,jk->ij", x, x))
    assert blas_threads() == before
