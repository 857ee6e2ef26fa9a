"""A new `main` around the old one, built with jaxlib's MLIR builders (``jax.extend.mlir``), never
assembled from strings: what ``strip_tokens``, ``inline_constants`` and ``to_jax`` rewrite.

The old `main` becomes a private function; the new public `main` takes the kept arguments (in a
new order if asked), makes the dropped ones as ``stablehlo.constant`` ops (any attribute: dense
elements from a numpy array, or a dense resource blob), passes them through one
``stablehlo.optimization_barrier`` and calls the old one.

Example:
    >>> import numpy as np
    >>> from torch_xla_ext.export import graph
    >>> text = '''func.func public @main(%w: tensor<2xf32>, %x: tensor<2xf32>) -> tensor<2xf32> {
    ...   %0 = stablehlo.add %w, %x : tensor<2xf32>
    ...   return %0 : tensor<2xf32>
    ... }'''
    >>> ctx, module = graph.parse(text, "example")
    >>> with ctx:
    ...     main = graph.main_func(module, "example")
    ...     w = dense_attribute(np.array([1, 2], np.float32), main.regions[0].blocks[0].arguments[0].type)
    ...     wrap_main(module, main, keep=[1], constants={0: w}, inner="_txe_main_inner0")
    ...     print(module.operation.verify())
    True
    >>> "func.func @main(%arg0: tensor<2xf32>)" in str(module), "stablehlo.optimization_barrier" in str(module)
    (True, True)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from torch_xla_ext._compat import jax_mlir


def dense_attribute(value: np.ndarray, tensor_type: Any) -> Any:
    """``value`` as a DenseElementsAttr of ``tensor_type`` (the argument's ``RankedTensorType``:
    its element type, e.g. ui8 or bf16, is what the attribute gets; ``value`` is already in the
    matching numpy dtype). Must run inside the module's context."""
    from jax.extend.mlir import ir  # JAX is imported when a module is built, not with export

    # jaxlib up to 0.8 hands out the generic ir.Type; later ones the concrete class.
    ttype = tensor_type if isinstance(tensor_type, ir.RankedTensorType) else ir.RankedTensorType(tensor_type)
    shape = list(ttype.shape)
    arr = np.ascontiguousarray(value).reshape(shape)
    if arr.dtype == np.bool_:
        return jax_mlir.bool_elements_attr(arr, ttype.element_type, shape)
    # Little-endian elements of the same width as the MLIR type; bfloat16 (ml_dtypes) goes in
    # as its bits, which MLIR's buffer protocol reads with the explicit element type.
    arr = arr.astype(arr.dtype.newbyteorder("<"), copy=False)
    if arr.dtype.name == "bfloat16":
        arr = arr.view(np.uint16)
    return ir.DenseElementsAttr.get(arr, type=ttype.element_type, shape=shape)


def wrap_main(module: Any, main: Any, keep: list[int], constants: dict[int, Any], inner: str) -> None:
    """Renames ``main`` (the module's public `main` func op) to the private ``inner`` and appends
    a new public `main` taking old arguments ``keep`` (in that order) and making each of
    ``constants`` (old index -> attribute) inside. Edits ``module`` in place; must run inside
    its context."""
    from jax.extend.mlir import ir
    from jax.extend.mlir.dialects import func, stablehlo

    block = main.regions[0].blocks[0]
    arg_types = [a.type for a in block.arguments]
    result_types = list(ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value).results)
    main.attributes["sym_name"] = ir.StringAttr.get(inner)
    main.attributes["sym_visibility"] = ir.StringAttr.get("private")
    with ir.Location.unknown(), ir.InsertionPoint(module.body):
        new = func.FuncOp("main", ir.FunctionType.get([arg_types[i] for i in keep], result_types))
        entry = new.add_entry_block()
        with ir.InsertionPoint(entry):
            operand = {i: entry.arguments[j] for j, i in enumerate(keep)}
            if constants:
                made = [stablehlo.ConstantOp(attr).result for attr in constants.values()]
                # An optimization barrier keeps XLA from folding the old arguments' values into
                # the program at compile time: folded with XLA's constant evaluator, weight-only
                # expressions (a batch norm's rsqrt(var + eps) * gamma) round differently from the
                # kernels that compute them at run time, so the rewrite would no longer compute
                # what `main` did.
                barrier = stablehlo.OptimizationBarrierOp(made)
                operand.update(zip(constants, barrier.results))
            call = func.CallOp(result_types, ir.FlatSymbolRefAttr.get(inner), [operand[i] for i in range(len(arg_types))])
            func.ReturnOp(call.results)
