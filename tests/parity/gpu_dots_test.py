"""f32 dots recorded on an NVIDIA H100 (XLA:GPU, tests/parity/fixtures/h100/README.md) against fp64
numpy models of what a GPU may compute: operands rounded to TensorFloat-32 to nearest even (RNE),
operands truncated to TF32, and f32 operands. No GPU needed: the outputs are data.

The dot: a [64, 4096] by a [4096, 64] standard-normal matrix (numpy's default_rng(0), regenerated
here and checked against the recording's hashes), at precision DEFAULT, HIGH and HIGHEST, through
XLA's Triton GEMM (default flags) and through cuBLAS.

**The bound, from the arithmetic.** A TF32 operand has 11 significant bits, so the product of two is
exact in f32 (22 <= 24 bits): against the fp64 model of the same operands, the device's only error is
its f32 accumulation, e = sum over its n-1 additions of delta_v * s_v (first order), |delta_v| <= u =
2^-24, each partial sum |s_v| <= S = sum_k |a_k b_k|, whatever the order the kernel sums in. With
the rounding errors independent and of mean zero (the model of Higham and Mary, 2019), e is a
martingale with steps bounded by u * S, and Azuma-Hoeffding gives

    |e| <= lambda * u * sqrt(n - 1) * S   with probability >= 1 - 2 exp(-lambda^2 / 2)

(Ipsen and Zhou, 2020, for inner products); lambda = sqrt(2 ln(2 m / p)) = 5.22 makes it hold on all
m = 64 * 64 outputs at once with probability >= 1 - p = 0.99, and (1 + (n-1) u) covers the second
order. The worst case, gamma_{n-1} * S, is sqrt(n) = 64 times wider and cannot tell TF32 from f32 at
n = 4096 (the accumulation's worst case is as large as TF32's operand rounding there).
"""

import hashlib
import json
import math
import pathlib

import numpy as np
import pytest

from torch_xla_ext import parity
from torch_xla_ext.parity.program import rules as rules_module

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "h100"
MANIFEST = json.loads((FIXTURES / "recordings.json").read_text())
N, M = 4096, 64 * 64  # terms per output, outputs
U = 2.0 ** -24
LAMBDA = math.sqrt(2 * math.log(2 * M / 0.01))
RECORDINGS = ("outputs_default.npz", "outputs_cublas.npz")  # Triton GEMM, cuBLAS


def _rounded_tf32(a: np.ndarray) -> np.ndarray:
    """float32 to TensorFloat-32 (1 sign, 8 exponent, 10 mantissa bits), round to nearest even."""
    bits = a.view(np.uint32).astype(np.uint64)
    return ((((bits + 0xFFF + ((bits >> 13) & 1)) >> 13) << 13).astype(np.uint32)).view(np.float32)


def _truncated_tf32(a: np.ndarray) -> np.ndarray:
    """float32 to TensorFloat-32 by dropping the low 13 mantissa bits (round toward zero)."""
    return (a.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


@pytest.fixture(scope="module")
def operands():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, N)).astype(np.float32)
    b = rng.standard_normal((N, 64)).astype(np.float32)
    for name in ("dot_default", "dot_high", "dot_highest"):  # the arguments the GPU ran, bit for bit
        recorded = MANIFEST[name]["arguments"]
        assert [hashlib.sha256(x.tobytes()).hexdigest() for x in (a, b)] == [r["sha256"] for r in recorded]
        assert hashlib.sha256((FIXTURES / f"{name}.mlir").read_bytes()).hexdigest() == MANIFEST[name]["program_sha256"]
    return a, b


def _models(a, b):
    """(fp64 result, bound) of each model: its operands' exact product and the accumulation bound."""
    out = {}
    for name, rounding in (("rne-tf32", _rounded_tf32), ("truncated-tf32", _truncated_tf32), ("f32", lambda x: x)):
        x, y = rounding(a).astype(np.float64), rounding(b).astype(np.float64)
        bound = LAMBDA * U * math.sqrt(N - 1) * (1 + (N - 1) * U) * (np.abs(x) @ np.abs(y))
        out[name] = (x @ y, bound)
    return out


def _outside(recorded, model) -> tuple[int, float]:
    """(how many outputs lie outside the model's bound, the greatest distance over the bound)."""
    exact, bound = model
    ratio = np.abs(recorded.astype(np.float64) - exact) / bound
    return int((ratio > 1).sum()), float(ratio.max())


@pytest.mark.parametrize("recording", RECORDINGS)
@pytest.mark.parametrize("program", ["dot_default", "dot_high"])
def test_default_and_high_dots_ran_on_tf32_operands_rounded_to_nearest(operands, recording, program):
    models = _models(*operands)
    recorded = np.load(FIXTURES / recording)[f"{program}/0"]
    counts = {name: _outside(recorded, m) for name, m in models.items()}
    print(program, recording, {k: f"{n}/{M} outside, greatest {r:.3g}x the bound" for k, (n, r) in counts.items()})
    assert counts["rne-tf32"][0] == 0  # every output within the RNE model's bound
    assert counts["truncated-tf32"][0] > 0 and counts["f32"][0] > 0  # and outside the other two's


@pytest.mark.parametrize("recording", RECORDINGS)
def test_highest_dots_ran_in_f32(operands, recording):
    models = _models(*operands)
    recorded = np.load(FIXTURES / recording)["dot_highest/0"]
    counts = {name: _outside(recorded, m) for name, m in models.items()}
    assert counts["f32"][0] == 0
    assert counts["rne-tf32"][0] > 0 and counts["truncated-tf32"][0] > 0


@pytest.mark.parametrize("program, rules", [("dot_default", "gpu-tf32"), ("dot_high", "gpu-tf32"),
                                            ("dot_highest", "xla-cpu")])
def test_the_replay_under_auto_on_cuda_is_the_model_the_recording_fits(operands, program, rules):
    """rules="auto" on a CUDA device reads DEFAULT and HIGH as gpu-tf32, HIGHEST as f32; the replay
    under those rules sits within the same bound of the recorded output (both recordings)."""
    text = (FIXTURES / f"{program}.mlir").read_text()
    resolved = rules_module.resolve("auto", parity.Program(text), "CUDA")
    assert resolved.name == rules
    (replayed,) = parity.replay(text, list(operands), rules="auto", device="CUDA")
    model = _models(*operands)["rne-tf32" if rules == "gpu-tf32" else "f32"]
    assert _outside(replayed, model)[0] == 0  # the replay is the model, up to its own accumulation
    for recording in RECORDINGS:
        recorded = np.load(FIXTURES / recording)[f"{program}/0"].astype(np.float64)
        distance = np.abs(recorded - replayed)
        assert (distance <= 2 * model[1]).all()  # each within the bound of the model: twice it apart at most
