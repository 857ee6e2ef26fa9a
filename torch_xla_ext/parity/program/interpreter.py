"""The exact replay evaluated op by op in NumPy: no compile.

The exact replay runs once per verify, in float64, and is compared with the golden to a tolerance,
so neither XLA's fusion nor its evaluation order matters there, only each op's math. At GPT-2
124M under torchax, XLA:CPU compiling the float64 program cost 0.5 s alone and 1.1-1.4 s beside
JAX's own compile; NumPy evaluates its 2,000 ops in about the time XLA runs them (its products on
BLAS, :class:`.host_dots.Product`), with nothing to compile. An :class:`Interpreter` is built
only for a module whose every op, in every function, it knows (:data:`OPS`: elementwise math,
shapes, reductions with a one-op body, products, gathers, cumulative windows, calls); otherwise
:class:`Unsupported` names the first op it does not, and the replay compiles the program with XLA
as before. Integer division, remainder and power, which StableHLO and NumPy round differently,
are such ops.

Example:
    >>> text = '''func.func @main(%x: tensor<3xf64>) -> tensor<f64> {
    ...   %0 = stablehlo.tanh %x : tensor<3xf64>
    ...   %c = stablehlo.constant dense<0.0> : tensor<f64>
    ...   %1 = stablehlo.reduce(%0 init: %c) applies stablehlo.add across dimensions = [0] : (tensor<3xf64>, tensor<f64>) -> tensor<f64>
    ...   return %1 : tensor<f64>
    ... }'''
    >>> from torch_xla_ext.parity.program.stablehlo import parse
    >>> ctx, module = parse(text, "example")
    >>> with ctx:
    ...     run = Interpreter(module)
    >>> round(float(run([np.array([0.5, 1.0, -0.5])])[0]), 6)
    0.761594
"""

from __future__ import annotations

import re
from typing import Any, Callable, Sequence

import numpy as np

from torch_xla_ext import _dtypes
from torch_xla_ext._compat import jax_mlir
from torch_xla_ext._mlir_graph import dot_dimensions
from torch_xla_ext.parity.program.host_dots import Product
from torch_xla_ext.parity.program.mlir import ir
from torch_xla_ext.parity.program.stablehlo import functions

__all__ = ["OPS", "Interpreter", "Unsupported"]


class Unsupported(Exception):
    """An op the interpreter does not evaluate (its name and why): the replay compiles instead."""


_Step = Callable[..., Any]


def _dtype(t: Any) -> np.dtype:
    et = str(ir.RankedTensorType(t).element_type)
    row = _dtypes.by_mlir(et)
    if row is None:
        raise Unsupported(f"element type {et}")
    return _dtypes.numpy_dtype(row.name)


def _shape(t: Any) -> tuple[int, ...]:
    rt = ir.RankedTensorType(t)
    if not rt.has_static_shape:
        raise Unsupported("a dynamic shape")
    return tuple(int(d) for d in rt.shape)


def _ints(op: Any, name: str) -> list[int]:
    return [int(x) for x in ir.DenseI64ArrayAttr(op.attributes[name])]


def _is_float(t: Any) -> bool:
    return _dtype(t).kind == "f"


def _is_bool(t: Any) -> bool:
    return _dtype(t) == np.bool_


# Elementwise ops by name: (the NumPy function, whether integer operands are allowed).
_UNARY: dict[str, tuple[Callable, bool]] = {
    "stablehlo.abs": (np.abs, True),
    "stablehlo.negate": (np.negative, True),
    "stablehlo.exponential": (np.exp, False),
    "stablehlo.exponential_minus_one": (np.expm1, False),
    "stablehlo.log": (np.log, False),
    "stablehlo.log_plus_one": (np.log1p, False),
    "stablehlo.sqrt": (np.sqrt, False),
    "stablehlo.rsqrt": (lambda x: 1.0 / np.sqrt(x), False),
    "stablehlo.cbrt": (np.cbrt, False),
    "stablehlo.tanh": (np.tanh, False),
    "stablehlo.logistic": (lambda x: 1.0 / (1.0 + np.exp(-x)), False),
    "stablehlo.sine": (np.sin, False),
    "stablehlo.cosine": (np.cos, False),
    "stablehlo.tan": (np.tan, False),
    "stablehlo.floor": (np.floor, False),
    "stablehlo.ceil": (np.ceil, False),
    "stablehlo.round_nearest_even": (np.rint, False),
    "stablehlo.sign": (np.sign, True),
    "stablehlo.is_finite": (np.isfinite, False),
}
_BINARY: dict[str, tuple[Callable, bool]] = {
    "stablehlo.add": (np.add, True),
    "stablehlo.subtract": (np.subtract, True),
    "stablehlo.multiply": (np.multiply, True),
    "stablehlo.divide": (np.divide, False),
    "stablehlo.remainder": (np.fmod, False),  # the dividend's sign, as StableHLO's
    "stablehlo.power": (lambda a, b: _power(a, b), False),
    "stablehlo.atan2": (np.arctan2, False),
    "stablehlo.maximum": (np.maximum, True),  # NaN propagates, as StableHLO's
    "stablehlo.minimum": (np.minimum, True),
    "stablehlo.and": (np.bitwise_and, True),
    "stablehlo.or": (np.bitwise_or, True),
    "stablehlo.xor": (np.bitwise_xor, True),
}
def _power(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a ** b``: a broadcast small integer exponent (GELU's cube) by products, about 30x
    ``numpy.power``'s elementwise ``pow``; a broadcast exponent as a scalar (NumPy's fast paths)."""
    b = np.asarray(b)
    if b.size and not any(b.strides):
        e = b.flat[0]
        if np.isfinite(e) and e == int(e) and 1 <= e <= 4:
            out = a
            for _ in range(int(e) - 1):
                out = out * a
            return out
        return np.power(a, e)
    return np.power(a, b)


# A reduction body's one op: its NumPy ufunc.
_REDUCERS = {"stablehlo.add": np.add, "stablehlo.multiply": np.multiply, "stablehlo.maximum": np.maximum,
             "stablehlo.minimum": np.minimum, "stablehlo.and": np.bitwise_and, "stablehlo.or": np.bitwise_or}
_COMPARE = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal, "GT": np.greater,
            "GE": np.greater_equal}


def _unary(op: Any, _: Any) -> _Step:
    fn, ints = _UNARY[op.name]
    if not ints and not _is_float(op.operands[0].type):
        raise Unsupported(f"{op.name} of integers")
    dtype = _dtype(op.results[0].type)
    return lambda x: np.asarray(fn(x), dtype)


def _not(op: Any, _: Any) -> _Step:
    return np.logical_not if _is_bool(op.operands[0].type) else np.invert


def _binary(op: Any, _: Any) -> _Step:
    fn, ints = _BINARY[op.name]
    if not ints and not _is_float(op.operands[0].type):
        raise Unsupported(f"{op.name} of integers (StableHLO rounds toward zero)")
    dtype = _dtype(op.results[0].type)
    return lambda a, b: np.asarray(fn(a, b), dtype)


def _compare(op: Any, _: Any) -> _Step:
    direction = re.search(r"comparison_direction (\w+)", str(op.attributes["comparison_direction"])).group(1)
    if "compare_type" in op.attributes and "TOTALORDER" in str(op.attributes["compare_type"]):
        raise Unsupported("a total-order comparison")
    fn = _COMPARE[direction]
    return lambda a, b: fn(a, b)


def _select(op: Any, _: Any) -> _Step:
    return lambda p, a, b: np.where(p, a, b)


def _clamp(op: Any, _: Any) -> _Step:
    return lambda lo, x, hi: np.minimum(np.maximum(x, lo), hi)


def _convert(op: Any, _: Any) -> _Step:
    source, target = _dtype(op.operands[0].type), _dtype(op.results[0].type)
    if target == np.bool_:
        return lambda x: x != 0
    if source.kind == "f" and target.kind in "iu":
        raise Unsupported("a float-to-integer convert")
    return lambda x: x.astype(target)


def _constant(op: Any, _: Any) -> _Step:
    attr = op.attributes["value"]
    if jax_mlir.is_dense_resource(attr):
        raise Unsupported("a dense_resource constant")
    shape, dtype = _shape(op.results[0].type), _dtype(op.results[0].type)
    dense = ir.DenseElementsAttr(attr)
    if dense.is_splat:
        v = dense.get_splat_value()
        scalar = (ir.FloatAttr(v).value if jax_mlir.isa(v, ir.FloatAttr) else ir.IntegerAttr(v).value)
        value = np.full(shape, scalar, dtype)
    elif dtype == np.bool_:
        raise Unsupported("a non-splat boolean constant")
    else:
        value = np.array(dense).astype(dtype).reshape(shape)
    return lambda: value


def _iota(op: Any, _: Any) -> _Step:
    shape, dtype = _shape(op.results[0].type), _dtype(op.results[0].type)
    d = int(ir.IntegerAttr(op.attributes["iota_dimension"]).value)
    view = [1] * len(shape)
    view[d] = shape[d]
    value = np.broadcast_to(np.arange(shape[d], dtype=dtype).reshape(view), shape)
    return lambda: value


def _broadcast_in_dim(op: Any, _: Any) -> _Step:
    dims = _ints(op, "broadcast_dimensions")
    shape = _shape(op.results[0].type)
    order = sorted(range(len(dims)), key=lambda k: dims[k])
    view = [1] * len(shape)
    in_shape = _shape(op.operands[0].type)
    for k in order:
        view[dims[k]] = in_shape[k]

    def run(x: np.ndarray) -> np.ndarray:
        if order != list(range(len(dims))):
            x = x.transpose(order)
        return np.broadcast_to(x.reshape(view), shape)

    return run


def _reshape(op: Any, _: Any) -> _Step:
    shape = _shape(op.results[0].type)
    return lambda x: np.reshape(x, shape)


def _transpose(op: Any, _: Any) -> _Step:
    perm = _ints(op, "permutation")
    return lambda x: np.transpose(x, perm)


def _slice(op: Any, _: Any) -> _Step:
    index = tuple(slice(s, e, st) for s, e, st in
                  zip(_ints(op, "start_indices"), _ints(op, "limit_indices"), _ints(op, "strides")))
    return lambda x: x[index]


def _dynamic_slice(op: Any, _: Any) -> _Step:
    sizes = _ints(op, "slice_sizes")

    def run(x: np.ndarray, *starts: np.ndarray) -> np.ndarray:
        index = []
        for d, (s, n) in enumerate(zip(starts, sizes)):
            s = min(max(int(s), 0), x.shape[d] - n)  # clamped, as StableHLO's
            index.append(slice(s, s + n))
        return x[tuple(index)]

    return run


def _concatenate(op: Any, _: Any) -> _Step:
    d = int(ir.IntegerAttr(op.attributes["dimension"]).value)
    return lambda *xs: np.concatenate(xs, axis=d)


def _pad(op: Any, _: Any) -> _Step:
    low, high, interior = _ints(op, "edge_padding_low"), _ints(op, "edge_padding_high"), _ints(op, "interior_padding")
    if any(interior) or min(low + high, default=0) < 0:
        raise Unsupported("interior or negative padding")
    widths = list(zip(low, high))
    return lambda x, v: np.pad(x, widths, constant_values=v.item())


def _identity(op: Any, _: Any) -> _Step:
    return lambda *xs: list(xs)


def _one_op_body(op: Any) -> Any:
    """The reducing ufunc of a region whose block applies one op to its two arguments and returns it."""
    block = op.regions[0].blocks[0]
    ops = [o.operation for o in block.operations]
    args = list(block.arguments)
    if (len(ops) != 2 or ops[1].name != "stablehlo.return" or ops[0].name not in _REDUCERS or len(args) != 2
            or list(ops[0].operands) not in (args, args[::-1]) or list(ops[1].operands) != [ops[0].results[0]]):
        raise Unsupported(f"{op.name} with a body of its own")
    return _REDUCERS[ops[0].name]


def _reduce(op: Any, _: Any) -> _Step:
    if len(op.operands) != 2:
        raise Unsupported("a reduction of several operands")
    fn = _one_op_body(op)
    dims = tuple(_ints(op, "dimensions"))
    dtype = _dtype(op.results[0].type)
    return lambda x, init: np.asarray(fn(fn.reduce(x, axis=dims), init), dtype)


def _reduce_window(op: Any, _: Any) -> _Step:
    if len(op.operands) != 2:
        raise Unsupported("a windowed reduction of several operands")
    fn = _one_op_body(op)
    rank = len(_shape(op.operands[0].type))
    window = _ints(op, "window_dimensions")
    strides = _ints(op, "window_strides") if "window_strides" in op.attributes else [1] * rank
    for name in ("base_dilations", "window_dilations"):
        if name in op.attributes and any(d != 1 for d in _ints(op, name)):
            raise Unsupported("a dilated window")
    padding = (np.array(ir.DenseIntElementsAttr(op.attributes["padding"])).reshape(rank, 2).tolist()
               if "padding" in op.attributes else [[0, 0]] * rank)
    dtype = _dtype(op.results[0].type)
    index = tuple(slice(None, None, s) for s in strides)

    def run(x: np.ndarray, init: np.ndarray) -> np.ndarray:
        padded = np.pad(x, padding, constant_values=init.item())
        windows = np.lib.stride_tricks.sliding_window_view(padded, window)[index]
        axes = tuple(range(rank, 2 * rank))
        return np.asarray(fn(fn.reduce(windows, axis=axes), init), dtype)

    return run


def _dot_general(op: Any, _: Any) -> _Step:
    if "algorithm" in op.attributes:
        raise Unsupported("a dot with an algorithm")
    dtype = _dtype(op.results[0].type)
    if dtype.kind != "f":
        raise Unsupported("an integer dot")
    product = Product.of(op)  # a dynamic result shape is refused where _Function reads every result
    return lambda a, b: np.asarray(product(a, b), dtype)


def _gather(op: Any, _: Any) -> _Step:
    text = str(op.attributes["dimension_numbers"])
    dims = dot_dimensions(text)  # the same "name = [..]" lists
    if dims.get("operand_batching_dims") or dims.get("start_indices_batching_dims"):
        raise Unsupported("a gather with batching dimensions")
    vector_dim = int(re.search(r"index_vector_dim = (\d+)", text).group(1)) if "index_vector_dim" in text else None
    offset_dims, collapsed = dims.get("offset_dims", []), dims.get("collapsed_slice_dims", [])
    start_map = dims.get("start_index_map", [])
    sizes = _ints(op, "slice_sizes")
    operand_shape, out_shape = _shape(op.operands[0].type), _shape(op.results[0].type)
    indices_rank = len(_shape(op.operands[1].type))
    if vector_dim is None:
        vector_dim = indices_rank
    kept = [d for d in range(len(operand_shape)) if d not in collapsed]  # the slice's dims in the output

    def run(x: np.ndarray, indices: np.ndarray) -> np.ndarray:
        idx = indices if vector_dim < indices.ndim else indices[..., None]
        idx = np.moveaxis(idx, vector_dim, -1) if vector_dim < indices.ndim else idx
        batch = idx.shape[:-1]
        nb = len(batch)
        # Each operand dim's index: its start (clamped so the slice fits) plus the slice's own offset.
        grids = []
        for d, n in enumerate(sizes):
            start = np.zeros(batch, np.int64)
            if d in start_map:
                start = np.clip(idx[..., start_map.index(d)].astype(np.int64), 0, operand_shape[d] - n)
            offset = np.arange(n).reshape((1,) * nb + tuple(n if e == d else 1 for e in range(len(sizes))))
            grids.append(start.reshape(batch + (1,) * len(sizes)) + offset)
        taken = x[tuple(grids)]  # batch dims, then every operand dim of the slice
        taken = taken.reshape(batch + tuple(sizes[d] for d in kept))
        # Output: the offset dims at their places, the batch dims in order in the others.
        batch_places = [d for d in range(len(out_shape)) if d not in offset_dims]
        order = [0] * len(out_shape)
        for k, d in enumerate(batch_places):
            order[d] = k
        for k, d in enumerate(offset_dims):
            order[d] = nb + k
        return np.transpose(taken, order).reshape(out_shape)

    return run


def _call(op: Any, interpreter: "Interpreter") -> _Step:
    callee = interpreter.function(ir.FlatSymbolRefAttr(op.attributes["callee"]).value)
    return lambda *xs: callee.run(list(xs))


OPS: dict[str, Callable[[Any, Any], _Step]] = {
    **{name: _unary for name in _UNARY}, **{name: _binary for name in _BINARY},
    "stablehlo.not": _not, "stablehlo.compare": _compare, "stablehlo.select": _select, "stablehlo.clamp": _clamp,
    "stablehlo.convert": _convert, "stablehlo.constant": _constant, "stablehlo.iota": _iota,
    "stablehlo.broadcast_in_dim": _broadcast_in_dim, "stablehlo.reshape": _reshape, "stablehlo.transpose": _transpose,
    "stablehlo.slice": _slice, "stablehlo.dynamic_slice": _dynamic_slice, "stablehlo.concatenate": _concatenate,
    "stablehlo.pad": _pad, "stablehlo.optimization_barrier": _identity, "stablehlo.reduce": _reduce,
    "stablehlo.reduce_window": _reduce_window, "stablehlo.dot_general": _dot_general, "stablehlo.gather": _gather,
    "func.call": _call,
}


class _Function:
    """One function's ops as steps over a table of values; a value is dropped after its last read."""

    def __init__(self, func: Any, interpreter: "Interpreter"):
        body = func.regions[0].blocks[0]
        ids: dict[Any, int] = {a: k for k, a in enumerate(body.arguments)}
        self.num_args = len(ids)
        self.steps: list[tuple[_Step, list[int], list[int]]] = []
        self.returned: list[int] = []
        for o in body.operations:
            op = o.operation
            if op.name == "func.return":
                self.returned = [ids[v] for v in op.operands]
                break
            make = OPS.get(op.name)
            if make is None:
                raise Unsupported(op.name)
            step = make(op, interpreter)
            try:
                inputs = [ids[v] for v in op.operands]
            except KeyError:
                raise Unsupported(f"{op.name} reads a value from outside its function") from None
            outputs = []
            for r in op.results:
                _shape(r.type)
                ids[r] = len(ids)
                outputs.append(ids[r])
            self.steps.append((step, inputs, outputs))
        self.num_values = len(ids)
        last: dict[int, int] = {}
        for s, (_, inputs, _) in enumerate(self.steps):
            for v in inputs:
                last[v] = s
        keep = set(self.returned)
        self.frees = [[] for _ in self.steps]
        for v, s in last.items():
            if v not in keep:
                self.frees[s].append(v)

    def run(self, args: list) -> list[np.ndarray]:
        values: list[Any] = [None] * self.num_values
        values[:self.num_args] = args
        args.clear()
        for (step, inputs, outputs), frees in zip(self.steps, self.frees):
            out = step(*[values[v] for v in inputs])
            if len(outputs) == 1 and not isinstance(out, list):
                values[outputs[0]] = out
            else:
                for v, x in zip(outputs, out):
                    values[v] = x
            for v in frees:
                values[v] = None
        return [np.asarray(values[v]) for v in self.returned]


class Interpreter:
    """A module's ``main`` evaluated in NumPy, op by op (module docstring); built inside the module's
    context. :class:`Unsupported` when an op of a function main reaches is not one of :data:`OPS`.
    Calling it with main's arguments (NumPy arrays of its types) returns its results."""

    def __init__(self, module: Any):
        self._funcs = {ir.StringAttr(f.attributes["sym_name"]).value: f for f in functions(module)}
        self._built: dict[str, _Function] = {}
        if "main" not in self._funcs:
            raise Unsupported("no function 'main'")
        self.main = self.function("main")

    def function(self, name: str) -> _Function:
        if name not in self._built:
            if name not in self._funcs:
                raise Unsupported(f"a call of {name}, which the module does not define")
            self._built[name] = None  # a recursive call
            self._built[name] = _Function(self._funcs[name], self)
        built = self._built[name]
        if built is None:
            raise Unsupported(f"a recursive call of {name}")
        return built

    def __call__(self, args: Sequence[Any]) -> list[np.ndarray]:
        with np.errstate(all="ignore"):  # IEEE results (inf, NaN), as XLA gives them, without warnings
            return self.main.run(list(args))
