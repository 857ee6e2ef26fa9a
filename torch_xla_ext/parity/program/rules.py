"""A device's precision rules for f32 dots and convolutions, which the rounded replay applies with
explicit rounding on XLA:CPU.

XLA:CPU computes an f32 dot in f32 whatever its ``precision_config`` says. Other devices do not:

* a TPU computes an f32 dot or convolution on bf16 operands in its matrix unit: at precision
  DEFAULT in one pass (each operand rounded to bf16), HIGH in 3 and HIGHEST in 6 (each operand
  split into 2 or 3 bf16 pieces, the pieces' products accumulated in f32), as XLA's own
  ``DotAlgorithmRewriter`` writes the 3- and 6-pass algorithms out for devices that lack them: the
  high piece is the operand truncated to bf16's 8 significant bits, each next piece the remainder
  rounded to bf16 (HIGH: hi*hi + (lo*hi + hi*lo); HIGHEST: hi*hi after mid*mid + hi*lo + lo*hi +
  hi*mid + mid*hi, a NaN from an infinite operand's zero piece dropped);
* XLA:GPU on Ampere and newer computes f32 dots at DEFAULT and HIGH precision with TensorFloat-32
  operands (10 explicit mantissa bits, rounded to nearest) and f32 accumulation; HIGHEST in f32.
  (Modelled from that definition; not checked against a GPU here.)

bf16 and f16 dots are untouched (their operands already are what the device multiplies); so are
f64 ones. ``torch_xla.backends.set_mat_mul_precision`` ("default", "high", "highest") is recorded
in each dot's ``precision_config``, which ``auto`` reads, with the device the program ran on.

Example:
    >>> rules = resolve("tpu-high")
    >>> rules.name, rules.source, rules.for_dot(None).passes
    ('tpu-high', 'given', 3)
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any


from torch_xla_ext.parity.errors import ParityError, ParityTypeError
from torch_xla_ext.parity.program.mlir import ir, stablehlo

__all__ = ["BF16_1", "BF16_3", "BF16_6", "F32", "NAMES", "TF32", "MatmulPrecision", "Rules", "matmul_ops",
           "resolve"]

NAMES = ("xla-cpu", "tpu-default", "tpu-high", "tpu-highest", "gpu-tf32", "auto")
MATMULS = frozenset({"stablehlo.dot", "stablehlo.dot_general", "stablehlo.convolution"})


@dataclasses.dataclass(frozen=True)
class MatmulPrecision:
    """How a device computes an f32 dot or convolution: ``passes`` bf16 passes (1, 3 or 6; 0 for
    none), or its operands rounded to ``mantissa_bits`` explicit bits (TF32: 10; f32: 23, nothing
    rounded); f32 accumulation either way. ``bits`` is the significand precision of the result's
    terms, which sets the localisation's rounding floor."""

    name: str
    passes: int = 0
    mantissa_bits: int = 23
    bits: int = 24
    words: str = "in f32"

    @property
    def rounds(self) -> bool:
        """Whether this precision differs from XLA:CPU's f32 dot."""
        return self.passes > 0 or self.mantissa_bits < 23


F32 = MatmulPrecision("f32")
BF16_1 = MatmulPrecision("bf16", passes=1, mantissa_bits=7, bits=8,
                         words="on bf16 operands in one pass (TPU precision DEFAULT)")
BF16_3 = MatmulPrecision("bf16_3x", passes=3, mantissa_bits=7, bits=16,
                         words="in 3 bf16 passes (TPU precision HIGH)")
BF16_6 = MatmulPrecision("bf16_6x", passes=6, mantissa_bits=7, bits=24,
                         words="in 6 bf16 passes (TPU precision HIGHEST)")
TF32 = MatmulPrecision("tf32", mantissa_bits=10, bits=11, words="on TensorFloat-32 operands (GPU TF32)")

_FIXED = {"xla-cpu": F32, "tpu-default": BF16_1, "tpu-high": BF16_3, "tpu-highest": BF16_6, "gpu-tf32": TF32}
_NAME_OF = {v: k for k, v in _FIXED.items()}
# What a dot's precision_config means on each device family.
_BY_CONFIG = {"tpu": {"DEFAULT": BF16_1, "HIGH": BF16_3, "HIGHEST": BF16_6},
              "gpu": {"DEFAULT": TF32, "HIGH": TF32, "HIGHEST": F32},
              "cpu": {"DEFAULT": F32, "HIGH": F32, "HIGHEST": F32}}
_ORDER = ("DEFAULT", "HIGH", "HIGHEST", "algorithm")


@dataclasses.dataclass(frozen=True)
class Rules:
    """The rules a rounded replay applies: ``name`` ("xla-cpu", "tpu-default", ..., or "per dot:
    ..." when ``auto`` read different precisions from different dots), ``source`` ("given", or
    what they were read from), the one ``precision`` every f32 matmul gets, or ``family`` to read
    each dot's own ``precision_config`` with."""

    name: str
    source: str = "given"
    precision: MatmulPrecision | None = F32
    family: str | None = None

    def for_dot(self, op: Any) -> MatmulPrecision:
        """The precision of one f32 dot or convolution (an MLIR op; None for fixed rules)."""
        if self.precision is not None:
            return self.precision
        return _precision(op, self.family)

    @property
    def rounds_matmuls(self) -> bool:
        """Whether these rules may compute an f32 matmul other than XLA:CPU does."""
        return self.precision is None or self.precision.rounds


XLA_CPU = Rules("xla-cpu")


def resolve(spec: Any, program: Any = None, device: str | None = None) -> Rules:
    """The rules ``spec`` names (one of ``NAMES``, or a :class:`Rules`). ``auto`` reads them from
    the program's dots (their ``precision_config``, or an explicit ``algorithm``) and the device
    the program ran on ("TPU", "CUDA"/"GPU", "CPU"): it needs both.

    Example:
        >>> resolve("auto", None, "CPU").name
        'xla-cpu'
    """
    if isinstance(spec, Rules):
        return spec
    if not isinstance(spec, str):
        raise ParityTypeError(f"rules: expected one of {', '.join(NAMES)}, got {type(spec).__name__}")
    if spec not in NAMES:
        raise ParityError(f"rules: expected one of {', '.join(NAMES)}, got {spec!r}")
    if spec != "auto":
        return Rules(spec, "given", _FIXED[spec])
    if not device or device == "unselected":
        raise ParityError("rules='auto': needs the device the program ran on (a capture's, or the XLA run's)")
    family = _family(device)
    if family == "cpu":
        return Rules("xla-cpu", f"read from the device ({device}): XLA:CPU computes f32 dots in f32 whatever "
                                f"their precision_config says", F32)
    if program is None:
        return Rules(f"{family} per dot", f"the device ({device}); each dot's precision_config", None, family)
    ops = matmul_ops(program)
    with program.context:
        configs = Counter(_config(op) for op in ops)
        precisions = Counter(_precision(op, family) for op in ops)
    read = ", ".join(f"{c} on {n}" for c, n in sorted(configs.items(), key=lambda kv: _ORDER.index(kv[0])))
    source = (f"read from the program's precision_config ({read} f32 dot(s) and convolution(s)) and the device "
              f"({device})" if configs else f"read from the device ({device}); the program has no f32 dot or "
                                            f"convolution")
    if len(precisions) <= 1:
        only = next(iter(precisions), _BY_CONFIG[family]["DEFAULT"])
        return Rules(_NAME_OF.get(only, "xla-cpu") if only != F32 else "xla-cpu", source, only)
    by_name = ", ".join(f"{_NAME_OF[p]} on {n}" for p, n in precisions.most_common())
    return Rules(f"per dot: {by_name}", source, None, family)


def _family(device: str) -> str:
    kind = device.split(":")[0].upper()
    if kind.startswith("TPU"):
        return "tpu"
    if kind in ("CUDA", "GPU", "ROCM"):
        return "gpu"
    return "cpu"


def matmul_ops(program: Any) -> list[Any]:
    """The program's f32 dots and convolutions (MLIR ops, every function and region): the ops
    rules apply to. Read them inside ``program.context``."""
    with program.context:
        return [op for f in program.functions for op in f.ops if is_f32_matmul(op)]


def is_f32_matmul(op: Any) -> bool:
    if op.name not in MATMULS:
        return False
    return all(str(ir.RankedTensorType(v.type).element_type) == "f32" for v in op.operands[:2])


def _precision(op: Any, family: str) -> MatmulPrecision:
    """One dot's precision on a device of ``family``: its explicit ``algorithm`` when it has one
    (bf16 operands in 1, 3 or 6 passes, TF32 or f32), else what its precision_config means there."""
    if op is not None and "algorithm" in op.attributes:
        algorithm = stablehlo.DotAlgorithm(op.attributes["algorithm"])
        operands = str(algorithm.lhs_precision_type)
        if operands == "bf16":
            return {1: BF16_1, 3: BF16_3}.get(algorithm.num_primitive_operations, BF16_6)
        return TF32 if operands == "tf32" else F32
    return _BY_CONFIG[family][_config(op)]


def _config(op: Any) -> str:
    """The higher of a dot's operands' ``precision_config`` (DEFAULT when it has none), or what an
    explicit ``algorithm`` stands for."""
    if op is None:
        return "DEFAULT"
    if "algorithm" in op.attributes:
        return "algorithm"
    if "precision_config" not in op.attributes:
        return "DEFAULT"
    values = [stablehlo.PrecisionAttr(a).value for a in ir.ArrayAttr(op.attributes["precision_config"])]
    return max(values, key=_ORDER.index, default="DEFAULT")
