"""A device's precision rules for f32 dots and convolutions, which the rounded replay applies with
explicit rounding on XLA:CPU: one registry of :class:`Rule` objects, each holding everything about
its rule (its name, the words a report says of it, its line of CLI help, the arithmetic both the
replay's rewrite and torch's CPU matmuls follow, and what ``rules="auto"`` reads as it). A new rule
is one entry of :data:`REGISTRY`.

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
  Checked against outputs recorded on an H100 (tests/parity/gpu_recordings_test.py).

bf16 and f16 dots are untouched (their operands already are what the device multiplies); so are
f64 ones. ``torch_xla.backends.set_mat_mul_precision`` ("default", "high", "highest") is recorded
in each dot's ``precision_config``, which ``auto`` reads, with the device the program ran on.

Example:
    >>> rules = resolve("tpu-high")
    >>> rules.name, rules.source, rules.for_dot(None).passes
    ('tpu-high', 'given', 3)
    >>> by_name("gpu-tf32").how
    'on TensorFloat-32 operands (10 mantissa bits)'
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

from torch_xla_ext.parity.errors import ParityError, ParityTypeError
from torch_xla_ext.parity.program.mlir import ir, stablehlo

__all__ = ["AUTO", "BF16_1", "BF16_3", "BF16_6", "F32", "NAMES", "REGISTRY", "TF32", "XLA_CPU", "MatmulPrecision",
           "Rule", "Rules", "by_name", "cli_help", "is_f32_matmul", "matmul_ops", "resolve"]

MATMULS = frozenset({"stablehlo.dot", "stablehlo.dot_general", "stablehlo.convolution"})
AUTO = "auto"
F32_MANTISSA_BITS = 23


@dataclasses.dataclass(frozen=True)
class MatmulPrecision:
    """How a device computes an f32 dot or convolution, as data that the replay's rewrite
    (:func:`~torch_xla_ext.parity.program.rewrite.apply_rules`) and torch's CPU matmuls
    (:mod:`~torch_xla_ext.parity.matmul_precision`) both follow, with f32 accumulation either way:

    * each operand split into ``pieces`` pieces of ``mantissa_bits`` explicit mantissa bits,
      largest first: every piece but the last is the remainder truncated to them, the last the
      remainder rounded to nearest (0 pieces: the operands as they are, f32);
    * one piece: the product of the two pieces; more: the products of the piece pairs
      ``partial`` (lhs piece, rhs piece) summed in that order, a non-finite partial sum dropped
      (an infinite operand's small pieces are 0, and inf * 0 is NaN), then the high pieces'
      product added last.

    ``bits`` is the significand precision of the result's terms, which sets the localisation's
    rounding floor; ``name`` keys the replay's count of the matmuls it changed."""

    name: str
    pieces: int = 0
    mantissa_bits: int = F32_MANTISSA_BITS
    partial: tuple[tuple[int, int], ...] = ()
    bits: int = 24

    @property
    def passes(self) -> int:
        """How many products of pieces the device computes (0: an f32 product)."""
        return len(self.partial) + 1 if self.pieces else 0

    @property
    def rounds(self) -> bool:
        """Whether this precision differs from XLA:CPU's f32 dot."""
        return self.pieces > 0


F32 = MatmulPrecision("f32")
BF16_1 = MatmulPrecision("bf16", pieces=1, mantissa_bits=7, bits=8)
BF16_3 = MatmulPrecision("bf16_3x", pieces=2, mantissa_bits=7, bits=16, partial=((1, 0), (0, 1)))
BF16_6 = MatmulPrecision("bf16_6x", pieces=3, mantissa_bits=7, bits=24,
                         partial=((1, 1), (0, 2), (2, 0), (0, 1), (1, 0)))
TF32 = MatmulPrecision("tf32", pieces=1, mantissa_bits=10, bits=11)


@dataclasses.dataclass(frozen=True)
class Rule:
    """One device rule: ``name`` (what ``rules=`` and ``--rules`` take), ``device`` and ``how``
    (a report's words: "<device> computes f32 dots and convolutions <how>"), ``help`` (its line of
    the CLI's ``--rules`` help), ``precision`` (the arithmetic), ``highest`` (what
    ``set_mat_mul_precision('highest')`` does on that device, for the lead sentence's advice;
    None: it already is the highest), ``auto`` (the (device family, precision_config) pairs that
    ``rules="auto"`` reads as this rule) and ``algorithms`` (the explicit dot algorithms, as
    (operand type, primitive operations), that compute this way)."""

    name: str
    device: str
    how: str
    help: str
    precision: MatmulPrecision
    highest: str | None = None
    auto: tuple[tuple[str, str], ...] = ()
    algorithms: tuple[tuple[str, int], ...] = ()


# The registry: everything about a rule is its entry here.
REGISTRY: tuple[Rule, ...] = (
    Rule("xla-cpu", "XLA:CPU", "in f32", "XLA:CPU's own: f32 dots in f32 (whatever their precision_config asks)",
         F32, auto=(("cpu", "DEFAULT"), ("cpu", "HIGH"), ("cpu", "HIGHEST"), ("gpu", "HIGHEST")),
         algorithms=(("f32", 1),)),
    Rule("tpu-default", "the TPU", "on bf16 operands in one pass (precision DEFAULT)",
         "a TPU at precision DEFAULT: bf16 operands, one pass", BF16_1, highest="in 6 bf16 passes",
         auto=(("tpu", "DEFAULT"),), algorithms=(("bf16", 1),)),
    Rule("tpu-high", "the TPU", "in 3 bf16 passes (precision HIGH, about 16 bits)",
         "a TPU at precision HIGH: 3 bf16 passes", BF16_3, highest="in 6 bf16 passes",
         auto=(("tpu", "HIGH"),), algorithms=(("bf16", 3),)),
    Rule("tpu-highest", "the TPU", "in 6 bf16 passes (precision HIGHEST, about f32's 24 bits)",
         "a TPU at precision HIGHEST: 6 bf16 passes", BF16_6, auto=(("tpu", "HIGHEST"),),
         algorithms=(("bf16", 6),)),
    Rule("gpu-tf32", "the GPU", "on TensorFloat-32 operands (10 mantissa bits)",
         "XLA:GPU (Ampere and newer) at precision DEFAULT or HIGH: TensorFloat-32 operands", TF32,
         highest="in f32", auto=(("gpu", "DEFAULT"), ("gpu", "HIGH")), algorithms=(("tf32", 1),)),
)
# What ``rules=`` takes (``parity.RULES``): every registered rule, and "auto".
NAMES = tuple(r.name for r in REGISTRY) + (AUTO,)
# Which device family a device type belongs to, for ``auto``; anything else is read as a CPU.
_FAMILIES = {"TPU": "tpu", "CUDA": "gpu", "GPU": "gpu", "ROCM": "gpu"}
_ORDER = ("DEFAULT", "HIGH", "HIGHEST", "algorithm")
# What a capture made before captures named their device says it ran on.
UNKNOWN_DEVICE = "unknown"


def by_name(name: str) -> Rule | None:
    """The registered rule called ``name`` (None for "auto" and "per dot: ..." rules)."""
    return next((r for r in REGISTRY if r.name == name), None)


def _names() -> tuple[str, ...]:
    return tuple(r.name for r in REGISTRY) + (AUTO,)


def _read_as(family: str, config: str) -> Rule:
    """The rule ``rules="auto"`` reads a dot's ``precision_config`` as on a device of ``family``."""
    return next(r for r in REGISTRY if (family, config) in r.auto)


def cli_help() -> str:
    """The CLI's ``--rules`` help, from the registry."""
    listed = "; ".join(f"{r.name}: {r.help}" for r in REGISTRY)
    return (f"the device precision rules the rounded replay applies to f32 dots and convolutions: {AUTO} (default: "
            f"each dot's precision_config on the device the run or the capture used); {listed}")


@dataclasses.dataclass(frozen=True)
class Rules:
    """The rules a rounded replay applies: ``name`` (a registered rule's, or "per dot: ..." when
    ``auto`` read different precisions from different dots), ``source`` ("given", or what they
    were read from), the one ``precision`` every f32 matmul gets, or ``family`` to read each dot's
    own ``precision_config`` with."""

    name: str
    source: str = "given"
    precision: MatmulPrecision | None = F32
    family: str | None = None

    def for_dot(self, op: Any) -> MatmulPrecision:
        """The precision of one f32 dot or convolution (an MLIR op; None for fixed rules)."""
        if self.precision is not None:
            return self.precision
        return _rule_of(op, self.family).precision

    @property
    def rounds_matmuls(self) -> bool:
        """Whether these rules may compute an f32 matmul other than XLA:CPU does."""
        return self.precision is None or self.precision.rounds


XLA_CPU = Rules("xla-cpu")


def resolve(spec: Any, program: Any = None, device: str | None = None) -> Rules:
    """The rules ``spec`` names (one of ``NAMES``, or a :class:`Rules`). ``auto`` reads them from
    the program's dots (their ``precision_config``, or an explicit ``algorithm``) and the device
    the program ran on ("TPU", "CUDA"/"GPU", "CPU"): it needs the device; a capture that does
    not name it ("unknown") gets XLA:CPU's rules, and the source says why.

    Example:
        >>> resolve("auto", None, "CPU").name
        'xla-cpu'
    """
    if isinstance(spec, Rules):
        return spec
    names = _names()
    if not isinstance(spec, str):
        raise ParityTypeError(f"rules: expected one of {', '.join(names)}, got {type(spec).__name__}")
    if spec not in names:
        raise ParityError(f"rules: expected one of {', '.join(names)}, got {spec!r}")
    if spec != AUTO:
        return Rules(spec, "given", by_name(spec).precision)
    if not device or device == "unselected":
        raise ParityError("rules='auto': needs the device the program ran on (a capture's, or the XLA run's)")
    if device == UNKNOWN_DEVICE:
        return Rules("xla-cpu", "auto, but the capture does not name the device it ran on: XLA:CPU's rules", F32)
    family = _FAMILIES.get(device.split(":")[0].upper(), "cpu")
    if family == "cpu":
        return Rules("xla-cpu", f"read from the device ({device}): XLA:CPU computes f32 dots in f32 whatever "
                                f"their precision_config says", F32)
    if program is None:
        return Rules(f"{family} per dot", f"the device ({device}); each dot's precision_config", None, family)
    ops = matmul_ops(program)
    with program.context:
        configs = Counter(_config(op) for op in ops)
        found = Counter(_rule_of(op, family).name for op in ops)
    read = ", ".join(f"{c} on {n}" for c, n in sorted(configs.items(), key=lambda kv: _ORDER.index(kv[0])))
    source = (f"read from the program's precision_config ({read} f32 dot(s) and convolution(s)) and the device "
              f"({device})" if configs else f"read from the device ({device}); the program has no f32 dot or "
                                            f"convolution")
    if len(found) <= 1:
        only = by_name(next(iter(found))) if found else _read_as(family, "DEFAULT")
        return Rules(only.name, source, only.precision)
    by_rule = ", ".join(f"{name} on {n}" for name, n in found.most_common())
    return Rules(f"per dot: {by_rule}", source, None, family)


def matmul_ops(program: Any) -> list[Any]:
    """The program's f32 dots and convolutions (MLIR ops, every function and region): the ops
    rules apply to. Read them inside ``program.context``."""
    with program.context:
        return [op for f in program.functions for op in f.ops if is_f32_matmul(op)]


def is_f32_matmul(op: Any) -> bool:
    if op.name not in MATMULS:
        return False
    return all(str(ir.RankedTensorType(v.type).element_type) == "f32" for v in op.operands[:2])


def _rule_of(op: Any, family: str) -> Rule:
    """The rule one dot follows on a device of ``family``: its explicit ``algorithm`` when it has
    one (the registered rule of that operand type and pass count, else the one of that operand
    type with the most passes; f32 when none), else what its precision_config means there."""
    if op is not None and "algorithm" in op.attributes:
        algorithm = stablehlo.DotAlgorithm(op.attributes["algorithm"])
        key = (str(algorithm.lhs_precision_type), int(algorithm.num_primitive_operations))
        exact = next((r for r in REGISTRY if key in r.algorithms), None)
        if exact is not None:
            return exact
        same_type = [r for r in REGISTRY for t, _ in r.algorithms if t == key[0]]
        return max(same_type, key=lambda r: r.precision.passes, default=by_name("xla-cpu"))
    return _read_as(family, _config(op))


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
