"""Parity verdicts for XLA vs CPU: why outputs differ, not just that they do.

``verify`` runs a function on XLA and its reference on CPU eager (twice, to catch a
nondeterministic reference) and in fp64 (the golden, computed from the inputs and parameters as
both sides received them, i.e. already rounded to ``dtype``), and compares with the C++
comparator of :mod:`torch_xla_ext.numerics`. From the lowered HLO of the XLA run (parsed by
cc/parity) it then builds two replays on the CPU: one that rounds to each op's element type
exactly where XLA rounds, and one in fp64 that does not round at all. Together they separate
three causes of a mismatch:

* rounding placement: XLA equals the rounded replay bit for bit and the exact replay equals the
  golden (pytorch/xla#8747: a bf16 dot rounded, then the bias add rounded again);
* reassociation: same math, equal accuracy, only the summation order differs (long fp32 dots);
* a real difference: the HLO is not the reference's math, or XLA does not execute its HLO.

Example:
    >>> import torch
    >>> from torch_xla_ext import parity
    >>> lin = torch.nn.Linear(128, 128)
    >>> report = parity.verify(lin, (torch.randn(8, 128),), dtype="bf16")  # doctest: +SKIP
    >>> report.emulation, report.hlo_math  # doctest: +SKIP
    ('matches', 'same')
    >>> print(report.explanation)  # doctest: +SKIP

``scan_layers`` does the same for a stack of layers run with torch_xla's ``scan_layers`` and
localises the first layer where XLA leaves the reference; ``assert_parity`` is the pytest form.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import enum
import json
import math
import re
import traceback
from typing import Any, Callable, Sequence

import ml_dtypes
import numpy as np

from torch_xla_ext import numerics
from torch_xla_ext._ext import parity as _core
from torch_xla_ext.errors import TorchXlaExtError

__all__ = [
    "Verdict",
    "ParityReport",
    "OutputParity",
    "LayerParity",
    "RoundingPoint",
    "ParityError",
    "HloEmulationError",
    "verify",
    "scan_layers",
    "assert_parity",
    "emulate_hlo",
    "rounding_points",
    "parse_hlo_text",
    "scan_patched_linear_example",
]


class ParityError(TorchXlaExtError, ValueError):
    """An argument of verify/scan_layers is unusable (names the argument)."""


class HloEmulationError(TorchXlaExtError, ValueError):
    """The HLO text cannot be parsed or holds an op the emulator does not implement."""


# ---------------------------------------------------------------------------------------------
# HLO text (parsed by cc/parity) and a rounding-faithful interpreter.
#
# Every op is evaluated in a wide compute type (float32 by default, as XLA:CPU upcasts bf16 and
# f16 arithmetic) and its result is rounded to the op's HLO element type, so the reference
# rounds exactly where the lowered program rounds. Shape-only ops (reshape, broadcast,
# transpose, slices, tuples) move values without rounding.
# ---------------------------------------------------------------------------------------------

_HLO_DTYPES = {
    "pred": np.dtype(np.bool_),
    "s8": np.dtype(np.int8), "s16": np.dtype(np.int16), "s32": np.dtype(np.int32), "s64": np.dtype(np.int64),
    "u8": np.dtype(np.uint8), "u16": np.dtype(np.uint16), "u32": np.dtype(np.uint32), "u64": np.dtype(np.uint64),
    "bf16": np.dtype(ml_dtypes.bfloat16), "f16": np.dtype(np.float16),
    "f32": np.dtype(np.float32), "f64": np.dtype(np.float64),
}
_IDENTITY_CUSTOM_CALLS = frozenset(("Sharding",))  # shape-changing SPMD calls are not emulated


@dataclasses.dataclass(frozen=True)
class _Shape:
    element_type: str | None  # None for a tuple
    dims: tuple[int, ...] = ()
    tuple_shapes: tuple["_Shape", ...] = ()

    def __str__(self) -> str:
        if self.element_type is None:
            return "(" + ", ".join(map(str, self.tuple_shapes)) + ")"
        return f"{self.element_type}[{','.join(map(str, self.dims))}]"


@dataclasses.dataclass
class _Instruction:
    name: str
    shape: _Shape
    opcode: str
    operands: list[str]
    literal: str  # the text inside the parentheses for constant/parameter
    attrs: dict[str, str]


@dataclasses.dataclass
class _Computation:
    name: str
    instructions: list[_Instruction]
    root: str
    by_name: dict[str, _Instruction]


@dataclasses.dataclass
class _HloModule:
    name: str
    computations: dict[str, _Computation]
    entry: str


def parse_hlo_text(text: str) -> _HloModule:
    """Parses HLO text (as torch_xla's ``_get_xla_tensors_hlo`` prints it) with the C++ parser
    of cc/parity into computations of instructions (shape, opcode, operands, attributes).

    Example:
        >>> m = parse_hlo_text(hlo)  # doctest: +SKIP
        >>> m.computations[m.entry].by_name[m.computations[m.entry].root].opcode  # doctest: +SKIP
        'tuple'
    """
    if not isinstance(text, str):
        raise HloEmulationError(f"text: expected HLO text (str), got {type(text).__name__}")
    try:
        module = _core.parse_hlo_text(text)
    except ValueError as e:
        raise HloEmulationError(str(e)) from None
    computations = {}
    for c in module.computations:
        instructions = [
            _Instruction(i.name, _shape(i.shape), i.opcode, list(i.operands), i.literal, dict(i.attributes))
            for i in c.instructions
        ]
        computations[c.name] = _Computation(c.name, instructions, c.root, {i.name: i for i in instructions})
    return _HloModule(module.name, computations, module.computations[module.entry].name)


def _shape(s: Any) -> _Shape:
    if s.is_tuple:
        return _Shape(None, (), tuple(_shape(t) for t in s.tuple_shapes))
    return _Shape(s.element_type, tuple(s.dims))


def _ints(attr: str) -> list[int]:
    return [int(v) for v in re.findall(r"-?\d+", attr)]


def _literal(text: str, shape: _Shape) -> np.ndarray:
    dtype = _HLO_DTYPES[shape.element_type]
    tokens = re.findall(r"-?inf|nan|true|false|[-+0-9.eE]+", text.replace("{", " ").replace("}", " "))
    conv = {"true": 1.0, "false": 0.0, "inf": math.inf, "-inf": -math.inf, "nan": math.nan}
    values = np.array([conv.get(t, None) if t in conv else float(t) for t in tokens], np.float64)
    if values.size == 1 and math.prod(shape.dims) != 1:
        values = np.full(shape.dims, values[0])
    return values.reshape(shape.dims).astype(dtype)


class _Interpreter:
    """Evaluates an _HloModule on numpy arrays, rounding after every op to its element type.

    With ``exact``, every floating-point value is kept in float64 and nothing rounds: the
    replay then computes the program's math, to compare with an fp64 run of the reference.

    With ``excess_precision`` (XLA's xla_allow_excess_precision, on by default), a narrow-float
    elementwise op whose only users convert it to a wider float is not rounded: XLA:CPU computes
    it in the wider type (measured: bf16 add followed by convert to f32 becomes one f32 add).
    """

    def __init__(self, module: _HloModule, compute_dtype: np.dtype, exact: bool = False,
                 excess_precision: bool = False):
        self.module = module
        self.exact = exact
        self.excess = excess_precision and not exact
        self.compute = np.dtype(np.float64 if exact else compute_dtype)

    def _storage(self, et: str | None) -> np.dtype | None:
        dtype = _HLO_DTYPES.get(et) if et else None
        if self.exact and dtype is not None and (dtype.kind == "f" or dtype == _HLO_DTYPES["bf16"]):
            return np.dtype(np.float64)
        return dtype

    def _wide(self, a: np.ndarray) -> np.ndarray:
        if a.dtype.kind == "f" or a.dtype == _HLO_DTYPES["bf16"]:
            # f64 stays f64; narrower floats are computed in the compute type.
            return a.astype(np.float64 if a.dtype == np.float64 else self.compute)
        return a

    def run(self, args: Sequence[Any], computation: str | None = None) -> Any:
        comp = self.module.computations[computation or self.module.entry]
        env: dict[str, Any] = {}
        shadow: dict[str, np.ndarray] = {}  # unrounded compute-type values (excess precision)
        if self.excess:
            self._widened = _widened_ops(comp)
        for ins in comp.instructions:
            try:
                env[ins.name] = self._eval(ins, env, args, shadow)
            except HloEmulationError:
                raise
            except Exception as e:  # name the instruction that failed
                raise HloEmulationError(f"{comp.name}/{ins.name} ({ins.opcode}): {e}") from e
        return env[comp.root]

    def _eval(self, ins: _Instruction, env: dict[str, Any], args: Sequence[Any], shadow: dict[str, np.ndarray]) -> Any:
        op, a = ins.opcode, ins.attrs
        ops = [env[o] for o in ins.operands]
        et = ins.shape.element_type
        out_dtype = self._storage(et)
        narrow = self.excess and ins.name in self._widened

        def wide(i: int) -> np.ndarray:
            return self._wide(ops[i])

        def done(value: np.ndarray, elementwise: bool = False) -> np.ndarray:
            value = np.asarray(value)
            if value.shape != ins.shape.dims:
                value = np.broadcast_to(value, ins.shape.dims)
            if elementwise and narrow and value.dtype.kind == "f":
                shadow[ins.name] = value.astype(self.compute)
            return value.astype(out_dtype, order="C")  # a copy; keeps 0-d arrays 0-d

        def layout(fn: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
            return done(fn(ops[0]))

        if op == "parameter":
            return args[int(ins.literal)]
        if op == "constant":
            return _literal(ins.literal, ins.shape).astype(out_dtype)
        if op == "tuple":
            return tuple(ops)
        if op == "get-tuple-element":
            return ops[0][int(a["index"])]
        if op in ("copy", "bitcast", "optimization-barrier"):
            return ops[0]
        if op == "all-reduce":
            # The replay is one replica (parity runs in one process, world size 1): reducing over
            # one replica returns each operand (data and torch_xla's token) unchanged.
            return tuple(ops) if len(ops) > 1 else ops[0]
        if op == "custom-call" and a.get("custom_call_target", "").strip('"') in _IDENTITY_CUSTOM_CALLS:
            return ops[0]  # SPMD annotations: the value is unchanged
        if op == "convert":
            src = ops[0]
            if src.dtype.kind == "f" or src.dtype == _HLO_DTYPES["bf16"]:
                kept = shadow.get(ins.operands[0]) if self.excess else None
                src = kept if kept is not None else wide(0)
                if out_dtype.kind in "iub":
                    src = np.trunc(src.astype(np.float64))
            return done(src, elementwise=True)
        if op == "reshape":
            return layout(lambda v: v.reshape(ins.shape.dims))
        if op == "broadcast":
            dims = _ints(a.get("dimensions", "{}"))
            view = [1] * len(ins.shape.dims)
            for i, d in enumerate(dims):
                view[d] = ins.shape.dims[d]
            return layout(lambda v: np.broadcast_to(v.reshape(view), ins.shape.dims))
        if op == "transpose":
            return layout(lambda v: np.transpose(v, _ints(a["dimensions"])))
        if op == "concatenate":
            return done(np.concatenate(ops, axis=_ints(a["dimensions"])[0]))
        if op == "slice":
            spec = re.findall(r"\[(-?\d+):(-?\d+)(?::(-?\d+))?\]", a["slice"])
            return layout(lambda v: v[tuple(slice(int(s), int(e), int(t or 1)) for s, e, t in spec)])
        if op == "dynamic-slice":
            src, starts = ops[0], [int(np.asarray(s)) for s in ops[1:]]
            sizes = _ints(a["dynamic_slice_sizes"])
            starts = [min(max(s, 0), d - z) for s, d, z in zip(starts, src.shape, sizes)]
            return done(src[tuple(slice(s, s + z) for s, z in zip(starts, sizes))])
        if op == "dynamic-update-slice":
            src, upd, starts = ops[0].copy(), ops[1], [int(np.asarray(s)) for s in ops[2:]]
            starts = [min(max(s, 0), d - z) for s, d, z in zip(starts, src.shape, upd.shape)]
            src[tuple(slice(s, s + z) for s, z in zip(starts, upd.shape))] = upd
            return done(src)
        if op == "iota":
            dim = int(a["iota_dimension"])
            view = [1] * len(ins.shape.dims)
            view[dim] = ins.shape.dims[dim]
            return done(np.arange(ins.shape.dims[dim]).reshape(view))
        if op == "compare":
            fn = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal,
                  "GT": np.greater, "GE": np.greater_equal}[a["direction"]]
            return done(fn(wide(0), wide(1)))
        if op == "select":
            if ops[1].dtype.kind == "f" or ops[1].dtype == _HLO_DTYPES["bf16"]:
                return done(np.where(ops[0], wide(1), wide(2)), elementwise=True)
            return done(np.where(ops[0], ops[1], ops[2]))
        if op == "call":
            return self.run(ops, a["to_apply"].lstrip("%"))
        if op == "while":
            cond, body = a["condition"].lstrip("%"), a["body"].lstrip("%")
            state = ops[0]
            while bool(np.asarray(self.run([state], cond))):
                state = self.run([state], body)
            return state
        if op == "batch-norm-training":
            return self._batch_norm_training(ins, ops)
        if op == "dot":
            return done(self._dot(ins, ops))
        if op == "reduce":
            return done(self._reduce(ins, ops))
        if op == "clamp":
            lo, x, hi = (wide(i) for i in range(3))
            return done(np.minimum(np.maximum(x, lo), hi), elementwise=True)
        binary = {
            "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
            "maximum": np.maximum, "minimum": np.minimum, "power": np.power, "atan2": np.arctan2,
            "remainder": np.fmod, "and": np.logical_and, "or": np.logical_or,
        }
        unary = {
            "negate": np.negative, "abs": np.abs, "exponential": np.exp, "log": np.log,
            "sqrt": np.sqrt, "rsqrt": lambda v: 1 / np.sqrt(v), "tanh": np.tanh,
            "logistic": lambda v: 1 / (1 + np.exp(-v)), "sine": np.sin, "cosine": np.cos,
            "floor": np.floor, "ceil": np.ceil, "sign": np.sign, "not": np.logical_not,
            "exponential-minus-one": np.expm1, "log-plus-one": np.log1p,
            "round-nearest-even": np.rint, "cbrt": np.cbrt, "tan": np.tan, "erf": _erf,
        }
        with np.errstate(all="ignore"):
            if op in binary:
                if op == "divide" and out_dtype.kind in "iu":
                    return done(np.trunc(np.divide(ops[0], ops[1])))
                return done(binary[op](wide(0), wide(1)), elementwise=True)
            if op in unary:
                return done(unary[op](wide(0)), elementwise=True)
        raise HloEmulationError(f"HLO op {op!r} ({ins.name}) is not supported by the emulator")

    def _batch_norm_training(self, ins: _Instruction, ops: list[np.ndarray]) -> tuple:
        """The whole op in the compute type, outputs rounded once: XLA:CPU upcasts a bf16
        batch-norm-training as one op (measured bit-identical in bf16; f16 and f32 differ by
        summation order)."""
        x, scale, offset = ops
        et = self._storage(ins.shape.tuple_shapes[0].element_type)
        f = int(ins.attrs["feature_index"])
        eps = float(ins.attrs["epsilon"])
        axes = tuple(d for d in range(x.ndim) if d != f)
        view = [1] * x.ndim
        view[f] = x.shape[f]
        w = self._wide(x)
        mean = np.mean(w, axis=axes)
        centered = w - mean.reshape(view)
        var = np.mean(centered * centered, axis=axes)
        inv = 1 / np.sqrt(var + np.asarray(eps, self.compute))
        y = centered * inv.reshape(view) * self._wide(scale).reshape(view) + self._wide(offset).reshape(view)
        return (y.astype(et), mean.astype(et), var.astype(et))

    def _dot(self, ins: _Instruction, ops: list[np.ndarray]) -> np.ndarray:
        a = ins.attrs
        lhs, rhs = self._wide(ops[0]), self._wide(ops[1])
        lb, rb = _ints(a.get("lhs_batch_dims", "{}")), _ints(a.get("rhs_batch_dims", "{}"))
        lc, rc = _ints(a.get("lhs_contracting_dims", "{}")), _ints(a.get("rhs_contracting_dims", "{}"))
        lf = [d for d in range(lhs.ndim) if d not in lb and d not in lc]
        rf = [d for d in range(rhs.ndim) if d not in rb and d not in rc]
        size = lambda arr, dims: math.prod(arr.shape[d] for d in dims)
        l3 = np.transpose(lhs, lb + lf + lc).reshape(size(lhs, lb), size(lhs, lf), size(lhs, lc))
        r3 = np.transpose(rhs, rb + rc + rf).reshape(size(rhs, rb), size(rhs, rc), size(rhs, rf))
        out = np.matmul(l3, r3)
        return out.reshape([lhs.shape[d] for d in lb] + [lhs.shape[d] for d in lf] + [rhs.shape[d] for d in rf])

    def _reduce(self, ins: _Instruction, ops: list[np.ndarray]) -> np.ndarray:
        if len(ops) != 2:
            raise HloEmulationError(f"{ins.name}: variadic reduce is not supported by the emulator")
        reducer = self.module.computations[ins.attrs["to_apply"].lstrip("%")]
        kind = reducer.by_name[reducer.root].opcode
        fn = {"add": np.sum, "maximum": np.max, "minimum": np.min, "multiply": np.prod,
              "and": np.all, "or": np.any}.get(kind)
        if fn is None:
            raise HloEmulationError(f"{ins.name}: reduce with a {kind!r} reducer is not supported")
        dims = tuple(_ints(ins.attrs["dimensions"]))
        src, init = self._wide(ops[0]), self._wide(ops[1])
        red = fn(src, axis=dims)
        combine = {"add": np.add, "maximum": np.maximum, "minimum": np.minimum, "multiply": np.multiply,
                   "and": np.logical_and, "or": np.logical_or}[kind]
        return combine(red, init)


def _widened_ops(comp: _Computation) -> set[str]:
    """Narrow-float elementwise ops whose every user converts them to a wider float."""
    users: dict[str, list[_Instruction]] = {}
    for ins in comp.instructions:
        for o in ins.operands:
            users.setdefault(o, []).append(ins)
    wider = {"bf16": ("f32", "f64"), "f16": ("f32", "f64")}
    out = set()
    for ins in comp.instructions:
        et = ins.shape.element_type
        if et not in wider or ins.opcode not in _ELEMENTWISE or ins.name == comp.root:
            continue
        us = users.get(ins.name, [])
        if us and all(u.opcode == "convert" and u.shape.element_type in wider[et] for u in us):
            out.add(ins.name)
    return out


_ELEMENTWISE = frozenset(
    "add subtract multiply divide maximum minimum power remainder atan2 negate abs exponential "
    "exponential-minus-one log log-plus-one sqrt rsqrt cbrt tanh logistic sine cosine tan floor "
    "ceil round-nearest-even sign clamp erf select".split()
)


def _erf(v: np.ndarray) -> np.ndarray:
    try:
        from scipy.special import erf
    except ImportError:  # scipy is optional
        return np.vectorize(math.erf, otypes=[v.dtype])(v)
    return erf(v)


def emulate_hlo(
    hlo_text: str,
    args: Sequence[Any],
    *,
    compute_dtype: Any = np.float32,
    exact: bool = False,
    excess_precision: bool = True,
) -> list[np.ndarray]:
    """Runs HLO text on numpy arrays, rounding every op's result to its HLO element type.

    ``args`` are the entry computation's parameters in order (numpy arrays, bfloat16 as
    ml_dtypes.bfloat16). Arithmetic on narrow floats runs in ``compute_dtype`` (float32, as
    XLA:CPU upcasts bf16/f16) and is rounded back after each op, so the result rounds exactly
    where the lowered program does. With ``exact``, floats stay float64 throughout and nothing
    rounds (converts between float types are the identity): the program's math without its
    roundings. ``excess_precision`` follows XLA's xla_allow_excess_precision (on by default):
    a bf16/f16 elementwise op whose every user converts it to f32 is computed in f32 and not
    rounded. Returns the root's leaves (a tuple root is flattened).

    Example:
        >>> hlo = '''HloModule m
        ... ENTRY %e (p0: bf16[2]) -> bf16[2] {
        ...   %p0 = bf16[2]{0} parameter(0)
        ...   ROOT %add = bf16[2]{0} add(bf16[2]{0} %p0, bf16[2]{0} %p0)
        ... }'''
        >>> emulate_hlo(hlo, [np.array([1, 2], ml_dtypes.bfloat16)])[0].tolist()
        [2.0, 4.0]
    """
    module = parse_hlo_text(hlo_text)
    entry = module.computations[module.entry]
    params = sorted((int(i.literal), i) for i in entry.instructions if i.opcode == "parameter")
    if len(params) != len(args):
        raise HloEmulationError(f"the entry computation takes {len(params)} parameters, got {len(args)} arguments")
    for (n, ins), arg in zip(params, args):
        want = _HLO_DTYPES.get(ins.shape.element_type)
        if tuple(np.shape(arg)) != ins.shape.dims or np.asarray(arg).dtype != want:
            raise HloEmulationError(
                f"argument {n} is {np.asarray(arg).dtype}{list(np.shape(arg))}, parameter(%d) %s is {ins.shape}"
                % (n, ins.name)
            )
    interp = _Interpreter(module, compute_dtype, exact, excess_precision)
    out = interp.run(
        [np.asarray(x).astype(interp._storage(ins.shape.element_type)) for (_, ins), x in zip(params, args)]
    )
    leaves: list[np.ndarray] = []

    def flatten(v: Any) -> None:
        if isinstance(v, tuple):
            for x in v:
                flatten(x)
        else:
            leaves.append(v)

    flatten(out)
    return leaves


@dataclasses.dataclass(frozen=True)
class RoundingPoint:
    """An HLO op whose result XLA stores in a narrow float type, i.e. a place where it rounds.

    ``after`` names the narrow-float op feeding this one (through shape-only ops), when there
    is one: that pair is a double rounding that an eager kernel fusing both steps does not do.
    """

    computation: str
    instruction: str
    opcode: str
    element_type: str
    after: str | None = None
    after_opcode: str | None = None


def rounding_points(hlo_text: str, *, excess_precision: bool = True) -> list[RoundingPoint]:
    """Arithmetic ops of ``hlo_text`` whose element type is bf16/f16, in program order, each with
    the narrow-float op feeding it (``after``) when it rounds right after another one. With
    ``excess_precision`` (XLA's default), ops XLA computes in f32 because every user converts
    them to f32 are not rounding points. The graph walk is cc/parity's FindRoundingPoints.

    Example:
        >>> [(p.after_opcode, p.opcode) for p in rounding_points(hlo) if p.after]  # doctest: +SKIP
        [('dot', 'add')]
    """
    if not isinstance(hlo_text, str):
        raise HloEmulationError(f"hlo_text: expected HLO text (str), got {type(hlo_text).__name__}")
    try:
        module = _core.parse_hlo_text(hlo_text)
    except ValueError as e:
        raise HloEmulationError(str(e)) from None
    return [
        RoundingPoint(p.computation, p.instruction, p.opcode, p.element_type, p.after or None, p.after_opcode or None)
        for p in _core.find_rounding_points(module, excess_precision)
    ]


# ---------------------------------------------------------------------------------------------
# Reports
# ---------------------------------------------------------------------------------------------


class Verdict(str, enum.Enum):
    """The outcome, in the manner of pytorch/xla's benchmarks verifier."""

    PASS = "PASS"  # XLA matches CPU eager within the tolerances.
    FAIL = "FAIL"  # It does not; the explanation says whether rounding placement accounts for it.
    NONDETERMINISTIC_REFERENCE = "NONDETERMINISTIC_REFERENCE"  # two CPU runs disagree.
    EXCEPTION = "EXCEPTION"  # a run raised; nothing was compared.

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass(frozen=True)
class OutputParity:
    """One floating-point output. Errors are against the fp64 golden: greatest and mean
    absolute error. ``emulated`` compares XLA with the rounding-emulated reference exactly
    (rtol = atol = 0); None when the emulation did not run."""

    path: str
    xla_vs_cpu: numerics.CompareReport
    xla_error: float
    cpu_error: float
    xla_mean_error: float
    cpu_mean_error: float
    closer: str  # "xla", "cpu" or "tie": which is closer to the golden
    emulated: numerics.CompareReport | None = None
    emulated_error: float | None = None
    # The HLO replayed in float64 without rounding vs the fp64 golden (torch.testing's float64
    # tolerances), and its greatest absolute difference.
    unrounded: numerics.CompareReport | None = None
    unrounded_error: float | None = None

    @property
    def same_math(self) -> bool | None:
        """Whether the lowered HLO computes the reference's math: its exact replay matches the
        golden, or differs by much less than the run's rounding error (constants stored in bf16,
        such as GELU's 0.707, differ from the reference's by design)."""
        if self.unrounded is None:
            return None
        return _same_math(self.unrounded, self.unrounded_error, self.xla_error, self.cpu_error)

    def to_dict(self) -> dict[str, Any]:
        keys = ("path", "xla_error", "cpu_error", "xla_mean_error", "cpu_mean_error", "closer", "emulated_error",
                "unrounded_error", "same_math")
        d = {k: getattr(self, k) for k in keys}
        d["xla_vs_cpu"] = self.xla_vs_cpu.to_dict()
        d["emulated"] = self.emulated.to_dict() if self.emulated else None
        d["unrounded"] = self.unrounded.to_dict() if self.unrounded else None
        return d


@dataclasses.dataclass(frozen=True)
class LayerParity:
    """One layer of a scanned stack: scan vs the Python loop on XLA (exact), XLA (scan) vs CPU
    eager (with the tolerances), and both against the fp64 golden."""

    index: int
    scan_vs_loop: numerics.CompareReport
    xla_vs_cpu: numerics.CompareReport
    xla_error: float
    cpu_error: float
    # Why XLA's output of this layer is what it is, from the per-layer replays of the scan's HLO:
    # "rounding placement" (bit-identical to the rounded replay, and the exact fp64 replay matches
    # the golden), "reassociation" (exact replay matches the golden and XLA is as accurate as CPU
    # eager), "unexplained", or "unavailable" (no replay).
    cause: str = "unavailable"

    @property
    def rounding_explained(self) -> bool:
        return self.cause in ("rounding placement", "reassociation")

    @property
    def diverges(self) -> bool:
        """Scan differs from the loop, or XLA differs from CPU eager for a reason other than
        where or in which order it rounds."""
        if not self.scan_vs_loop.passed:
            return True
        return not self.xla_vs_cpu.passed and not self.rounding_explained

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "diverges": self.diverges,
            "cause": self.cause,
            "scan_vs_loop": self.scan_vs_loop.to_dict(),
            "xla_vs_cpu": self.xla_vs_cpu.to_dict(),
            "xla_error": self.xla_error,
            "cpu_error": self.cpu_error,
        }


@dataclasses.dataclass(frozen=True)
class ParityReport:
    """The outcome of :func:`verify` / :func:`scan_layers`.

    ``emulation`` is "matches" when XLA equals the rounding-emulated reference bit for bit on
    every output, "differs" when it does not, or "unavailable: <why>". ``hlo_math`` is "same"
    when the HLO replayed in fp64 without rounding matches the fp64 golden (the lowering computes
    the reference's math), "differs", or "unavailable". ``rounding_points`` are
    the HLO ops where XLA stores a bf16/f16 result; those with ``after`` set round twice in a
    row. ``nondeterminism`` is the first output where two CPU runs disagreed.
    """

    verdict: Verdict
    explanation: str
    dtype: str
    rtol: float | None
    atol: float | None
    outputs: tuple[OutputParity, ...] = ()
    emulation: str = "unavailable: not run"
    hlo_math: str = "unavailable"
    rounding_points: tuple[RoundingPoint, ...] = ()
    nondeterminism: tuple[str, numerics.CompareReport] | None = None
    exception: str | None = None
    stage: str | None = None
    layers: tuple[LayerParity, ...] = ()
    first_divergent_layer: int | None = None
    first_mismatched_layer: int | None = None
    hlo_text: str | None = dataclasses.field(default=None, repr=False)

    @property
    def passed(self) -> bool:
        return self.verdict == Verdict.PASS

    def to_dict(self) -> dict[str, Any]:
        def finite(v: Any) -> Any:
            return str(v) if isinstance(v, float) and not math.isfinite(v) else v

        d = {
            "verdict": self.verdict.value,
            "explanation": self.explanation,
            "dtype": self.dtype,
            "rtol": self.rtol,
            "atol": self.atol,
            "emulation": self.emulation,
            "hlo_math": self.hlo_math,
            "outputs": [{k: finite(v) for k, v in o.to_dict().items()} for o in self.outputs],
            "rounding_points": [dataclasses.asdict(p) for p in self.rounding_points],
            "exception": self.exception,
            "stage": self.stage,
            "layers": [{k: finite(v) for k, v in l.to_dict().items()} for l in self.layers],
            "first_divergent_layer": self.first_divergent_layer,
            "first_mismatched_layer": self.first_mismatched_layer,
        }
        if self.nondeterminism:
            d["nondeterminism"] = {"path": self.nondeterminism[0], "report": self.nondeterminism[1].to_dict()}
        return d

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    def __str__(self) -> str:
        lines = [f"Parity verdict: {self.verdict.value} ({self.dtype})", "", self.explanation]
        for o in self.outputs:
            r = o.xla_vs_cpu
            lines += [
                "",
                f"output {o.path or '<root>'} {list(r.shape)}:",
                f"  XLA vs CPU eager: {r.mismatched}/{r.total} mismatched (rtol={r.rtol:g}, atol={r.atol:g}), "
                f"{r.ulp_histogram.get('0', 0)}/{r.total} bit-identical, max ULP {r.max_ulp}",
                f"  vs fp64 golden: XLA max {o.xla_error:.3g} (mean {o.xla_mean_error:.3g}), "
                f"CPU max {o.cpu_error:.3g} (mean {o.cpu_mean_error:.3g}); closer: {o.closer}",
            ]
            if o.emulated is not None:
                e = o.emulated
                lines.append(
                    f"  XLA vs rounding-emulated reference: {e.total - e.mismatched}/{e.total} bit-identical"
                    + (f"; emulated max error vs fp64 {o.emulated_error:.3g}" if o.emulated_error is not None else "")
                )
            if o.unrounded is not None:
                u = o.unrounded
                verdict = {True: "same math", False: "different math", None: "unknown"}[o.same_math]
                lines.append(
                    f"  HLO replayed in fp64 without rounding vs fp64 golden: {u.mismatched}/{u.total} mismatched "
                    f"at fp64 tolerances, max error {o.unrounded_error:.3g} vs the run's {max(o.xla_error, o.cpu_error):.3g}"
                    f" ({verdict})"
                )
        if self.layers:
            lines += ["", "layer  scan==loop  XLA vs CPU mismatched  XLA err    CPU err"]
            for l in self.layers:
                lines.append(
                    f"{l.index:5d}  {'yes' if l.scan_vs_loop.passed else 'NO':>10}  "
                    f"{l.xla_vs_cpu.mismatched:>9}/{l.xla_vs_cpu.total:<10}  {l.xla_error:<9.3g}  {l.cpu_error:.3g}"
                    + (f"   ({l.cause})" if l.rounding_explained and not l.xla_vs_cpu.passed else "")
                    + ("   <- first divergent" if l.index == self.first_divergent_layer else "")
                )
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Running a function on XLA, CPU eager and fp64
# ---------------------------------------------------------------------------------------------

_DTYPE_NAMES = {
    "bf16": "bfloat16", "bfloat16": "bfloat16", "fp16": "float16", "f16": "float16", "float16": "float16",
    "half": "float16", "fp32": "float32", "f32": "float32", "float32": "float32", "float": "float32",
    "fp64": "float64", "f64": "float64", "float64": "float64", "double": "float64",
}


def _torch_dtype(dtype: Any):
    import torch

    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    name = _DTYPE_NAMES.get(str(dtype).removeprefix("torch.").lower())
    if name is None:
        raise ParityError(f"dtype: expected one of bf16, fp16, fp32, fp64 or a torch.dtype, got {dtype!r}")
    return getattr(torch, name)


def _move(value: Any, device: Any, dtype: Any) -> Any:
    import torch
    from torch.utils._pytree import tree_map

    def one(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        t = t.detach()
        if dtype is not None and t.is_floating_point():
            t = t.to(dtype)  # on the CPU, so XLA receives data already in dtype, not a convert
        return t.to(device)

    return tree_map(one, value)


def _prepare(fn: Any, device: Any, dtype: Any) -> Callable:
    import torch

    if isinstance(fn, torch.nn.Module):
        m = copy.deepcopy(fn).to("cpu")
        if dtype is not None:
            m = m.to(dtype)  # on the CPU first, as for inputs
        return m.to(device)
    return fn


def _float_leaves(out: Any, what: str) -> list[tuple[str, Any]]:
    import torch
    from torch.utils._pytree import keystr, tree_flatten_with_path

    leaves = [(keystr(p), t) for p, t in tree_flatten_with_path(out)[0]
              if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if not leaves:
        raise ParityError(f"{what} returned no floating-point tensor (got {type(out).__name__})")
    return leaves


@contextlib.contextmanager
def _user_rng_preserved():
    """Runs are seeded; the caller's torch and XLA RNG states come back unchanged."""
    import torch
    import torch_xla.core.xla_model as xm

    xla_state = xm.get_rng_state()
    with torch.random.fork_rng(devices=[]):
        try:
            yield
        finally:
            xm.set_rng_state(xla_state)


def _run_cpu(fn: Any, inputs: tuple, dtype: Any, seed: int, via: Any = None) -> list[tuple[str, Any]]:
    """``via``: round inputs and parameters to this dtype first (the golden of what XLA received)."""
    import torch

    torch.manual_seed(seed)
    with torch.no_grad():
        if via is not None:
            fn, inputs = _prepare(fn, "cpu", via), _move(inputs, "cpu", via)
        out = _prepare(fn, "cpu", dtype)(*_move(inputs, "cpu", dtype))
    return [(p, t.detach().clone()) for p, t in _float_leaves(out, "the reference")]


@dataclasses.dataclass
class _XlaRun:
    outputs: list[tuple[str, Any]]
    hlo_text: str | None
    graph_args: list[Any] | None
    hlo_error: str | None


def _run_xla(fn: Any, inputs: tuple, dtype: Any, seed: int, capture_hlo: bool) -> _XlaRun:
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm

    from torch_xla_ext._compat import hlo as _hlo

    device = torch_xla.device()
    torch.manual_seed(seed)
    xm.set_rng_state(seed)
    with torch.no_grad():
        out = _prepare(fn, device, dtype)(*_move(inputs, device, dtype))
    leaves = _float_leaves(out, "fn")
    text = args = err = None
    if capture_hlo:
        # Before sync: afterwards the outputs are device data and the graph is gone.
        try:
            tensors = [t for _, t in leaves]
            text = _hlo.lowered_hlo_text(tensors)
            args = [t.cpu() for t in _hlo.graph_inputs(tensors)]
        except Exception as e:  # the verdict does not depend on the HLO
            err = f"{type(e).__name__}: {e}"
    torch_xla.sync()
    return _XlaRun([(p, t.cpu()) for p, t in leaves], text, args, err)


def _to_numpy(t: Any) -> np.ndarray:
    import torch

    if t.dtype == torch.bfloat16:
        return t.float().numpy().astype(ml_dtypes.bfloat16)
    return t.numpy()


def _golden_errors(y: Any, golden: Any) -> tuple[float, float]:
    """Greatest and mean |y - golden|, in float64."""
    import torch

    y = torch.as_tensor(np.asarray(y, dtype=np.float64)) if isinstance(y, np.ndarray) else y.double()
    if y.numel() == 0:
        return 0.0, 0.0
    e = (y - golden.double()).abs()
    return float(e.max()), float(e.mean())


def _closer(xla: tuple[float, float], cpu: tuple[float, float]) -> str:
    if xla == cpu:
        return "tie"
    return "xla" if xla < cpu else "cpu"  # greatest error first, mean breaks ties


def _emulate(run: _XlaRun, n_outputs: int):
    """(rounded replay, exact replay, rounding points, status) of the XLA run's HLO."""
    if run.hlo_text is None:
        return None, None, (), f"unavailable: no HLO ({run.hlo_error})"
    try:
        points = tuple(rounding_points(run.hlo_text))
        args = [_to_numpy(a) for a in run.graph_args]
        rounded = emulate_hlo(run.hlo_text, args)
        exact = emulate_hlo(run.hlo_text, args, exact=True)
    except HloEmulationError as e:
        return None, None, (), f"unavailable: {e}"
    if len(rounded) != n_outputs:
        return None, None, points, f"unavailable: the HLO has {len(rounded)} outputs, fn returned {n_outputs}"
    return rounded, exact, points, "ok"


def _fmt(v: float) -> str:
    return f"{v:.3g}"


def _describe_rounding(points: Sequence[RoundingPoint], dtype: str) -> str:
    doubles = [p for p in points if p.after]
    if not doubles:
        return f"XLA stores {len(points)} intermediate result(s) in {dtype}"
    pairs: dict[tuple[str, str], list[RoundingPoint]] = {}
    for p in doubles:
        pairs.setdefault((p.after_opcode, p.opcode), []).append(p)
    parts = []
    for (first, second), ps in pairs.items():
        ex = ps[0]
        parts.append(f"after the {first} (`{ex.after}`) and again after the {second} (`{ex.instruction}`)")
    return f"XLA rounds to {doubles[0].element_type} " + "; and ".join(parts)


def _explain(outputs: Sequence[OutputParity], emulation: str, hlo_math: str, points: Sequence[RoundingPoint],
             dtype: str) -> str:
    failing = [o for o in outputs if not o.xla_vs_cpu.passed]
    total = sum(o.xla_vs_cpu.total for o in outputs)
    mism = sum(o.xla_vs_cpu.mismatched for o in outputs)
    worst = max(outputs, key=lambda o: o.xla_error)
    golden = (f"Against the fp64 golden, XLA's greatest error is {_fmt(worst.xla_error)} and CPU eager's is "
              f"{_fmt(worst.cpu_error)} (output {worst.path or '<root>'}; {_closer_words(worst.closer)}).")
    emu_words = ""
    if emulation == "matches":
        emu_words = (f" XLA matches the rounding-emulated reference (the lowered HLO replayed on the CPU, "
                     f"rounding to each op's element type) bit for bit on {total}/{total} elements.")
    if not failing:
        same = sum(o.xla_vs_cpu.ulp_histogram.get("0", 0) for o in outputs)
        return (f"XLA matches CPU eager within tolerances on all {total} elements ({same} bit-identical) in {dtype}."
                f"{emu_words} {golden}")
    r = failing[0].xla_vs_cpu
    where = f"{mism}/{total} elements mismatch CPU eager (rtol={r.rtol:g}, atol={r.atol:g})"
    if emulation == "matches" and hlo_math == "same":
        how = _describe_rounding(points, dtype)
        return (
            f"{where}, and the cause is rounding placement, not a lowering bug: {how}, where CPU eager need "
            f"not round (a fused kernel such as addmm rounds once).{emu_words} Replayed in fp64 without rounding, the same HLO matches the fp64 "
            f"golden, so XLA computes the reference's math and only rounds in different places. {golden} To test "
            f"this program, compare against the rounding-emulated reference (exact) or against the fp64 golden "
            f"with a tolerance of about {_fmt(2 * worst.xla_error)}; if the extra rounding matters for training, "
            f"keep that step in float32 (upcast before the op, round once at the end). Loosening the CPU tolerance "
            f"hides the cause and would also hide a real bug."
        )
    if emulation == "matches":
        u = sum(o.unrounded.mismatched for o in outputs)
        return (
            f"{where}, and it is not rounding: XLA runs its lowered HLO faithfully (bit for bit equal to the "
            f"rounding-emulated replay), but that HLO computes different math from the reference: replayed in "
            f"fp64 without rounding it differs from the fp64 golden on {u}/{total} elements. What fn lowers to "
            f"(or fn itself) differs from the reference; dump it (report.hlo_text) and find the op that is not the "
            f"reference's. {golden}"
        )
    if emulation == "differs" and hlo_math == "same" and all(
        o.xla_error <= _REASSOCIATION_FACTOR * max(o.cpu_error, o.emulated_error or 0.0) for o in outputs
    ):
        # Same math, and XLA is as accurate as the other two evaluations of it: what is left is
        # the order of summation inside dots/reductions, which the replay does not model.
        return (
            f"{where}; the lowered HLO is the reference's math (its exact fp64 replay matches the golden) and XLA "
            f"is as accurate as CPU eager (within {_REASSOCIATION_FACTOR:g}x of its error against the fp64 golden), "
            f"so the difference is floating-point reassociation: XLA evaluates inside ops in another order "
            f"(summation order of dots and reductions, its expansion of batch-norm, its approximations of "
            f"transcendentals), which the replay does not model bit for bit. {golden} Compare "
            f"against the fp64 golden with a tolerance of about {_fmt(2 * max(worst.xla_error, worst.cpu_error))} "
            f"rather than against CPU eager bit for bit."
        )
    if emulation == "differs":
        emu_mism = sum(o.emulated.mismatched for o in outputs if o.emulated)
        side = ("XLA is further from the fp64 golden than CPU eager" if worst.closer == "cpu"
                else "XLA is at least as close to the fp64 golden as CPU eager")
        math_words = {"same": "the HLO itself computes the reference's math (its exact replay matches the golden), "
                              "so the XLA compiler or runtime changed the numerics of that HLO",
                      "differs": "and the HLO's exact replay differs from the golden too"}.get(hlo_math, "")
        reduces = [p for p in points if p.opcode in ("reduce", "reduce-window")]
        hint = (
            f" The HLO reduces in {reduces[0].element_type} (`{reduces[0].instruction}`"
            + (f" and {len(reduces) - 1} more" if len(reduces) > 1 else "")
            + "): XLA accumulates such reductions in its own order and precision, which the replay (f32 "
            "accumulation) does not reproduce; upcast before reducing (x.float().sum(...)) for an f32 accumulator."
            if reduces else ""
        )
        return (
            f"{where}, and rounding placement does not explain it: XLA also differs from the rounding-emulated "
            f"reference (the lowered HLO replayed with XLA's roundings) on {emu_mism}/{total} elements; "
            f"{math_words}. {golden} {side}.{hint} Dump the HLO (report.hlo_text), bisect the function, or for a "
            f"layer stack use parity.scan_layers to find the first divergent layer."
        )
    return (f"{where}. The rounding-emulated reference could not be built ({emulation.removeprefix('unavailable: ')}), "
            f"so rounding placement is neither confirmed nor ruled out. {golden}")


# The exact replay may leave the golden by this fraction of the run's own rounding error and
# still compute "the same math": below that, differences are constants stored in the run dtype.
_MATH_NOISE_FRACTION = 0.25


def _same_math(unrounded: numerics.CompareReport, unrounded_error: float, xla_error: float, cpu_error: float) -> bool:
    if unrounded.passed:
        return True
    return unrounded_error <= _MATH_NOISE_FRACTION * max(xla_error, cpu_error)


# XLA's error against the golden may be this many times the reference's (or the replay's) and
# still count as "as accurate": summation order alone moves errors by small factors.
_REASSOCIATION_FACTOR = 2.0


def _closer_words(closer: str) -> str:
    return {"xla": "XLA is closer", "cpu": "CPU eager is closer", "tie": "equally close"}[closer]


def _describe_exception(stage: str, e: BaseException) -> tuple[str, str]:
    text = "".join(traceback.format_exception_only(type(e), e)).strip()
    return text, (f"The {stage} run raised {text.splitlines()[0] if text else type(e).__name__}; nothing was "
                  f"compared. Fix the exception (report.exception has it) and rerun.")


def verify(
    fn: Any,
    inputs: Any,
    *,
    dtype: Any = None,
    rtol: float | None = None,
    atol: float | None = None,
    reference: Any = None,
    seed: int = 0,
    emulate: bool = True,
) -> ParityReport:
    """Runs ``fn(*inputs)`` on XLA and its reference on CPU eager (twice) and in fp64, compares.

    ``fn`` and ``reference`` (default: ``fn``) are callables or ``nn.Module``s; a module is
    copied and moved to each device (and cast to ``dtype``, "bf16"/"fp32"/... or a torch.dtype;
    None keeps the inputs' dtypes). ``inputs`` is a tuple of CPU tensors (or one tensor). The RNG
    is reset to ``seed`` before every run. XLA vs CPU uses ``torch_xla_ext.numerics.compare``
    with ``rtol``/``atol`` (default torch.testing's for the dtype). With ``emulate``, the lowered
    HLO of the XLA run is replayed on the CPU with XLA's roundings (see :func:`emulate_hlo`).

    Example:
        >>> r = verify(torch.nn.Linear(4, 4), (torch.randn(2, 4),), dtype="fp32")  # doctest: +SKIP
        >>> r.verdict  # doctest: +SKIP
        <Verdict.PASS: 'PASS'>
    """
    import torch

    if not callable(fn):
        raise ParityError(f"fn: expected a callable or an nn.Module, got {type(fn).__name__}")
    if reference is not None and not callable(reference):
        raise ParityError(f"reference: expected a callable or an nn.Module, got {type(reference).__name__}")
    if (rtol is None) != (atol is None):
        raise ParityError("rtol and atol go together: pass both or neither")
    inputs = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
    tdtype = _torch_dtype(dtype)
    ref = fn if reference is None else reference
    dtype_name = str(tdtype).removeprefix("torch.") if tdtype is not None else "input dtypes"
    tol = {} if rtol is None else {"rtol": rtol, "atol": atol}

    stage = "CPU eager"
    try:
        with _user_rng_preserved():
            cpu = _run_cpu(ref, inputs, tdtype, seed)
            stage = "second CPU eager"
            cpu2 = _run_cpu(ref, inputs, tdtype, seed)
            stage = "fp64 golden"
            # The golden starts from the inputs both sides received (rounded to dtype), so its
            # error measures each side's arithmetic, not the shared input quantisation.
            golden = _run_cpu(ref, inputs, torch.float64, seed, via=tdtype)
            stage = "XLA"
            xla = _run_xla(fn, inputs, tdtype, seed, emulate)
        stage = "comparison"
        if [p for p, _ in xla.outputs] != [p for p, _ in cpu]:
            raise ParityError(
                f"fn and the reference return different outputs: {[p for p, _ in xla.outputs]} vs {[p for p, _ in cpu]}"
            )
    except Exception as e:
        text, explanation = _describe_exception(stage, e)
        return ParityReport(Verdict.EXCEPTION, explanation, dtype_name, rtol, atol, exception=text, stage=stage)

    for (path, a), (_, b) in zip(cpu, cpu2):
        r = numerics.compare(a, b, rtol=0.0, atol=0.0, equal_nan=True)
        if not r.passed:
            explanation = (
                f"Two CPU eager runs of the reference, with the RNG reset to seed {seed} before each, differ on "
                f"{r.mismatched}/{r.total} elements of output {path or '<root>'} (greatest difference "
                f"{_fmt(r.max_abs_diff)}), so a CPU comparison cannot tell an XLA bug from reference noise. Make "
                f"the reference deterministic (seed every generator it uses, no state that changes between "
                f"calls, torch.use_deterministic_algorithms(True)) and rerun."
            )
            return ParityReport(Verdict.NONDETERMINISTIC_REFERENCE, explanation, dtype_name, rtol, atol,
                                nondeterminism=(path, r), stage="CPU eager")

    if emulate:
        emulated, exact, points, status = _emulate(xla, len(xla.outputs))
    else:
        emulated, exact, points, status = None, None, (), "unavailable: emulate=False"
    if emulated is not None:
        bad = [i for i, (e, (_, x)) in enumerate(zip(emulated, xla.outputs)) if tuple(e.shape) != tuple(x.shape)]
        if bad:
            emulated = exact = None
            status = f"unavailable: the replayed output {bad[0]} does not have fn's shape"
    outputs = []
    for i, ((path, x), (_, c), (_, g)) in enumerate(zip(xla.outputs, cpu, golden)):
        xe, ce = _golden_errors(x, g), _golden_errors(c, g)
        emu = emu_err = unrounded = unrounded_err = None
        if emulated is not None:
            emu = numerics.compare(x, emulated[i], rtol=0.0, atol=0.0, equal_nan=True, check_dtype=False)
            emu_err = _golden_errors(emulated[i], g)[0]
            unrounded = numerics.compare(exact[i], g, equal_nan=True, check_dtype=False)
            unrounded_err = _golden_errors(exact[i], g)[0]
        outputs.append(OutputParity(
            path, numerics.compare(x, c, equal_nan=True, check_dtype=False, **tol), xe[0], ce[0], xe[1], ce[1],
            _closer(xe, ce), emu, emu_err, unrounded, unrounded_err,
        ))
    hlo_math = "unavailable"
    if status == "ok":
        status = "matches" if all(o.emulated.passed for o in outputs) else "differs"
        hlo_math = "same" if all(o.same_math for o in outputs) else "differs"
    passed = all(o.xla_vs_cpu.passed for o in outputs)
    explanation = _explain(outputs, status, hlo_math, points, dtype_name)
    return ParityReport(
        Verdict.PASS if passed else Verdict.FAIL, explanation, dtype_name, rtol, atol, outputs=tuple(outputs),
        emulation=status, hlo_math=hlo_math, rounding_points=points, hlo_text=xla.hlo_text,
    )


# ---------------------------------------------------------------------------------------------
# Layer stacks run with torch_xla's scan_layers
# ---------------------------------------------------------------------------------------------


def _stack_modules():
    import torch

    class ScannedStack(torch.nn.Module):
        """The stack under test: torch_xla's scan_layers on XLA, a plain loop elsewhere."""

        def __init__(self, layers: Sequence[Any]):
            super().__init__()
            self.layers = torch.nn.ModuleList(layers)

        def forward(self, x: Any) -> Any:
            if x.device.type == "xla":
                from torch_xla_ext._compat import scan as _scan

                return _scan.scan_layers(list(self.layers), x)
            for layer in self.layers:
                x = layer(x)
            return x

    class LoopStack(ScannedStack):
        def forward(self, x: Any) -> Any:
            for layer in self.layers:
                x = layer(x)
            return x

    return ScannedStack, LoopStack


def scan_layers(
    layers: Sequence[Any],
    x: Any,
    *,
    dtype: Any = None,
    rtol: float | None = None,
    atol: float | None = None,
    reference_layers: Sequence[Any] | None = None,
    seed: int = 0,
) -> ParityReport:
    """Checks ``torch_xla.experimental.scan_layers(layers, x)`` against a loop, per layer.

    The final output goes through :func:`verify` (scan_layers on XLA vs a Python loop over
    ``reference_layers``, default ``layers``, on CPU eager, fp64 golden, rounding-emulated
    reference). Then every layer's output is compared: the scanned stack on XLA against the same
    layers in a Python loop on XLA (exactly) and against CPU eager (with ``rtol``/``atol``).
    ``first_divergent_layer`` is the first layer where scan and loop differ, or where XLA leaves
    CPU eager for a reason other than rounding placement (the layer is not bit-identical to the
    per-layer replay of the scan's HLO with XLA's roundings, or that HLO's exact fp64 replay
    leaves the golden); None when all agree or only rounding placement differs.
    ``first_mismatched_layer`` is the first layer failing the comparator, whatever the cause.

    Example:
        >>> layers = [torch.nn.Linear(16, 16) for _ in range(4)]
        >>> r = scan_layers(layers, torch.randn(2, 16), dtype="fp32")  # doctest: +SKIP
        >>> r.first_divergent_layer is None  # doctest: +SKIP
        True
    """
    import torch

    layers = list(layers)
    if not layers or not all(isinstance(l, torch.nn.Module) for l in layers):
        raise ParityError("layers: expected a non-empty sequence of nn.Module")
    ref_layers = layers if reference_layers is None else list(reference_layers)
    if len(ref_layers) != len(layers):
        raise ParityError(f"reference_layers: has {len(ref_layers)} layers, layers has {len(layers)}")
    if not isinstance(x, torch.Tensor):
        raise ParityError(f"x: expected a torch.Tensor, got {type(x).__name__}")
    ScannedStack, LoopStack = _stack_modules()
    report = verify(ScannedStack(layers), (x,), dtype=dtype, rtol=rtol, atol=atol,
                    reference=LoopStack(ref_layers), seed=seed)
    if report.verdict in (Verdict.EXCEPTION, Verdict.NONDETERMINISTIC_REFERENCE):
        return report
    tdtype = _torch_dtype(dtype)
    tol = {} if rtol is None else {"rtol": rtol, "atol": atol}
    try:
        with _user_rng_preserved():
            scanned, looped, run = _xla_layer_outputs(layers, x, tdtype, seed)
            cpu = _cpu_layer_outputs(ref_layers, x, tdtype, seed)
            golden = _cpu_layer_outputs(ref_layers, x, torch.float64, seed, via=tdtype)
        rounded, exact, _points, _status = _emulate(run, 1)
    except Exception as e:
        text, explanation = _describe_exception("per-layer", e)
        return dataclasses.replace(report, verdict=Verdict.EXCEPTION, explanation=explanation, exception=text,
                                   stage="per-layer")
    per_layer = []
    for k, (s, l, c, g) in enumerate(zip(scanned, looped, cpu, golden)):
        xla_err, cpu_err = _golden_errors(s, g)[0], _golden_errors(c, g)[0]
        cause = "unavailable"
        if rounded is not None and rounded[0].shape[0] == len(layers):
            same_math = _same_math(numerics.compare(exact[0][k], g, equal_nan=True, check_dtype=False),
                                   _golden_errors(exact[0][k], g)[0], xla_err, cpu_err)
            if not same_math:
                cause = "unexplained"
            elif numerics.compare(s, rounded[0][k], rtol=0.0, atol=0.0, equal_nan=True, check_dtype=False).passed:
                cause = "rounding placement"
            elif xla_err <= _REASSOCIATION_FACTOR * max(cpu_err, _golden_errors(rounded[0][k], g)[0]):
                cause = "reassociation"
            else:
                cause = "unexplained"
        per_layer.append(LayerParity(
            k,
            numerics.compare(s, l, rtol=0.0, atol=0.0, equal_nan=True, check_dtype=False),
            numerics.compare(s, c, equal_nan=True, check_dtype=False, **tol),
            xla_err,
            cpu_err,
            cause,
        ))
    first = next((l.index for l in per_layer if l.diverges), None)
    first_mismatched = next((l.index for l in per_layer if not l.xla_vs_cpu.passed), None)
    explanation = report.explanation + " " + _explain_layers(per_layer, first, first_mismatched)
    verdict = report.verdict if first is None or report.verdict == Verdict.FAIL else Verdict.FAIL
    return dataclasses.replace(report, verdict=verdict, explanation=explanation, layers=tuple(per_layer),
                               first_divergent_layer=first, first_mismatched_layer=first_mismatched)


def _explain_layers(per_layer: Sequence[LayerParity], first: int | None, first_mismatched: int | None) -> str:
    n = len(per_layer)
    if all(l.scan_vs_loop.passed for l in per_layer):
        head = f"Per layer, scan_layers and the Python loop agree bit for bit on XLA in all {n} layers"
    else:
        head = "Per layer, scan_layers and the Python loop on XLA disagree"
    if first is None and first_mismatched is None:
        return f"{head}, and every layer matches CPU eager."
    if first is None:
        k = sum(not l.xla_vs_cpu.passed for l in per_layer)
        causes = sorted({l.cause for l in per_layer if not l.xla_vs_cpu.passed})
        return (f"{head}; {k} of {n} layers mismatch CPU eager (from layer {first_mismatched}), all explained by "
                f"{' and '.join(causes)} against the per-layer replay of the scan's HLO, which computes the "
                f"reference's math, so no layer diverges beyond rounding (first_divergent_layer is None).")
    l = per_layer[first]
    if not l.scan_vs_loop.passed:
        return (f"{head}: the first difference is at layer {first} ({l.scan_vs_loop.mismatched}/"
                f"{l.scan_vs_loop.total} elements), so the scan lowering itself changes that layer.")
    why = ("rounding placement does not explain it" if l.cause == "unexplained"
           else "the rounding-emulated replay was unavailable")
    return (f"{head}; the first layer to diverge from CPU eager is layer {first} "
            f"({l.xla_vs_cpu.mismatched}/{l.xla_vs_cpu.total} elements; error vs fp64: XLA {_fmt(l.xla_error)}, "
            f"CPU {_fmt(l.cpu_error)}) and {why}: start looking there.")


def _xla_layer_outputs(layers: Sequence[Any], x: Any, dtype: Any, seed: int) -> tuple[list[Any], list[Any]]:
    import torch
    import torch_xla

    from torch_xla_ext._compat import scan as _scan

    from torch_xla_ext._compat import hlo as _hlo

    device = torch_xla.device()
    torch.manual_seed(seed)
    xla_layers = [_prepare(l, device, dtype) for l in layers]
    h = _move(x, device, dtype)
    with torch.no_grad():
        _final, ys = _scan.scan_layers_with_intermediates(xla_layers, h)
        text = args = err = None
        try:  # the scan's HLO with every layer's output, for a per-layer rounding-emulated replay
            text, args = _hlo.lowered_hlo_text([ys]), [t.cpu() for t in _hlo.graph_inputs([ys])]
        except Exception as e:
            err = f"{type(e).__name__}: {e}"
        looped = []
        for layer in xla_layers:
            h = layer(h)
            looped.append(h)
    torch_xla.sync()
    ys = ys.cpu()
    run = _XlaRun([("", ys)], text, args, err)
    return [ys[k] for k in range(len(layers))], [t.cpu() for t in looped], run


def _cpu_layer_outputs(layers: Sequence[Any], x: Any, dtype: Any, seed: int, via: Any = None) -> list[Any]:
    import torch

    torch.manual_seed(seed)
    h = _move(_move(x, "cpu", via), "cpu", dtype)
    out = []
    with torch.no_grad():
        for layer in layers:
            if via is not None:
                layer = _prepare(layer, "cpu", via)
            h = _prepare(layer, "cpu", dtype)(h)
            out.append(h.clone())
    return out


def assert_parity(fn: Any, inputs: Any, **kwargs: Any) -> ParityReport:
    """:func:`verify` for pytest: raises AssertionError carrying the report unless it passes.

    Example:
        >>> assert_parity(torch.nn.Linear(4, 4), (torch.randn(2, 4),), dtype="fp32")  # doctest: +SKIP
    """
    report = verify(fn, inputs, **kwargs)
    if not report.passed:
        raise AssertionError(str(report))
    return report


def scan_patched_linear_example(dtype: Any = "bf16", *, seed: int = 42, patch: bool = True):
    """The pytorch/xla#8747 configuration: 4 x nn.Linear(128, 128) run with scan_layers on XLA
    after ``apply_xla_patch_to_nn_linear`` (einsum lowering), input (3, 4, 5, 128).

    Returns ``(layers, reference_layers, x)`` for :func:`scan_layers`: the patched layers under
    test and plain ``nn.Linear`` layers with the same weights for CPU eager, as the upstream test
    compares them. ``dtype`` is only checked here; pass it to scan_layers.
    """
    import torch

    _torch_dtype(dtype)
    torch.manual_seed(seed)
    reference = torch.nn.Sequential(*[torch.nn.Linear(128, 128) for _ in range(4)])
    x = torch.randn(3, 4, 5, 128)
    layers = copy.deepcopy(reference)
    if patch:
        from torch_xla.distributed.spmd.xla_sharding import apply_xla_patch_to_nn_linear

        layers = apply_xla_patch_to_nn_linear(layers)
    return list(layers), list(reference), x
