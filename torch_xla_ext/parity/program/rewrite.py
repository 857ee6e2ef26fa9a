"""The rewrites that turn the XLA run's program into a replay (:mod:`.replay` compiles them).

* **retyping and rounding** (:class:`Rewriter`): the rounded replay computes every bf16/f16 value
  in f32, which is what XLA:CPU does, and a ``stablehlo.reduce_precision`` (e8m7 for bf16, e5m10
  for f16) follows every op whose result the program rounds, per cc/parity's rounding analysis
  (reduction bodies round each step; a convert to f32 of an elementwise op, a dot or a
  convolution reads the unrounded value: XLA's excess precision). f32 and f64 ops keep their
  types, so XLA compiles them as in the original program (same fusion, summation order, FMA
  contraction and f32 approximations of transcendentals). The unrounded replays retype every
  float to f64 (or the narrow ones to f32) and round nothing.
* **a device's matmul precision** (:func:`apply_rules`, rounded replay only): each f32 dot and
  convolution computed as the rules' device computes it, by the arithmetic its registered rule
  holds (:mod:`.rules`): operands rounded to bf16 or TF32 with ``reduce_precision``, or split into
  pieces (truncated with a ``bitcast_convert`` and a mask, the rest rounded) whose products
  XLA:CPU sums in f32.
* **layouts** XLA:CPU runs faster, with the same values: ``x @ transpose(w)`` (torch_xla's
  ``nn.Linear``) as ``transpose(w @ x^T)`` in the unrounded replays, and ``w^T`` written out before
  the product in the rounded one (:func:`swap_transposed_dots`, :func:`materialize_transposed_rhs`).
* **intermediates** (:func:`with_intermediates`): every float value of main's top level as an
  extra result, for the per-op error of Model Explorer.

Example:
    >>> from torch_xla_ext.parity.program.stablehlo import build_graph, parse
    >>> ctx, module = parse('''func.func @main(%x: tensor<2xbf16>) -> tensor<2xbf16> {
    ...   %0 = stablehlo.multiply %x, %x : tensor<2xbf16>
    ...   return %0 : tensor<2xbf16>
    ... }''', "example")
    >>> with ctx, ir.Location.unknown():
    ...     Rewriter(rounded=True).function(build_graph(functions(module)[0]))
    ...     "stablehlo.reduce_precision" in str(module)
    True
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any


from torch_xla_ext import _dtypes
from torch_xla_ext._compat import jax_mlir
from torch_xla_ext._ext import parity as _core
from torch_xla_ext._mlir_graph import dot_dimensions
from torch_xla_ext.parity.errors import ReplayError
from torch_xla_ext.parity.program.mlir import ir
from torch_xla_ext.parity.program.rules import F32_MANTISSA_BITS, XLA_CPU, MatmulPrecision, Rules, is_f32_matmul
from torch_xla_ext.parity.program.stablehlo import FunctionGraph, functions, location_name

__all__ = ["NARROW_FORMATS", "WIDENED_TO_F64", "Rewriter", "apply_rules", "has_narrow_floats",
           "materialize_transposed_rhs", "swap_transposed_dots", "with_intermediates"]

# (exponent bits, mantissa bits) of each narrow float (cc/parity's IsNarrowFloat says which are).
NARROW_FORMATS = {_dtypes.by_name(n).mlir: _dtypes.float_format(n) for n in _dtypes.NARROW_FLOATS}
_NARROW_TENSOR = re.compile(r"tensor<(?:[0-9?]+x)*(?:" + "|".join(NARROW_FORMATS) + r")>")


def has_narrow_floats(text: str) -> bool:
    """Whether StableHLO ``text`` has a tensor of a narrow float type (bf16, f16): a program whose
    rounded replay rounds where its own rules place the roundings, not where the compiler does.

    Example:
        >>> has_narrow_floats("%0 = stablehlo.add %a, %b : tensor<2x3xbf16>"), has_narrow_floats("tensor<f32>")
        (True, False)
    """
    return _NARROW_TENSOR.search(text) is not None


# The floats the exact replay computes in f64.
WIDENED_TO_F64 = ("bf16", "f16", "f32")
# torch_xla's SPMD annotation: the value is unchanged (one device here).
_IDENTITY_CUSTOM_CALLS = frozenset({"Sharding"})
_SHARDING_ATTRS = ("mhlo.sharding",)
MODULE_SPMD_ATTRS = ("mhlo.num_partitions", "mhlo.num_replicas", "mhlo.spmd_output_sharding",
                     "mhlo.spmd_parameters_shardings")


class Rewriter:
    """Retypes one parsed module in place and inserts the rounding of the rounded replay (with
    ``rules``' matmul precision; ``applied`` counts the matmuls it changed, by precision name)."""

    def __init__(self, rounded: bool, precision: str = "f64", rules: Rules = XLA_CPU):
        self.ir = ir
        self.rounded = rounded
        self.precision = precision
        self.rules = rules
        self.applied: Counter = Counter()
        # Narrow floats computed in f32 (the rounded and the f32 replays), main's arguments widened
        # inside; otherwise every float in f64, main taking f64 arguments.
        self.widens_inside = rounded or precision == "f32"

    def target(self, t: Any) -> Any | None:
        """The replay's type for a value of type ``t``, or None when it keeps ``t``."""
        ir = self.ir
        if not jax_mlir.isa(t, ir.RankedTensorType):
            return None
        rt = ir.RankedTensorType(t)
        et = str(rt.element_type)
        if self.widens_inside:
            new = ir.F32Type.get() if _core.is_narrow_float(et) else None
        else:
            new = ir.F64Type.get() if et in WIDENED_TO_F64 else None
        return None if new is None else ir.RankedTensorType.get(rt.shape, new)

    def op(self, name: str, operands: list, result_type: Any, before: Any, attributes: dict | None = None) -> Any:
        with self.ir.InsertionPoint(before):
            return self.ir.Operation.create(name, results=[result_type], operands=operands,
                                            attributes=attributes or {}).results[0]

    def convert(self, value: Any, t: Any, before: Any) -> Any:
        return self.op("stablehlo.convert", [value], t, before)

    def round(self, value: Any, element_type: str, before: Any) -> Any:
        ir = self.ir
        e, m = NARROW_FORMATS[element_type]
        i32 = ir.IntegerType.get_signless(32)
        return self.op("stablehlo.reduce_precision", [value], value.type, before,
                       {"exponent_bits": ir.IntegerAttr.get(i32, e), "mantissa_bits": ir.IntegerAttr.get(i32, m)})

    def function(self, fg: FunctionGraph) -> None:
        ir = self.ir
        is_main = fg.name == "main"
        body = fg.func.regions[0].blocks[0]
        terminator = list(body.operations)[-1].operation
        first = fg.ops[0] if fg.ops else terminator
        for a in body.arguments:
            t = self.target(a.type)
            if t is None:
                continue
            if is_main and self.widens_inside:  # callers pass the original dtypes; widen once at the entry (exact)
                c = self.convert(a, t, first)
                a.replace_all_uses_except(c, c.owner.operation)
            else:
                # The f64 replay's main takes f64 arguments (Replay.__call__ widens them, exactly):
                # widened inside, XLA schedules every weight's f64 copy first and keeps them all
                # live (2W on top of the narrow arguments). The f32 ones widen inside: their copies
                # (W beside W/2) stay below the golden's 2W, and XLA widens faster than numpy here.
                a.set_type(t)
        erased: set[int] = set()
        for i, op in enumerate(fg.ops):
            for attr in _SHARDING_ATTRS:
                if attr in op.attributes:
                    del op.attributes[attr]
            kind = _core.op_class(op.name)
            if op.name == "stablehlo.custom_call" and custom_call_target(op) in _IDENTITY_CUSTOM_CALLS:
                src = op.operands[0]
                op.results[0].replace_all_uses_with(src)
                erased.add(i)
                continue
            if op.name == "stablehlo.custom_call" and custom_call_target(op).startswith("SPMD"):
                raise ReplayError(f"{fg.name}: custom_call @{custom_call_target(op)} (SPMD manual sharding) "
                                  f"changes shapes per device; the replay runs one device")
            if kind == _core.OpClass.OPAQUE:
                self._opaque(fg, i)
                continue
            for region in op.regions:
                for blk in region.blocks:
                    for a in blk.arguments:
                        t = self.target(a.type)
                        if t is not None:
                            a.set_type(t)
            for r in op.results:
                t = self.target(r.type)
                if t is not None:
                    r.set_type(t)
        if self.rounded:
            for p in fg.analysis.points:
                if p.op in erased:
                    continue
                op = fg.ops[p.op]
                r = op.results[p.result]
                rounded = self.round(r, p.element_type, fg.next_op[p.op])
                r.replace_all_uses_except(rounded, rounded.owner.operation)
                for user, operand in p.unrounded_uses:  # excess precision: these read it unrounded
                    fg.ops[user].operands[operand] = r
        if self.rounded and self.rules.rounds_matmuls:
            self.applied += apply_rules(fg, self.rules, erased)
        for i in sorted(erased, reverse=True):
            fg.ops[i].erase()
        inputs = [t for t in ir.FunctionType(ir.TypeAttr(fg.func.attributes["function_type"]).value).inputs] \
            if is_main and self.widens_inside else [a.type for a in body.arguments]
        outputs = [v.type for v in terminator.operands]
        fg.func.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(inputs, outputs))
        for attr in ("arg_attrs", "res_attrs"):  # shardings and layouts of the original types
            if attr in fg.func.attributes:
                del fg.func.attributes[attr]

    def _opaque(self, fg: FunctionGraph, index: int) -> None:
        """Constants, custom calls, bitcasts keep their types: convert around them."""
        op = fg.ops[index]
        for j, vid in enumerate(fg.operand_ids[index]):
            original = fg.mlir_types[vid]
            if op.operands[j].type != original:
                op.operands[j] = self.convert(op.operands[j], original, op)
        for r in op.results:
            t = self.target(r.type)
            if t is not None:
                c = self.convert(r, t, fg.next_op[index])
                r.replace_all_uses_except(c, c.owner.operation)  # an Operation: newer jaxlibs give OpViews


def apply_rules(fg: FunctionGraph, rules: Rules, erased: set[int]) -> Counter:
    """Computes every f32 dot and convolution of ``fg`` (f32 operands and result in the original
    program) as ``rules``' device does; each rewritten op joins ``erased``. Returns how many ops
    got each precision (by its name)."""
    applied: Counter = Counter()
    for i, op in enumerate(fg.ops):
        if i in erased or not is_f32_matmul(op) or str(ir.RankedTensorType(op.results[0].type).element_type) != "f32":
            continue
        if not all(str(ir.RankedTensorType(fg.mlir_types[v]).element_type) == "f32" for v in fg.operand_ids[i][:2]):
            continue  # a bf16/f16 product the retyping widened: the device multiplies it as it is
        precision = rules.for_dot(op)
        if not precision.rounds:
            continue
        with ir.InsertionPoint(op), op.location:
            result = _matmul_as(op, precision)
        op.results[0].replace_all_uses_with(result)
        erased.add(i)
        applied[precision.name] += 1
    return applied


def _matmul_as(op: Any, precision: MatmulPrecision) -> Any:
    """``op`` (an f32 dot or convolution) computed at ``precision``, inserted before it: each
    operand split into its pieces, their products summed in f32 in the order the precision lists
    them (:class:`~torch_xla_ext.parity.program.rules.MatmulPrecision`: one product for one bf16
    pass or TF32; XLA's DotAlgorithmRewriter's sums for 3 and 6 bf16 passes)."""
    lhs, rhs = op.operands[0], op.operands[1]
    attributes = {a.name: a.attr for a in op.attributes}

    def product(a: Any, b: Any) -> Any:
        return ir.Operation.create(op.name, results=[op.results[0].type], operands=[a, b],
                                   attributes=attributes).results[0]

    a, b = _pieces(lhs, precision), _pieces(rhs, precision)
    if not precision.partial:
        return product(a[0], b[0])
    (i, j), *rest = precision.partial
    total = product(a[i], b[j])
    for i, j in rest:
        total = _add(total, product(a[i], b[j]))
    return _add(_finite_or_zero(total), product(a[0], b[0]))


def _reduce_precision(value: Any, mantissa_bits: int) -> Any:
    i32 = ir.IntegerType.get_signless(32)
    return ir.Operation.create("stablehlo.reduce_precision", results=[value.type], operands=[value], attributes={
        "exponent_bits": ir.IntegerAttr.get(i32, 8), "mantissa_bits": ir.IntegerAttr.get(i32, mantissa_bits)}).results[0]


def _pieces(value: Any, precision: MatmulPrecision) -> list[Any]:
    """``value`` (f32) as ``precision.pieces`` f32 pieces of its mantissa bits, largest first:
    each but the last truncated (its low bits cleared), the last the remainder rounded to nearest."""
    pieces, rest = [], value
    for k in range(precision.pieces):
        if k == precision.pieces - 1:
            pieces.append(_reduce_precision(rest, precision.mantissa_bits))
            break
        high = _truncated(rest, precision.mantissa_bits)
        pieces.append(high)
        rest = ir.Operation.create("stablehlo.subtract", results=[rest.type], operands=[rest, high]).results[0]
    return pieces


def _truncated(value: Any, mantissa_bits: int) -> Any:
    """``value`` (f32) with the mantissa bits below its first ``mantissa_bits`` cleared."""
    t = ir.RankedTensorType(value.type)
    u32 = ir.IntegerType.get_unsigned(32)
    bits_type = ir.RankedTensorType.get(t.shape, u32)
    bits = ir.Operation.create("stablehlo.bitcast_convert", results=[bits_type], operands=[value]).results[0]
    mask = ir.Operation.create("stablehlo.constant", results=[bits_type], attributes={
        "value": ir.DenseElementsAttr.get_splat(bits_type, ir.IntegerAttr.get(u32, _keep_mask(mantissa_bits)))}).results[0]
    kept = ir.Operation.create("stablehlo.and", results=[bits_type], operands=[bits, mask]).results[0]
    return ir.Operation.create("stablehlo.bitcast_convert", results=[value.type], operands=[kept]).results[0]


def _keep_mask(mantissa_bits: int) -> int:
    """The f32 bit mask that keeps the sign, the exponent and the first ``mantissa_bits`` mantissa
    bits (0xFFFF0000 for bf16's 7)."""
    return 0xFFFFFFFF & ~((1 << (F32_MANTISSA_BITS - mantissa_bits)) - 1)


def _add(a: Any, b: Any) -> Any:
    return ir.Operation.create("stablehlo.add", results=[a.type], operands=[a, b]).results[0]


def _finite_or_zero(value: Any) -> Any:
    """``value`` where |value| <= inf, else 0: the partial sum of the small pieces' products is NaN
    when an operand is infinite (its low pieces are 0 and inf * 0 is NaN), and the high pieces'
    product alone carries the infinity (as XLA's DotAlgorithmRewriter guards it)."""
    t = ir.RankedTensorType(value.type)
    f32 = ir.F32Type.get()
    inf = ir.Operation.create("stablehlo.constant", results=[t], attributes={
        "value": ir.DenseElementsAttr.get_splat(t, ir.FloatAttr.get(f32, float("inf")))}).results[0]
    zero = ir.Operation.create("stablehlo.constant", results=[t], attributes={
        "value": ir.DenseElementsAttr.get_splat(t, ir.FloatAttr.get(f32, 0.0))}).results[0]
    magnitude = ir.Operation.create("stablehlo.abs", results=[t], operands=[value]).results[0]
    mask_type = ir.RankedTensorType.get(t.shape, ir.IntegerType.get_signless(1))
    finite = ir.Operation.create("stablehlo.compare", results=[mask_type], operands=[inf, magnitude], attributes={
        "comparison_direction": ir.Attribute.parse("#stablehlo<comparison_direction GE>")}).results[0]
    return ir.Operation.create("stablehlo.select", results=[t], operands=[finite, value, zero]).results[0]


def custom_call_target(op: Any) -> str:
    attr = op.attributes["call_target_name"] if "call_target_name" in op.attributes else None
    return ir.StringAttr(attr).value if attr is not None else ""


def swap_transposed_dots(module: Any) -> int:
    """Rewrites every matrix product ``x @ transpose(w)`` (``stablehlo.dot`` or a ``dot_general``
    without batch dimensions, 2-D operands, the rhs a ``transpose`` [1, 0]: how torch_xla lowers
    ``nn.Linear``) as ``transpose(optimization_barrier(w @ x^T))``. XLA:CPU folds the transpose
    into the dot either way; as ``x @ w^T`` its Eigen kernel reads the weight across its rows,
    several times slower (4.5x for 128x2048 @ 2048x5632 in f32) than ``w @ x^T`` reading it along
    them, and the barrier keeps XLA from swapping the operands back. Each output element is the
    same sum of the same products, but not always in the same order (XLA:CPU picks its kernel by
    the output's shape): only the unrounded replays use it, whose figures are compared with the
    golden to a tolerance, never bit for bit. Returns how many dots were rewritten."""
    swapped = 0
    for op, x, producer in _products_of_a_transpose(module):
        rt = ir.RankedTensorType(op.results[0].type)
        w = producer.operands[0]
        m, n = rt.shape
        attrs = {"dot_dimension_numbers": ir.Attribute.parse(
            "#stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [1]>")}
        if "precision_config" in op.attributes:  # one entry per operand: swapped with them
            precision = list(ir.ArrayAttr(op.attributes["precision_config"]))
            attrs["precision_config"] = ir.ArrayAttr.get(precision[::-1])
        with ir.InsertionPoint(op), op.location:
            product = ir.Operation.create("stablehlo.dot_general", operands=[w, x], attributes=attrs,
                                          results=[ir.RankedTensorType.get([n, m], rt.element_type)]).results[0]
            kept = ir.Operation.create("stablehlo.optimization_barrier", results=[product.type],
                                       operands=[product]).results[0]
            out = ir.Operation.create("stablehlo.transpose", results=[rt], operands=[kept],
                                      attributes={"permutation": ir.DenseI64ArrayAttr.get([1, 0])}).results[0]
        op.results[0].replace_all_uses_with(out)
        op.erase()
        swapped += 1
    return swapped


def materialize_transposed_rhs(module: Any) -> int:
    """Puts an ``optimization_barrier`` between every ``transpose [1, 0]`` and the matrix product
    that reads it as its right-hand side (``x @ transpose(w)``, torch_xla's ``nn.Linear``): XLA
    then writes ``w^T`` out and multiplies ``x`` by it as it is laid out, instead of folding the
    transpose into the dot, whose XLA:CPU kernel reads a transposed right-hand side 1.5-2.5x
    slower. The operands keep their roles (unlike :func:`swap_transposed_dots`), so the kernel
    sums each element in the same order: the rounded replay uses it. Returns how many."""
    done = 0
    for op, _, producer in _products_of_a_transpose(module):
        t = producer.results[0]
        with ir.InsertionPoint(op), op.location:
            kept = ir.Operation.create("stablehlo.optimization_barrier", results=[t.type], operands=[t]).results[0]
        op.operands[1] = kept
        done += 1
    return done


def _products_of_a_transpose(module: Any) -> list[tuple[Any, Any, Any]]:
    """(dot, its lhs, the ``transpose`` [1, 0] it reads as rhs) for every plain matrix product
    ``x @ transpose(w)`` of 2-D operands (``stablehlo.dot``, or a ``dot_general`` without batch
    dimensions or algorithm): how torch_xla lowers ``nn.Linear``."""
    found = []
    for op in list(_ops_in(module.operation)):
        if op.name not in ("stablehlo.dot", "stablehlo.dot_general") or len(op.operands) != 2:
            continue
        x, t = op.operands
        producer = getattr(t.owner, "operation", None)  # None: a block argument
        if producer is None or producer.name != "stablehlo.transpose":
            continue
        if list(ir.DenseI64ArrayAttr(producer.attributes["permutation"])) != [1, 0]:
            continue
        if op.name == "stablehlo.dot_general" and not _plain_matmul(op):
            continue
        if ir.RankedTensorType(x.type).rank != 2 or ir.RankedTensorType(op.results[0].type).rank != 2:
            continue
        found.append((op, x, producer))
    return found


def _plain_matmul(op: Any) -> bool:
    """Whether a ``dot_general`` is a plain matrix product (contracting lhs dim 1 with rhs dim 0,
    no batch dimensions) with no algorithm of its own."""
    if "algorithm" in op.attributes:
        return False
    dims = dot_dimensions(op.attributes["dot_dimension_numbers"])
    return (dims.get("lhs_contracting_dimensions") == [1] and dims.get("rhs_contracting_dimensions") == [0]
            and not dims.get("lhs_batching_dimensions") and not dims.get("rhs_batching_dimensions"))


def _ops_in(op: Any):
    """Every operation nested in ``op``'s regions, outermost first."""
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                yield inner.operation
                yield from _ops_in(inner.operation)


def with_intermediates(module: Any) -> list[tuple[str, int]]:
    """Adds every float value computed at main's top level to its results (for per-op errors);
    returns (op location name, index among main's top-level ops) per added result, in order."""
    main = next(f for f in functions(module) if ir.StringAttr(f.attributes["sym_name"]).value == "main")
    body = main.regions[0].blocks[0]
    ops = [o.operation for o in body.operations]
    ret = ops[-1]
    added, names = [], []
    for k, op in enumerate(ops[:-1]):
        if op.name in ("stablehlo.constant",) or len(op.results) != 1:
            continue
        r = op.results[0]
        if jax_mlir.isa(r.type, ir.RankedTensorType) and str(ir.RankedTensorType(r.type).element_type) in (
                "bf16", "f16", "f32", "f64"):
            added.append(r)
            names.append((location_name(op.location) or f"%{k}", k))
    with ir.InsertionPoint(ret):
        ir.Operation.create("func.return", operands=list(ret.operands) + added)
    ret.erase()
    ft = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
    main.attributes["function_type"] = ir.TypeAttr.get(
        ir.FunctionType.get(list(ft.inputs), list(ft.results) + [v.type for v in added]))
    if "res_attrs" in main.attributes:
        del main.attributes["res_attrs"]
    return names


