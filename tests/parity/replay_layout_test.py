"""How the replays lay out torch_xla's programs for XLA:CPU: in the unrounded replays
``x @ transpose(w)`` (torch_xla's ``nn.Linear``) runs as ``transpose(w @ x^T)``, while the rounded
replay keeps torch_xla's dots (its bits are the run's) with ``w^T`` written out; both replays
schedule for memory, so a
bf16 program's weights are widened to f32 one at a time, without changing a bit.

Oracles: JAX's own XLA:CPU compile of the same product (``jnp.dot(x, w.T)`` in bf16, which XLA
computes in f32 and rounds once, as torch_xla's XLA:CPU does) for the rounded replay, bit for bit;
numpy in float64 for the unrounded replays, to the f32 summation bound; XLA's own buffer
assignment (the compiled program's temporary bytes) for the schedule. No torch_xla needed."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from torch_xla_ext import parity
from torch_xla_ext._compat import jax_mlir

BF16 = ml_dtypes.bfloat16
M, K, N = 32, 2048, 256  # K long enough that XLA:CPU's kernel splits the sum into blocks

LINEAR = f"""
func.func @main(%x: tensor<{M}x{K}xbf16>, %w: tensor<{N}x{K}xbf16>) -> tensor<{M}x{N}xbf16> {{
  %t = stablehlo.transpose %w, dims = [1, 0] : (tensor<{N}x{K}xbf16>) -> tensor<{K}x{N}xbf16>
  %d = stablehlo.dot %x, %t : (tensor<{M}x{K}xbf16>, tensor<{K}x{N}xbf16>) -> tensor<{M}x{N}xbf16>
  return %d : tensor<{M}x{N}xbf16>
}}
"""


def _args(seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((M, K)).astype(BF16), rng.standard_normal((N, K)).astype(BF16)]


def _linear(m: int, k: int, n: int) -> str:
    return f"""
func.func @main(%x: tensor<{m}x{k}xbf16>, %w: tensor<{n}x{k}xbf16>) -> tensor<{m}x{n}xbf16> {{
  %t = stablehlo.transpose %w, dims = [1, 0] : (tensor<{n}x{k}xbf16>) -> tensor<{k}x{n}xbf16>
  %d = stablehlo.dot %x, %t : (tensor<{m}x{k}xbf16>, tensor<{k}x{n}xbf16>) -> tensor<{m}x{n}xbf16>
  return %d : tensor<{m}x{n}xbf16>
}}
"""


@pytest.mark.parametrize("m, k, n", [(M, K, N), (3, 512, 64), (7, 96, 1000), (128, 768, 3072)])
def test_the_rounded_replay_keeps_torch_xlas_dots_and_xlas_bits(m, k, n):
    """Swapped, XLA:CPU would pick its kernel by the swapped output's shape, and a skinny product
    (few rows: an MoE expert's tokens) would sum in another order. The transposed weight is
    written out instead (``w^T`` laid out as the kernel reads it fastest), the operands keeping
    their roles: XLA:CPU's own ``x @ w.T``, which folds the transpose into the dot, bit for bit."""
    program = parity.Program(_linear(m, k, n))
    rounded = parity.Replay(program, rounded=True)
    assert rounded.swapped_dots == 0
    assert rounded.materialized_transposes == 1
    jax_dot = jax.jit(lambda x, w: jnp.dot(x, w.T))
    for seed in range(3):
        rng = np.random.default_rng(seed)
        x, w = rng.standard_normal((m, k)).astype(BF16), rng.standard_normal((n, k)).astype(BF16)
        (got,) = rounded([x, w])
        want = np.asarray(jax_dot(x, w)).astype(np.float32)  # XLA:CPU's own bf16 product
        assert got.shape == (m, n)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("precision", ["f32", "f64"])
def test_the_unrounded_replays_run_swapped_to_the_summation_bound(precision):
    program = parity.Program(LINEAR)
    replay = parity.Replay(program, rounded=False, precision=precision)
    assert replay.swapped_dots == 1
    x, w = _args(7)
    (got,) = replay([x, w])
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    want = x64 @ w64.T
    # bf16 x bf16 products are exact in f32 and f64; a K-term sum errs by at most
    # K * unit roundoff * sum |x||w| (a loose bound: blocked sums err far less).
    unit = {"f32": 2.0 ** -24, "f64": 2.0 ** -53}[precision]
    bound = K * unit * (np.abs(x64) @ np.abs(w64).T)
    assert got.dtype == np.dtype(precision.replace("f", "float"))
    assert np.all(np.abs(got - want) <= bound)


def test_only_plain_matrix_products_of_a_transposed_rhs_are_swapped():
    untransposed = f"""
    func.func @main(%x: tensor<4x8xf32>, %w: tensor<8x3xf32>) -> tensor<4x3xf32> {{
      %d = stablehlo.dot %x, %w : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
      return %d : tensor<4x3xf32>
    }}"""
    batched = """
    func.func @main(%x: tensor<2x4x8xf32>, %w: tensor<2x3x8xf32>) -> tensor<2x4x3xf32> {
      %t = stablehlo.transpose %w, dims = [0, 2, 1] : (tensor<2x3x8xf32>) -> tensor<2x8x3xf32>
      %d = stablehlo.dot_general %x, %t, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<2x4x8xf32>, tensor<2x8x3xf32>) -> tensor<2x4x3xf32>
      return %d : tensor<2x4x3xf32>
    }"""
    general = """
    func.func @main(%x: tensor<4x8xf32>, %w: tensor<3x8xf32>) -> tensor<4x3xf32> {
      %t = stablehlo.transpose %w, dims = [1, 0] : (tensor<3x8xf32>) -> tensor<8x3xf32>
      %d = stablehlo.dot_general %x, %t, contracting_dims = [1] x [0] : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
      return %d : tensor<4x3xf32>
    }"""
    rng = np.random.default_rng(0)
    for text, shapes, swapped in ((untransposed, [(4, 8), (8, 3)], 0), (batched, [(2, 4, 8), (2, 3, 8)], 0),
                                  (general, [(4, 8), (3, 8)], 1)):
        args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        replay = parity.Replay(parity.Program(text), rounded=False)
        assert replay.swapped_dots == swapped, text
        x, w = (a.astype(np.float64) for a in args)
        want = np.einsum("bik,bjk->bij", x, w) if x.ndim == 3 else (x @ w if swapped == 0 else x @ w.T)
        np.testing.assert_allclose(replay(args)[0], want, rtol=1e-12, atol=1e-12)


def _chain(layers: int, width: int) -> str:
    """h = h @ w_i for ``layers`` bf16 weights: each weight's f32 copy is read by one dot only."""
    args = ", ".join(f"%w{i}: tensor<{width}x{width}xbf16>" for i in range(layers))
    body, h = [], "%x"
    for i in range(layers):
        body.append(f"%h{i} = stablehlo.dot {h}, %w{i} : (tensor<8x{width}xbf16>, tensor<{width}x{width}xbf16>) "
                    f"-> tensor<8x{width}xbf16>")
        h = f"%h{i}"
    lines = "\n  ".join(body)
    return (f"func.func @main(%x: tensor<8x{width}xbf16>, {args}) -> tensor<8x{width}xbf16> {{\n  {lines}\n"
            f"  return {h} : tensor<8x{width}xbf16>\n}}")


def test_the_replays_widen_a_bf16_programs_weights_one_at_a_time(monkeypatch):
    """The schedule XLA:CPU picks by default converts every weight to f32 at the start, each into
    its own buffer; the memory schedule converts each before its dot, so its temporaries hold a
    few f32 weights, whatever their number. Same bits either way."""
    layers, width = 12, 256
    weight_f32 = width * width * 4
    program = parity.Program(_chain(layers, width))
    replay = parity.Replay(program, rounded=True)
    temp = replay.executables[0].get_compiled_memory_stats().temp_size_in_bytes
    assert temp <= 3 * weight_f32, (temp, weight_f32)

    # The same replay compiled with XLA:CPU's default schedule: every f32 weight at once (what the
    # bound above is there to catch), and the same results bit for bit.
    compile_replicated = jax_mlir.compile_replicated
    monkeypatch.setattr(jax_mlir, "compile_replicated",
                        lambda *a, memory_schedule=False, **k: compile_replicated(*a, **k))
    default = parity.Replay(program, rounded=True)
    assert default.executables[0].get_compiled_memory_stats().temp_size_in_bytes >= layers * weight_f32
    rng = np.random.default_rng(3)
    args = [rng.standard_normal((8, width)).astype(BF16)] + [
        (rng.standard_normal((width, width)) / 16).astype(BF16) for _ in range(layers)]
    np.testing.assert_array_equal(replay(args)[0], default(args)[0])
