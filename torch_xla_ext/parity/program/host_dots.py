"""The exact replay's large matrix products on the host's BLAS, between segments XLA runs.

XLA:CPU computes a float64 ``dot_general`` with its own Eigen kernel, several times slower than
the BLAS NumPy links (a language model's head, 128x768 @ 768x50257 in f64: 0.5 s against 0.12 s
on two cores). The exact replay runs once per verify and is compared with the golden to a
tolerance, never bit for bit, so the order its sums take is free: every top-level f64 product of
at least :data:`MIN_FLOPS` is taken out of ``main``, its result becoming an argument and its
operands results, and the module is cut there into segments (:func:`.segments.split`, each
distinct one compiled once: a transformer's blocks now repeat between their products, so their
code is compiled once, not once per block). :func:`run` runs the segments in order and each
product with ``numpy.matmul`` as soon as its operands exist.

Example:
    >>> text = '''func.func @main(%x: tensor<64x64xf64>, %w: tensor<64x64xf64>) -> tensor<64x64xf64> {
    ...   %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [1] : (tensor<64x64xf64>, tensor<64x64xf64>) -> tensor<64x64xf64>
    ...   %1 = stablehlo.tanh %0 : tensor<64x64xf64>
    ...   return %1 : tensor<64x64xf64>
    ... }'''
    >>> from torch_xla_ext.parity.program.stablehlo import parse
    >>> ctx, module = parse(text, "example")
    >>> with ctx, ir.Location.unknown():
    ...     plan = split(module, min_flops=1)
    >>> [d.shape for d in plan.host], len(plan.segments.segments)   # tanh is XLA's, after the product
    ([(64, 64)], 1)
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from typing import Any, Callable, Hashable, Iterator, Sequence

import numpy as np

from torch_xla_ext._mlir_graph import dot_dimensions
from torch_xla_ext.parity.program import segments
from torch_xla_ext.parity.program.mlir import ir
from torch_xla_ext.parity.program.stablehlo import functions

__all__ = ["MIN_FLOPS", "HostDot", "Product", "one_blas_thread", "run", "split"]

# A product this large (2·M·N·K) runs on the host: below it XLA's kernel and a segment boundary
# (an execution, its results handed over) cost about what BLAS saves. GPT-2's block products are
# 1.5e8-6e8, its head 1e10.
MIN_FLOPS = 1e8


@contextlib.contextmanager
def one_blas_thread() -> Iterator[None]:
    """NumPy's BLAS on one thread for the block (``threadpoolctl``; nothing where it is not
    installed). Beside another computation that keeps every core busy (JAX's own run), a second
    BLAS thread waits for the first at each product's end: at GPT-2 124M the exact replay beside
    JAX's run took about 0.4 s less on one. The setting is the BLAS library's, for the whole
    process: the block is the early exact replay, while nothing else of the run uses NumPy's BLAS
    (torch's CPU runs have their own)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        yield
        return
    with threadpool_limits(limits=1, user_api="blas"):
        yield


@dataclasses.dataclass(frozen=True)
class Product:
    """A ``stablehlo.dot_general``'s dimension numbers and result shape, computed by NumPy."""

    lhs_batch: tuple[int, ...]
    rhs_batch: tuple[int, ...]
    lhs_contract: tuple[int, ...]
    rhs_contract: tuple[int, ...]
    shape: tuple[int, ...]

    @classmethod
    def of(cls, op: Any) -> "Product":
        """The product a ``dot_general`` op (inside its module's context) computes."""
        dims = dot_dimensions(op.attributes["dot_dimension_numbers"])
        return cls(*(tuple(dims.get(f"{side}_{kind}_dimensions", [])) for kind in ("batching", "contracting")
                     for side in ("lhs", "rhs")), tuple(ir.RankedTensorType(op.results[0].type).shape))

    def __call__(self, lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
        """The product as ``stablehlo.dot_general`` defines it (batch dimensions, then the lhs's
        free ones, then the rhs's), by one ``numpy.matmul``."""
        lhs, rhs = np.asarray(lhs), np.asarray(rhs)
        lfree = [d for d in range(lhs.ndim) if d not in self.lhs_batch and d not in self.lhs_contract]
        rfree = [d for d in range(rhs.ndim) if d not in self.rhs_batch and d not in self.rhs_contract]
        b = [lhs.shape[d] for d in self.lhs_batch]
        m = math.prod(lhs.shape[d] for d in lfree)
        n = math.prod(rhs.shape[d] for d in rfree)
        k = math.prod(lhs.shape[d] for d in self.lhs_contract)
        a = lhs.transpose([*self.lhs_batch, *lfree, *self.lhs_contract]).reshape(*b, m, k)
        w = rhs.transpose([*self.rhs_batch, *self.rhs_contract, *rfree]).reshape(*b, k, n)
        return np.matmul(a, w).reshape(self.shape)


@dataclasses.dataclass
class HostDot:
    """One product taken out of ``main``: the plan's keys of its result (an added argument of the
    cut module) and of its operands, and the product."""

    result: Hashable
    operands: tuple[Hashable, Hashable]
    product: Product

    @property
    def shape(self) -> tuple[int, ...]:
        return self.product.shape


@dataclasses.dataclass
class Plan:
    """The cut module's segments (:class:`.segments.Plan`; main's own results are the first
    ``num_results`` of its results) and the products between them, in program order."""

    segments: segments.Plan
    host: list[HostDot]
    num_results: int

    @property
    def modules(self) -> list[Any]:
        return self.segments.modules


def split(module: Any, min_flops: float | None = None) -> Plan | None:
    """A copy of ``module`` whose main has every top-level f64 ``dot_general`` of at least
    ``min_flops`` (default :data:`MIN_FLOPS`) taken out, cut into segments (``module`` is left as
    it is); None when there is no such product or the copy cannot be cut. Runs inside the
    module's context and a location."""
    min_flops = MIN_FLOPS if min_flops is None else min_flops
    if not any(_large_f64_product(op, min_flops) for op in _main_ops(module)):
        return None
    module = ir.Module.parse(str(module))
    main = _main(module)
    body = main.regions[0].blocks[0]
    ops = _main_ops(module)
    chosen = [op for op in ops[:-1] if _large_f64_product(op, min_flops)]
    ret = ops[-1]
    num_args, num_results = len(body.arguments), len(ret.operands)
    operands, dots = [], []  # the products' operands, main's results after its own
    for op in chosen:
        product = Product.of(op)
        arg = body.add_argument(op.results[0].type, op.location)
        first = num_results + len(operands)
        operands.extend(op.operands)
        dots.append((len(body.arguments) - 1, (first, first + 1), product))
        op.results[0].replace_all_uses_with(arg)  # a returned product too: main's results read it now
        op.erase()
    returned = [*ret.operands, *operands]
    with ir.InsertionPoint(ret):
        ir.Operation.create("func.return", operands=returned)
    ret.erase()
    ftype = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
    main.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
        list(ftype.inputs) + [body.arguments[k].type for k in range(num_args, len(body.arguments))],
        [v.type for v in returned]))
    for name in ("arg_attrs", "res_attrs"):  # one entry per argument or result: the cut module has more
        if name in main.attributes:
            del main.attributes[name]
    cut = segments.split(module, list(range(num_results, len(returned))), min_repeats=1)
    if cut is None:
        return None
    host = [HostDot(("arg", k), (cut.results[a], cut.results[b]), product) for k, (a, b), product in dots]
    return Plan(cut, host, num_results)


def _main(module: Any) -> Any:
    return next((f for f in functions(module) if ir.StringAttr(f.attributes["sym_name"]).value == "main"), None)


def _main_ops(module: Any) -> list:
    main = _main(module)
    return [o.operation for o in main.regions[0].blocks[0].operations] if main is not None else []


def _large_f64_product(op: Any, min_flops: float) -> bool:
    """A ``dot_general`` of f64 operands and result, without an algorithm of its own, of at least
    ``min_flops`` (2·output elements·contracted size)."""
    if op.name != "stablehlo.dot_general" or "algorithm" in op.attributes or len(op.operands) != 2:
        return False
    types = [ir.RankedTensorType(v.type) for v in (*op.operands, op.results[0])]
    if any(str(t.element_type) != "f64" or not t.has_static_shape for t in types):
        return False
    dims = dot_dimensions(op.attributes["dot_dimension_numbers"])
    k = math.prod(types[0].shape[d] for d in dims.get("lhs_contracting_dimensions", []))
    return 2.0 * math.prod(types[2].shape) * k >= min_flops


def run(plan: Plan, arrays: list, execute: Callable[[int, Sequence[Any]], list]) -> list[np.ndarray]:
    """main's own results for its arguments ``arrays`` (emptied as they are handed over):
    ``execute(module index, inputs)`` runs a segment's program; each product runs on the host
    once its operands exist. A value is dropped once nothing left reads it."""
    cut = plan.segments
    values: dict[Hashable, Any] = {("arg", k): a for k, a in enumerate(arrays)}
    arrays.clear()
    kept = set(cut.results[:plan.num_results])
    readers: dict[Hashable, int] = {}
    for segment in cut.segments:
        for k in segment.inputs:
            readers[k] = readers.get(k, 0) + 1
    for dot in plan.host:
        for k in dot.operands:
            readers[k] = readers.get(k, 0) + 1

    def read(keys: Sequence[Hashable]) -> list:
        out = [values[k] for k in keys]
        for k in keys:
            readers[k] -= 1
            if readers[k] == 0 and k not in kept:
                del values[k]
        return out

    pending = list(plan.host)

    def products() -> None:
        while pending and all(k in values for k in pending[0].operands):
            dot = pending.pop(0)
            values[dot.result] = dot.product(*read(dot.operands))

    products()
    for segment in cut.segments:
        outs = execute(segment.module, read(segment.inputs))
        values.update(zip(segment.outputs, outs))
        products()
    return [np.asarray(values[k]) for k in cut.results[:plan.num_results]]
