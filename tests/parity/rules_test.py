"""Another device's precision rules for f32 matmuls, replayed on XLA:CPU (and applied to torch's
CPU matmuls for the localisation's shadows).

Oracles: pytorch/xla's test/test_mat_mul_precision.py windows (a product of two diagonal
1024x1024 matrices with entries in [0.99, 1.01] against torch's fp64 product: for b = 8, 14, 22
bits at DEFAULT, HIGH, HIGHEST, atol = (1+2^-b)^2 - 1 passes, atol/4 does not, and the product is
not exact); fp64 numpy with operands rounded to TF32 (10 mantissa bits, round to nearest even,
written here apart) for gpu-tf32, which no GPU here checks; fp64 numpy with operands rounded to
bf16 for a convolution at tpu-default; torch_xla itself for the precision_config it records."""

import numpy as np
import pytest
import torch

from torch_xla_ext import parity
from torch_xla_ext.parity.matmul_precision import on_cpu
from torch_xla_ext.parity.program import rules

N = 1024
DIAG = f"""func.func @main(%x: tensor<{N}x{N}xf32>, %y: tensor<{N}x{N}xf32>) -> tensor<{N}x{N}xf32> {{
  %0 = stablehlo.dot_general %x, %y, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<{N}x{N}xf32>, tensor<{N}x{N}xf32>) -> tensor<{N}x{N}xf32>
  return %0 : tensor<{N}x{N}xf32>
}}"""
WINDOWS = [("tpu-default", 8), ("tpu-high", 14), ("tpu-highest", 22)]


def _diagonal(seed):
    torch.manual_seed(seed)
    eye = torch.eye(N, dtype=torch.float64)
    return eye * torch.testing.make_tensor((N, N), dtype=torch.float64, device="cpu", low=0.99, high=1.01)


@pytest.fixture(scope="module")
def diagonals():
    x, y = _diagonal(0), _diagonal(1)
    return x, y, x @ y


def _close(actual, reference, atol) -> bool:
    try:
        torch.testing.assert_close(actual, reference, rtol=0.0, atol=atol)
    except AssertionError:
        return False
    return True


def _in_window(actual, reference, bits) -> bool:
    """pytorch/xla's assertion: within (1+2^-b)^2 - 1, not within a quarter of it, not exact."""
    widest = -1 + ((2 ** bits + 1) / 2 ** bits) ** 2
    return (_close(actual, reference, widest) and not _close(actual, reference, widest / 4)
            and not torch.equal(actual, reference))


@pytest.mark.parametrize("name, bits", WINDOWS)
def test_the_replay_is_in_pytorch_xlas_tpu_precision_window(diagonals, name, bits):
    x, y, reference = diagonals
    (out,) = parity.replay(DIAG, [x.float().numpy(), y.float().numpy()], rules=name)
    assert _in_window(torch.from_numpy(out).double(), reference, bits)


def test_xla_cpus_own_rules_are_f32_and_miss_the_default_window(diagonals):
    """The control: XLA:CPU's f32 dot is far inside the DEFAULT window, so the check above can fail."""
    x, y, reference = diagonals
    (out,) = parity.replay(DIAG, [x.float().numpy(), y.float().numpy()], rules="xla-cpu")
    assert not _in_window(torch.from_numpy(out).double(), reference, 8)
    assert not _in_window(torch.from_numpy(out).double(), reference, 14)
    assert _in_window(torch.from_numpy(out).double(), reference, 22)  # f32 itself: the inputs' own rounding


@pytest.mark.parametrize("name, bits", WINDOWS)
def test_torchs_cpu_matmul_under_the_rules_is_in_the_same_window(diagonals, name, bits):
    x, y, reference = diagonals
    with on_cpu(rules.resolve(name)):
        out = x.float() @ y.float()
    assert _in_window(out.double(), reference, bits)


def _tf32(a: np.ndarray) -> np.ndarray:
    """float32 rounded to TensorFloat-32 (1 sign, 8 exponent, 10 mantissa bits), to nearest even."""
    bits = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    keep = (bits >> 13) & 1
    rounded = ((bits + 0xFFF + keep) >> 13) << 13
    return rounded.astype(np.uint32).view(np.float32)


GEMM = """func.func @main(%x: tensor<64x300xf32>, %w: tensor<300x50xf32>) -> tensor<64x50xf32> {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<64x300xf32>, tensor<300x50xf32>) -> tensor<64x50xf32>
  return %0 : tensor<64x50xf32>
}"""


def test_gpu_tf32_rounds_the_operands_to_ten_mantissa_bits_and_accumulates_in_f32():
    """Modelled from TF32's definition, not checked on a GPU (none here)."""
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((64, 300)).astype(np.float32), rng.standard_normal((300, 50)).astype(np.float32)
    oracle = _tf32(x).astype(np.float64) @ _tf32(w).astype(np.float64)
    # f32 accumulation of 300 products (each exact in f32: 11 x 11 significant bits): gamma_300
    # of the sum of the products' magnitudes.
    bound = 300 * 2.0 ** -24 * (np.abs(_tf32(x)).astype(np.float64) @ np.abs(_tf32(w)).astype(np.float64))
    (got,) = parity.replay(GEMM, [x, w], rules="gpu-tf32")
    assert (np.abs(got - oracle) <= bound).all()
    (f32,) = parity.replay(GEMM, [x, w], rules="xla-cpu")
    assert (np.abs(f32 - oracle) > bound).any()  # the rounding of the operands shows: the check can fail
    with on_cpu(rules.resolve("gpu-tf32")):
        torch_got = (torch.from_numpy(x) @ torch.from_numpy(w)).numpy()
    assert (np.abs(torch_got - oracle) <= bound).all()


CONV = """func.func @main(%x: tensor<2x5x9x9xf32>, %k: tensor<4x5x3x3xf32>) -> tensor<2x4x7x7xf32> {
  %0 = stablehlo.convolution(%x, %k) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<2x5x9x9xf32>, tensor<4x5x3x3xf32>) -> tensor<2x4x7x7xf32>
  return %0 : tensor<2x4x7x7xf32>
}"""


def test_a_convolution_at_tpu_default_multiplies_bf16_rounded_operands():
    import ml_dtypes

    rng = np.random.default_rng(4)
    x, k = rng.standard_normal((2, 5, 9, 9)).astype(np.float32), rng.standard_normal((4, 5, 3, 3)).astype(np.float32)
    xb, kb = (a.astype(ml_dtypes.bfloat16).astype(np.float64) for a in (x, k))
    oracle = torch.nn.functional.conv2d(torch.from_numpy(xb), torch.from_numpy(kb)).numpy()
    bound = 45 * 2.0 ** -24 * torch.nn.functional.conv2d(torch.from_numpy(np.abs(xb)),
                                                          torch.from_numpy(np.abs(kb))).numpy()
    (got,) = parity.replay(CONV, [x, k], rules="tpu-default")
    assert (np.abs(got - oracle) <= bound).all()
    (f32,) = parity.replay(CONV, [x, k], rules="xla-cpu")
    assert (np.abs(f32 - oracle) > bound).any()


def test_bf16_programs_and_f64_dots_are_left_alone():
    program = parity.Program(GEMM.replace("f32", "bf16"))
    assert parity.Replay(program, rounded=True, rules="tpu-default").applied == {}
    program = parity.Program(GEMM)
    assert parity.Replay(program, rounded=True, rules="tpu-high").applied == {"bf16_3x": 1}
    assert parity.Replay(program, rounded=False, rules="tpu-high").applied == {}  # the exact math is exact


def test_auto_reads_each_dots_precision_config_and_the_device():
    text = GEMM.replace("contracting_dims = [1] x [0]", "contracting_dims = [1] x [0], precision = [HIGH, HIGH]")
    program = parity.Program(text)
    r = rules.resolve("auto", program, "TPU")
    assert (r.name, r.precision) == ("tpu-high", rules.BF16_3)
    assert "precision_config (HIGH on 1 f32 dot(s)" in r.source and "device (TPU)" in r.source
    assert rules.resolve("auto", program, "CUDA").name == "gpu-tf32"
    assert rules.resolve("auto", parity.Program(text.replace("HIGH", "HIGHEST")), "CUDA").name == "xla-cpu"
    cpu = rules.resolve("auto", program, "CPU")
    assert cpu.name == "xla-cpu" and "XLA:CPU computes f32 dots in f32" in cpu.source
    two = parity.Program("""func.func @main(%x: tensor<64x300xf32>, %w: tensor<300x50xf32>) -> (tensor<64x50xf32>, tensor<64x50xf32>) {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0], precision = [HIGH, HIGH] : (tensor<64x300xf32>, tensor<300x50xf32>) -> tensor<64x50xf32>
  %1 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<64x300xf32>, tensor<300x50xf32>) -> tensor<64x50xf32>
  return %0, %1 : tensor<64x50xf32>, tensor<64x50xf32>
}""")
    mixed = rules.resolve("auto", two, "TPU")
    assert mixed.precision is None and "tpu-high on 1" in mixed.name and "tpu-default on 1" in mixed.name
    assert parity.Replay(two, rounded=True, rules=mixed).applied == {"bf16_3x": 1, "bf16": 1}
    with pytest.raises(parity.ParityError, match="needs the device"):
        rules.resolve("auto", program, None)
    with pytest.raises(parity.ParityError, match="rules: expected one of xla-cpu"):
        rules.resolve("tpu-fast")


def test_torch_xla_records_set_mat_mul_precision_in_each_dots_precision_config():
    """torch_xla 2.9's default is "default"; set_mat_mul_precision changes what each dot and
    convolution it lowers asks for (and XLA:CPU computes f32 either way)."""
    import torch_xla
    import torch_xla.backends

    from torch_xla_ext._compat import hlo

    dev = torch_xla.device()
    x, w = torch.randn(8, 64), torch.randn(32, 64)
    img, k = torch.randn(1, 3, 8, 8), torch.randn(4, 3, 3, 3)
    before = torch_xla.backends.get_mat_mul_precision()
    try:
        for setting, expected in (("high", "tpu-high"), ("default", "tpu-default")):
            torch_xla.backends.set_mat_mul_precision(setting)
            y = torch.nn.functional.linear(x.to(dev), w.to(dev))
            c = torch.nn.functional.conv2d(img.to(dev), k.to(dev))
            program = parity.Program.from_hlo_proto(hlo.lowered_hlo_proto([y, c]))
            assert len(rules.matmul_ops(program)) == 2
            assert rules.resolve("auto", program, "TPU").name == expected
            torch.testing.assert_close(y.cpu(), x @ w.T, rtol=1e-5, atol=1e-5)  # XLA:CPU: f32 whatever it asks
    finally:
        torch_xla.backends.set_mat_mul_precision(before)


def _truncated_tf32(a: np.ndarray) -> np.ndarray:
    return (a.astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


ALGORITHM_X3 = GEMM.replace("contracting_dims = [1] x [0] :", "contracting_dims = [1] x [0], algorithm = <lhs_precision_type = "
                            "tf32, rhs_precision_type = tf32, accumulation_type = f32, lhs_component_count = 1, "
                            "rhs_component_count = 1, num_primitive_operations = 3, allow_imprecise_accumulation = "
                            "false> :")


def test_a_new_rule_is_one_entry_of_the_registry(monkeypatch):
    """XLA:GPU's 3xTF32 (each operand a truncated TF32 high part and the rounded rest; lo*hi + hi*lo,
    then + hi*hi), added as one Rule: the replay's rewrite, torch's CPU matmuls, the report's words,
    the CLI's help and auto's reading of an explicit algorithm all follow it. Oracle: fp64 numpy on
    the pieces, written apart here, to the f32 accumulation bound of its 3 * 300 products."""
    from torch_xla_ext.parity import wording

    rule = rules.Rule("gpu-tf32x3", "the GPU", "in 3 TensorFloat-32 passes (TF32_TF32_F32_X3)",
                      "XLA:GPU's TF32_TF32_F32_X3 algorithm: 3 TF32 passes",
                      rules.MatmulPrecision("tf32_3x", pieces=2, mantissa_bits=10, bits=22, partial=((1, 0), (0, 1))),
                      highest="in f32", algorithms=(("tf32", 3),))
    monkeypatch.setattr(rules, "REGISTRY", rules.REGISTRY + (rule,))
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((64, 300)).astype(np.float32), rng.standard_normal((300, 50)).astype(np.float32)
    pieces = []
    for a in (x, w):
        hi = _truncated_tf32(a)
        pieces.append((hi.astype(np.float64), _tf32((a - hi).astype(np.float32)).astype(np.float64)))
    (xh, xl), (wh, wl) = pieces
    oracle = xl @ wh + xh @ wl + xh @ wh
    bound = 3 * 300 * 2.0 ** -24 * (np.abs(xl) @ np.abs(wh) + np.abs(xh) @ np.abs(wl) + np.abs(xh) @ np.abs(wh))
    (got,) = parity.replay(GEMM, [x, w], rules="gpu-tf32x3")
    assert (np.abs(got - oracle) <= bound).all()
    (one_pass,) = parity.replay(GEMM, [x, w], rules="gpu-tf32")
    assert (np.abs(one_pass - oracle) > bound).any()  # the low pieces show: the check can fail
    with on_cpu(rules.resolve("gpu-tf32x3")):
        torch_got = (torch.from_numpy(x) @ torch.from_numpy(w)).numpy()
    assert (np.abs(torch_got - oracle) <= bound).all()
    assert "gpu-tf32x3: XLA:GPU's TF32_TF32_F32_X3 algorithm: 3 TF32 passes" in rules.cli_help()
    assert wording.rules_words("gpu-tf32x3", "given") == (
        "The rounded replay applied the gpu-tf32x3 rules (the GPU computes f32 dots and convolutions in 3 "
        "TensorFloat-32 passes (TF32_TF32_F32_X3)), as given.")
    program = parity.Program(ALGORITHM_X3)
    assert rules.resolve("auto", program, "CUDA").name == "gpu-tf32x3"
    assert parity.Replay(program, rounded=True, rules="auto", device="CUDA").applied == {"tf32_3x": 1}
