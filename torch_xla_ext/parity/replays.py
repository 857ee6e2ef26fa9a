"""Replays of the XLA run's program, compiled by XLA itself through JAX's CPU client.

Two rewrites of the StableHLO module (:mod:`torch_xla_ext.parity.stablehlo`):

* **rounded**: every bf16/f16 value is computed in f32, which is what XLA:CPU does, and a
  ``stablehlo.reduce_precision`` (e8m7 for bf16, e5m10 for f16) follows every op whose result
  the program rounds, per cc/parity's rounding analysis (reduction bodies round each step; a
  convert to f32 of an elementwise op, a dot or a convolution reads the unrounded value: XLA's
  excess precision). f32 and f64 ops keep their types, so XLA compiles them as in the original
  program (same fusion, summation order, FMA contraction and f32 approximations of
  transcendentals). On the zoo this replay is bit-identical to torch_xla's XLA run.
* **exact**: every float is f64 and nothing rounds: the program's math, to compare with an fp64
  run of the reference. ``precision="f32"`` computes the narrow floats in f32 instead, still
  rounding nothing: for a program that rounds to bf16/f16 that is 2^13 (f16) to 2^16 (bf16) times
  finer than its roundings, so it tells the program's math from its rounding as the f64 one does,
  at f32's speed and with f32 copies of the weights (see :func:`unrounded_precision`).

Either replay covers every op XLA compiles (gather, convolution, batch-norm, pad, reduce-window,
select-and-scatter, while loops, calls, ...): XLA executes it, nothing is interpreted here.

Example:
    >>> import ml_dtypes, numpy as np
    >>> text = '''func.func @main(%x: tensor<2x4xbf16>, %w: tensor<4x4xbf16>, %b: tensor<4xbf16>) -> tensor<2x4xbf16> {
    ...   %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<2x4xbf16>, tensor<4x4xbf16>) -> tensor<2x4xbf16>
    ...   %1 = stablehlo.broadcast_in_dim %b, dims = [1] : (tensor<4xbf16>) -> tensor<2x4xbf16>
    ...   %2 = stablehlo.add %0, %1 : tensor<2x4xbf16>
    ...   return %2 : tensor<2x4xbf16>
    ... }'''
    >>> program = Program(text)                   # or Program.from_hlo_proto(proto) of an XLA run
    >>> x = np.full((2, 4), 1.0078125, ml_dtypes.bfloat16)
    >>> graph_args = [x, np.eye(4, dtype=ml_dtypes.bfloat16), np.full(4, 2.0 ** -8, ml_dtypes.bfloat16)]
    >>> rounded = Replay(program, rounded=True)(graph_args)    # dot rounded to bf16, then the add
    >>> exact = Replay(program, rounded=False)(graph_args)     # in fp64
    >>> float(rounded[0][0, 0]), float(exact[0][0, 0])
    (1.015625, 1.01171875)
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np

from torch_xla_ext import _dtypes
from torch_xla_ext._ext import parity as _core
from torch_xla_ext._mlir_graph import dot_dimensions
from torch_xla_ext.parity import segments
from torch_xla_ext.parity.errors import ParityError, ParityTypeError, ReplayError
from torch_xla_ext.parity.runners import GraphArgs, made, release_freed_memory
from torch_xla_ext.parity.stablehlo import FunctionGraph, Program, first_line, build_graph, functions, parse

__all__ = ["NARROW_FORMATS", "Replay", "replay", "unrounded_precision"]

# (exponent bits, mantissa bits) of each narrow float (cc/parity's IsNarrowFloat says which are).
NARROW_FORMATS = {_dtypes.by_name(n).mlir: _dtypes.float_format(n) for n in _dtypes.NARROW_FLOATS}
# torch_xla's SPMD annotation: the value is unchanged (one device here).
_IDENTITY_CUSTOM_CALLS = frozenset({"Sharding"})
_SHARDING_ATTRS = ("mhlo.sharding",)
_MODULE_SPMD_ATTRS = ("mhlo.num_partitions", "mhlo.num_replicas", "mhlo.spmd_output_sharding",
                      "mhlo.spmd_parameters_shardings")


def unrounded_precision(program: Program) -> str:
    """The float the unrounded replay of ``program`` computes in, when only the program's math is
    asked for: "f32" when the program rounds to a narrow float somewhere (its run's error is then
    made of roundings 2^13 to 2^16 times coarser than f32's, far above what the comparison with
    the golden can confuse), "f64" otherwise (an f32 run needs f64 to see its own roundings). At
    0.9B parameters f32 halves the replay's copies of the weights and XLA:CPU's f64 dots take
    about 3x its f32 dots. A caller that finds the f32 replay off the golden confirms with f64
    (verify does), so no verdict rests on f32 alone."""
    return "f32" if program.rounding_points else "f64"


def _numpy_dtype(et: str) -> np.dtype:
    row = _dtypes.by_mlir(et)
    if row is None:
        raise ReplayError(f"main takes an argument of element type {et}, which the replay cannot pass")
    return _dtypes.numpy_dtype(row.name)


class _Rewriter:
    """Retypes one parsed module in place and inserts the rounding of the rounded replay."""

    def __init__(self, rounded: bool, precision: str = "f64"):
        from jax.extend.mlir import ir

        self.ir = ir
        self.rounded = rounded
        self.precision = precision
        # Narrow floats computed in f32 (the rounded and the f32 replays), main's arguments widened
        # inside; otherwise every float in f64, main taking f64 arguments.
        self.widens_inside = rounded or precision == "f32"

    def target(self, t: Any) -> Any | None:
        """The replay's type for a value of type ``t``, or None when it keeps ``t``."""
        ir = self.ir
        if not ir.RankedTensorType.isinstance(t):
            return None
        rt = ir.RankedTensorType(t)
        et = str(rt.element_type)
        if self.widens_inside:
            new = ir.F32Type.get() if _core.is_narrow_float(et) else None
        else:
            new = ir.F64Type.get() if et in _WIDENED_TO_F64 else None
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
                a.replace_all_uses_except(c, c.owner)
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
            if op.name == "stablehlo.custom_call" and _custom_call_target(op) in _IDENTITY_CUSTOM_CALLS:
                src = op.operands[0]
                op.results[0].replace_all_uses_with(src)
                erased.add(i)
                continue
            if op.name == "stablehlo.custom_call" and _custom_call_target(op).startswith("SPMD"):
                raise ReplayError(f"{fg.name}: custom_call @{_custom_call_target(op)} (SPMD manual sharding) "
                                  f"changes shapes per device; the replay runs one device")
            if kind == "opaque":
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
            for p in fg.analysis["points"]:
                if p["op"] in erased:
                    continue
                op = fg.ops[p["op"]]
                r = op.results[p["result"]]
                rounded = self.round(r, p["element_type"], fg.next_op[p["op"]])
                r.replace_all_uses_except(rounded, rounded.owner)
                for user, operand in p["unrounded_uses"]:  # excess precision: these read it unrounded
                    fg.ops[user].operands[operand] = r
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
                r.replace_all_uses_except(c, c.owner)


def _custom_call_target(op: Any) -> str:
    from jax.extend.mlir import ir

    attr = op.attributes["call_target_name"] if "call_target_name" in op.attributes else None
    return ir.StringAttr(attr).value if attr is not None else ""


def _swap_transposed_dots(module: Any) -> int:
    """Rewrites every matrix product ``x @ transpose(w)`` (``stablehlo.dot`` or a ``dot_general``
    without batch dimensions, 2-D operands, the rhs a ``transpose`` [1, 0]: how torch_xla lowers
    ``nn.Linear``) as ``transpose(optimization_barrier(w @ x^T))``. XLA:CPU folds the transpose
    into the dot either way; as ``x @ w^T`` its Eigen kernel reads the weight across its rows,
    several times slower (4.5x for 128x2048 @ 2048x5632 in f32) than ``w @ x^T`` reading it along
    them, and the barrier keeps XLA from swapping the operands back. Each output element is the
    same sum of the same products, but not always in the same order (XLA:CPU picks its kernel by
    the output's shape): only the unrounded replays use it, whose figures are compared with the
    golden to a tolerance, never bit for bit. Returns how many dots were rewritten."""
    from jax.extend.mlir import ir

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


def _materialize_transposed_rhs(module: Any) -> int:
    """Puts an ``optimization_barrier`` between every ``transpose [1, 0]`` and the matrix product
    that reads it as its right-hand side (``x @ transpose(w)``, torch_xla's ``nn.Linear``): XLA
    then writes ``w^T`` out and multiplies ``x`` by it as it is laid out, instead of folding the
    transpose into the dot, whose XLA:CPU kernel reads a transposed right-hand side 1.5-2.5x
    slower. The operands keep their roles (unlike :func:`_swap_transposed_dots`), so the kernel
    sums each element in the same order: the rounded replay uses it. Returns how many."""
    from jax.extend.mlir import ir

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
    from jax.extend.mlir import ir

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


def _with_intermediates(module: Any) -> list[tuple[str, int]]:
    """Adds every float value computed at main's top level to its results (for per-op errors);
    returns (op location name, index among main's top-level ops) per added result, in order."""
    from jax.extend.mlir import ir

    from torch_xla_ext.parity.stablehlo import location_name

    main = next(f for f in functions(module) if ir.StringAttr(f.attributes["sym_name"]).value == "main")
    body = main.regions[0].blocks[0]
    ops = [o.operation for o in body.operations]
    ret = ops[-1]
    added, names = [], []
    for k, op in enumerate(ops[:-1]):
        if op.name in ("stablehlo.constant",) or len(op.results) != 1:
            continue
        r = op.results[0]
        if ir.RankedTensorType.isinstance(r.type) and str(ir.RankedTensorType(r.type).element_type) in (
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


class Replay:
    """One compiled replay of a :class:`Program`, callable many times.

    ``rounded=True``: XLA:CPU's compute types with its roundings; ``rounded=False``: exact fp64,
    or with ``precision="f32"`` the narrow floats in f32 without rounding (:func:`unrounded_precision`).
    With ``intermediates``, main also returns every float value it computes at its top level
    (after the program's own results), listed in ``intermediates`` as (HLO instruction name,
    index among main's top-level ops). With ``cuts`` (indices of main's results, such as a
    transformer's block outputs), main is cut there into segments and each distinct one is
    compiled once (:mod:`~torch_xla_ext.parity.segments`; ``plan`` says how, None when no cut
    pays); the results are the same. ``executables``: the compiled programs. ``seconds`` holds the
    rewrite and compile times. Calling it with main's arguments (numpy arrays in their original
    dtypes; bfloat16 as ml_dtypes.bfloat16) returns main's results as numpy arrays.

    Example:
        >>> text = '''func.func @main(%x: tensor<2xbf16>) -> tensor<2xbf16> {
        ...   %0 = stablehlo.multiply %x, %x : tensor<2xbf16>
        ...   return %0 : tensor<2xbf16>
        ... }'''
        >>> import ml_dtypes
        >>> x = np.array([1.0078125, 3.0], ml_dtypes.bfloat16)
        >>> rounded = Replay(Program(text), rounded=True)
        >>> [o.tolist() for o in rounded([x])]
        [[1.015625, 9.0]]
    """

    def __init__(self, program: Program, *, rounded: bool, intermediates: bool = False, precision: str = "f64",
                 cuts: Sequence[int] = ()):
        from jax.extend.mlir import ir

        from torch_xla_ext._compat import jax_mlir

        if not isinstance(program, Program):
            raise ParityTypeError(f"program: expected a parity Program, got {type(program).__name__}")
        if precision not in ("f64", "f32"):
            raise ParityError(f"precision: expected 'f64' or 'f32' (the unrounded replay's float), got {precision!r}")
        self.rounded = rounded
        # The float an unrounded replay computes in (rounded: XLA:CPU's own types).
        self.precision = None if rounded else precision
        self.mode = "rounded" if rounded else ("exact" if precision == "f64" else "unrounded f32")
        self.seconds: dict[str, float] = {}
        t0 = time.perf_counter()
        ctx, module = parse(program.text, "the program")
        with ctx, ir.Location.unknown():
            # (HLO name, index among main's top-level ops) of each extra result.
            self.intermediates = _with_intermediates(module) if intermediates else []
            graphs = [build_graph(f, program.excess_precision) for f in functions(module)]
            main = next((g for g in graphs if g.name == "main"), None)
            if main is None:
                raise ReplayError("the module has no function 'main'")
            self.arg_types = [(shape, et) for shape, et in main.value_types[:main.num_args]]
            self.num_results = len(main.returned) - len(self.intermediates)  # the program's own results
            rewriter = _Rewriter(rounded, precision)
            for g in graphs:
                rewriter.function(g)
            # The rounded replay keeps torch_xla's dots as they are: swapped, XLA:CPU picks its kernel
            # by the output's shape, and a skinny product (an MoE expert's few tokens) then sums
            # in another order (Mixtral in fp32: 5588 of 16384 logits off by an ulp).
            self.swapped_dots = _swap_transposed_dots(module) if not rounded else 0
            self.materialized_transposes = _materialize_transposed_rhs(module) if rounded else 0
            for attr in _MODULE_SPMD_ATTRS:
                if attr in module.operation.attributes:
                    del module.operation.attributes[attr]
            try:
                module.operation.verify()
            except ir.MLIRError as e:
                raise ReplayError(f"the {self.mode} replay does not verify: {first_line(e)}") from None
            self.text = str(module) if intermediates else None
            # Cut at main's results ``cuts`` (a transformer's block outputs): each distinct segment
            # is compiled once (segments.py). Not with intermediates, whose text is the whole.
            self.plan = segments.split(module, cuts) if cuts and not intermediates else None
            self.seconds["rewrite"] = time.perf_counter() - t0
            t1 = time.perf_counter()
            try:
                # The exact replay is fp64, where evaluation order is far below the tolerances:
                # LLVM's level 0 compiles it several times faster (0.7 s vs 4.4 s at GPT-2 124M,
                # its run 3.1 s vs 3.3 s), and its compile overlaps torch_xla's. The rounded
                # replay keeps XLA's default, whose f32 code (FMA contraction, vectorised
                # reductions) it reproduces. Both schedule for memory (the same arithmetic: at
                # 0.9B the replays' peak 3 GB lower and their runs about 1.5x faster).
                self.executables = [jax_mlir.compile_replicated(
                    jax_mlir.cpu_client(1), jax_mlir.module_to_bytecode(m), 1, optimize=rounded, memory_schedule=True)
                    for m in (self.plan.modules if self.plan is not None else [module])]
            except RuntimeError as e:
                raise ReplayError(f"XLA cannot compile the {self.mode} replay: {first_line(e)}") from None
            self.seconds["compile"] = time.perf_counter() - t1

    def __call__(self, args: Sequence[Any], *, consume: bool = False) -> list[np.ndarray]:
        """main's results for ``args`` (main's arguments in their original dtypes). With
        ``consume``, ``args`` (a list or :class:`~torch_xla_ext.parity.runners.GraphArgs`) is
        emptied as its arrays are handed over, so an argument the caller no longer needs is freed
        as soon as its widened copy exists."""
        from torch_xla_ext._compat import jax_mlir

        given = args
        # GraphArgs: each weight is made only when its turn comes (and, widened, dropped at once).
        args = args.lazy() if isinstance(args, GraphArgs) else list(args)
        if consume:
            if not isinstance(given, (list, GraphArgs)):
                raise ParityTypeError(f"args: consume=True needs a list, got {type(given).__name__}")
            given.clear()
        if len(args) != len(self.arg_types):
            raise ParityError(f"args: main takes {len(self.arg_types)} arguments, got {len(args)}")
        t0 = time.perf_counter()  # the run includes widening the arguments (exact replay)
        arrays, released = [], 0
        for k, (shape, et) in enumerate(self.arg_types):
            want = _numpy_dtype(et)
            arr = np.asarray(made(args[k]))
            if list(arr.shape) != shape or arr.dtype != want:
                raise ParityError(f"args[{k}]: main's argument {k} is {et}{shape}, got {arr.dtype}{list(arr.shape)}")
            if self._widens(et):
                given_bytes = arr.nbytes
                arr = _widened(arr)
                args[k] = None  # made for this call or consumed: only the widened copy runs
                if consume:
                    released += given_bytes
                    if released > _TRIM_EVERY:
                        release_freed_memory()
                        released = 0
            arrays.append(np.ascontiguousarray(arr))
        del args
        if consume:
            release_freed_memory()
        if self.plan is None:
            out = jax_mlir.execute_replicated(jax_mlir.cpu_client(1), self.executables[0], [arrays])[0]
        else:
            out = self._run_segments(arrays)
        # Copies: a result that is a view of its device buffer keeps the whole execution (its
        # arguments, the weights) alive as long as the caller holds the result.
        out = [np.array(o, copy=True) for o in out]
        # The placed arguments (the weights, in f64 for the exact replay) sit in a reference cycle
        # of JAX's execution objects: collect it now, not at some later allocation's mercy.
        del arrays
        release_freed_memory()
        self.seconds["run"] = time.perf_counter() - t0
        return out

    def _run_segments(self, arrays: list) -> list:
        """main's results, running its segments in order; a value is dropped after the last
        segment that reads it."""
        from torch_xla_ext._compat import jax_mlir

        plan, client = self.plan, jax_mlir.cpu_client(1)
        values: dict[Any, Any] = {("arg", k): a for k, a in enumerate(arrays)}
        arrays.clear()
        kept = set(plan.results)
        for s, segment in enumerate(plan.segments):
            outs = jax_mlir.execute_on_device(client, self.executables[segment.module],
                                              [values[k] for k in segment.inputs])
            for k in segment.inputs:
                if plan.last_use.get(k) == s and k not in kept:
                    del values[k]
            values.update(zip(segment.outputs, outs))
        return [np.asarray(values[k]) for k in plan.results]

    def _widens(self, et: str) -> bool:
        """Whether main's argument of element type ``et`` is passed widened (the f64 replay: the
        others widen inside, see _Rewriter.function)."""
        return self.precision == "f64" and et in _WIDENED_TO_F64


_WIDENED_TO_F64 = ("bf16", "f16", "f32")
_TRIM_EVERY = 256 << 20  # bytes of consumed arguments between two returns of freed memory
_ALIGNMENT = 64  # PJRT's CPU client places a host array this aligned without copying it


def _widened(arr: np.ndarray) -> np.ndarray:
    """``arr`` as float64 (exact from any narrower float), in a 64-byte aligned buffer so the
    replay reads it in place rather than from a second copy."""
    raw = np.empty(arr.size * 8 + _ALIGNMENT, np.uint8)
    offset = (-raw.ctypes.data) % _ALIGNMENT
    out = raw[offset:offset + arr.size * 8].view(np.float64).reshape(arr.shape)
    np.copyto(out, arr, casting="safe")
    return out


def replay(program: Program | str | bytes, args: Sequence[Any], *, rounded: bool = True) -> list[np.ndarray]:
    """Runs ``program`` (a :class:`Program`, StableHLO text, or a serialized HloModuleProto) on
    ``args`` with XLA:CPU's roundings (``rounded=True``) or exactly in fp64.

    Example:
        >>> text = '''func.func @main(%x: tensor<2xbf16>, %y: tensor<2xbf16>) -> tensor<2xbf16> {
        ...   %0 = stablehlo.multiply %x, %y : tensor<2xbf16>
        ...   return %0 : tensor<2xbf16>
        ... }'''
        >>> import ml_dtypes
        >>> x = np.array([1.0078125, 3.0], ml_dtypes.bfloat16)
        >>> replay(text, [x, x])[0].tolist(), replay(text, [x, x], rounded=False)[0].tolist()
        ([1.015625, 9.0], [1.01568603515625, 9.0])
    """
    if isinstance(program, (bytes, bytearray)):
        program = Program.from_hlo_proto(bytes(program))
    elif isinstance(program, str):
        program = Program(program)
    elif not isinstance(program, Program):
        raise ParityTypeError(f"program: expected a Program, StableHLO text or HloModuleProto bytes, "
                              f"got {type(program).__name__}")
    return Replay(program, rounded=rounded)(args)
