"""The bound behind "the run equals its rounded replay" (causes.replay_bound, docs/parity.md),
against numpy: two evaluations of the same rounded program that differ only in summation order
stay within it, on every seed, although their bits differ; a run that rounds where the replay
does not, or does not round where it does, leaves it. No XLA needed: numpy computes both sides,
in f32 with explicit bf16 rounding, and the program's exact math in f64."""

import math

import ml_dtypes
import numpy as np

from torch_xla_ext.parity import causes

BF16 = ml_dtypes.bfloat16
f32 = np.float32
U32 = 2.0 ** -24  # f32's unit roundoff: the compute type's


def _sum(terms: np.ndarray, order: str) -> np.ndarray:
    """Sums ``terms`` (…, n) in f32 along the last axis in one of three orders: left to right,
    right to left, or in blocks of 8 summed pairwise (as a vectorised kernel does)."""
    if order == "forward":
        acc = np.zeros(terms.shape[:-1], f32)
        for k in range(terms.shape[-1]):
            acc = (acc + terms[..., k]).astype(f32)
        return acc
    if order == "backward":
        return _sum(terms[..., ::-1], "forward")
    blocks = [_sum(terms[..., i:i + 8], "forward") for i in range(0, terms.shape[-1], 8)]
    while len(blocks) > 1:
        blocks = [(blocks[i] + blocks[i + 1]).astype(f32) if i + 1 < len(blocks) else blocks[i]
                  for i in range(0, len(blocks), 2)]
    return blocks[0]


def _layers(x, weights, order: str, round_to_bf16: bool = True, operands_bf16: bool = False):
    """A stack of tanh(x @ w) layers as a bf16 program computes it: products of bf16 values exact
    in f32, the sum in f32 in ``order``, the result rounded to bf16, tanh in f32 rounded to bf16.
    ``round_to_bf16=False``: no rounding (an f32 program). ``operands_bf16``: an f32 program whose
    dot operands are rounded to bf16 first (a TPU's DEFAULT precision)."""
    h = x.astype(f32)
    for w in weights:
        a, b = h, w.astype(f32)
        if operands_bf16:
            a, b = a.astype(BF16).astype(f32), b.astype(BF16).astype(f32)
        s = _sum(a[:, None, :] * b[None, :, :], order)
        if round_to_bf16:
            s = s.astype(BF16).astype(f32)
        h = np.tanh(s).astype(f32)
        if round_to_bf16:
            h = h.astype(BF16).astype(f32)
    return h


def _exact(x, weights):
    h = x.astype(np.float64)
    for w in weights:
        h = np.tanh(h @ w.astype(np.float64).T)
    return h


def _figures(run, replay, exact, n):
    d = float(np.abs(run.astype(np.float64) - replay).max())
    e_run = float(np.abs(run - exact).max())
    e_replay = float(np.abs(replay - exact).max())
    return d, causes.replay_bound(e_run, e_replay, float(np.abs(exact).max()), n, U32)


def _case(seed, n=1024, width=128, depth=2, dtype=BF16, batch=32):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, n)).astype(dtype)
    weights = [(rng.standard_normal((width, n if k == 0 else width)) / math.sqrt(n if k == 0 else width)).astype(dtype)
               for k in range(depth)]
    return x, weights


def test_two_summation_orders_of_one_bf16_program_stay_within_the_bound():
    flipped = 0
    for seed in range(4):
        x, weights = _case(seed)
        exact = _exact(x, weights)
        replay = _layers(x, weights, "forward").astype(np.float64)
        for order in ("backward", "blocked"):
            run = _layers(x, weights, order)
            d, bound = _figures(run, replay, exact, 256)
            flipped += d > 0
            assert d <= bound, (seed, order, d, bound)
    assert flipped > 0  # the orders really do differ somewhere, or the check above proves nothing


def test_two_summation_orders_of_one_f32_program_stay_within_the_bound():
    for seed in range(3):
        x, weights = _case(seed, dtype=f32)
        exact = _exact(x, weights)
        replay = _layers(x, weights, "forward", round_to_bf16=False).astype(np.float64)
        run = _layers(x, weights, "blocked", round_to_bf16=False)
        d, bound = _figures(run, replay, exact, 1024)
        assert 0 < d <= bound, (seed, d, bound)


def test_a_rounding_the_replay_does_not_make_leaves_the_bound():
    """An f32 program run with bf16-rounded dot operands (a TPU at DEFAULT precision) against its
    replay with XLA:CPU's f32 dots: the run carries roundings 2^16 times coarser than the replay's."""
    for seed in range(3):
        x, weights = _case(seed, dtype=f32)
        exact = _exact(x, weights)
        replay = _layers(x, weights, "forward", round_to_bf16=False).astype(np.float64)
        run = _layers(x, weights, "blocked", round_to_bf16=False, operands_bf16=True)
        d, bound = _figures(run, replay, exact, 1024)
        assert d > 10 * bound, (seed, d, bound)


def test_a_run_that_rounds_less_than_its_replay_leaves_the_bound():
    """The other way round: the run computes in f32 where the replay rounds to bf16 (replaying
    another device's rules on a run that never had them). Each one's error alone would allow the
    difference; the smaller one, the run's, does not."""
    for seed in range(3):
        x, weights = _case(seed, dtype=f32)
        exact = _exact(x, weights)
        replay = _layers(x, weights, "forward", round_to_bf16=False, operands_bf16=True).astype(np.float64)
        run = _layers(x, weights, "blocked", round_to_bf16=False)
        d, bound = _figures(run, replay, exact, 1024)
        assert d > 10 * bound, (seed, d, bound)


def test_the_bound_is_twice_the_smaller_error_plus_one_reordered_sum():
    assert causes.replay_bound(3.0, 1.0, 0.0, 64, U32) == 2.0
    assert causes.replay_bound(0.0, 0.0, 1.0, 64, U32) == 2 * 8 * U32


def test_distances_treat_nan_against_nan_and_an_infinity_against_itself_as_agreeing():
    inf, nan = math.inf, math.nan
    exact = np.array([1.0, 2.0, inf, nan, 3.0])
    run = np.array([1.0, 2.5, inf, nan, 3.0], f32)
    # Same NaN and same infinity: no distance there; the exact math's non-finite elements are left
    # out of the errors (the run's 2.5 against the exact 2.0 is its error).
    assert causes.replay_figures(run, run.copy(), exact, 1)[:3] == (0.0, 0.5, 0.5)
    assert causes.replay_figures(run, np.array([1.0, 2.5, -inf, nan, 3.0]), exact, 1)[0] == inf
    assert causes.replay_figures(run, np.array([1.0, 2.5, inf, 7.0, 3.0]), exact, 1)[0] == inf
    assert causes.replay_figures(run, np.array([1.0, 2.25, inf, nan, 3.0]), exact, 1)[0] == 0.25
    # float32 and float64 arrays are read as they are: errors against a float64 golden, in float64.
    import torch
    golden = torch.tensor([1.0, 2.0 + 2.0 ** -30], dtype=torch.float64)
    assert causes.golden_errors(np.array([1.0, 2.0], f32), golden) == (2.0 ** -30, 2.0 ** -31)
    assert causes.golden_errors(np.array([1.0, 2.0], ml_dtypes.bfloat16), golden) == (2.0 ** -30, 2.0 ** -31)
