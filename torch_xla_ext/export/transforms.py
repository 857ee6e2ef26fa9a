"""Rewrites of a bundle's `main` (each gives a new Bundle and appends to `manifest.transforms`):
`strip_tokens` (collective tokens made inside), `inline_constants` (lifted constants, optionally
weights, as module constants); and `to_jax`, the token-free program with its weights bound as a
`jax.export.Exported`, which JAX users serialize with jax's own versioned format.

Example:
    >>> lean = inline_constants(strip_tokens(bundle), weights=True)   # main takes user inputs only
    >>> exp = to_jax(bundle); data = jax.export.serialize(exp)
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from torch_xla_ext.export import graph
from torch_xla_ext.export.bundle import MODULE_FILE, Bundle, as_bundle
from torch_xla_ext.export.errors import BundleError
from torch_xla_ext.export.manifest import MLIR_TYPES, is_python_constant, np_dtype

_INNER = "_txe_main_inner"


def _dense_literal(arr: np.ndarray, dtype: str) -> str:
    ty = f"tensor<{''.join(f'{d}x' for d in arr.shape)}{MLIR_TYPES[dtype]}>"
    if dtype == "bool":
        flat = ", ".join("true" if b else "false" for b in arr.reshape(-1))
        return f"stablehlo.constant dense<{'[' + flat + ']' if arr.ndim else flat}> : {ty}" if arr.size else \
            f"stablehlo.constant dense<> : {ty}"
    # MLIR's hex form: the elements' little-endian bytes (complex: real then imaginary part).
    data = np.ascontiguousarray(arr.astype(np_dtype(dtype), copy=False)).astype(
        np_dtype(dtype).newbyteorder("<"), copy=False).tobytes()
    return f'stablehlo.constant dense<"0x{data.hex().upper()}"> : {ty}'


def _rewrite(bundle: Bundle, drop: dict[int, str], transform: str, order: list[int] | None = None) -> Bundle:
    """A bundle whose new `main` takes every argument but `drop` (index -> constant op text), in
    `order` (old indices; default: as before), and calls the old `main`, renamed private, with
    those made inside."""
    from jax.extend.mlir import ir

    keep = [i for i in (order if order is not None else range(len(bundle.manifest.inputs))) if i not in drop]
    if not drop and keep == sorted(keep):
        b = dataclasses.replace(bundle, manifest=dataclasses.replace(bundle.manifest))
        b.manifest.transforms = bundle.manifest.transforms + [transform]
        return b
    ctx, module = graph.parse(bundle.module_text, MODULE_FILE)
    with ctx:
        main = graph.main_func(module, MODULE_FILE)
        names = {ir.StringAttr(op.attributes["sym_name"]).value for op in module.body.operations
                 if "sym_name" in op.attributes}
        inner = next(f"{_INNER}{k}" for k in range(len(names) + 1) if f"{_INNER}{k}" not in names)
        block = main.regions[0].blocks[0]
        arg_types = [str(a.type) for a in block.arguments]
        ftype = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
        result_types = [str(t) for t in ftype.results]
        main.attributes["sym_name"] = ir.StringAttr.get(inner)
        main.attributes["sym_visibility"] = ir.StringAttr.get("private")
        inner_text = str(module)
    params = ", ".join(f"%arg{j}: {arg_types[i]}" for j, i in enumerate(keep))
    lines = [f"  func.func @main({params}) -> ({', '.join(result_types)}) {{"]
    operand = {}
    for j, i in enumerate(keep):
        operand[i] = f"%arg{j}"
    for i, op_text in drop.items():
        lines.append(f"    %c{i} = {op_text}")
    if drop:
        # An optimization barrier keeps XLA from folding the old arguments' values into the
        # program at compile time: folded with XLA's constant evaluator, weight-only expressions
        # (a batch norm's rsqrt(var + eps) * gamma) round differently from the kernels that
        # compute them at run time, so the rewrite would no longer compute what `main` did.
        dropped = list(drop)
        types = ", ".join(arg_types[i] for i in dropped)
        lhs_b = "%b" if len(dropped) == 1 else f"%b:{len(dropped)}"
        lines.append(f"    {lhs_b} = stablehlo.optimization_barrier {', '.join(f'%c{i}' for i in dropped)} : {types}")
        for k, i in enumerate(dropped):
            operand[i] = "%b" if len(dropped) == 1 else f"%b#{k}"
    call_args = ", ".join(operand[i] for i in range(len(arg_types)))
    n_res = len(result_types)
    lhs = "%r" if n_res <= 1 else f"%r:{n_res}"
    call = f"func.call @{inner}({call_args}) : ({', '.join(arg_types)}) -> ({', '.join(result_types)})"
    lines.append(f"    {lhs} = {call}" if n_res else f"    {call}")
    rets = ["%r"] if n_res == 1 else [f"%r#{k}" for k in range(n_res)]
    lines.append(f"    return {', '.join(rets)} : {', '.join(result_types)}" if n_res else "    return")
    lines.append("  }")
    end = inner_text.rstrip().rfind("}")
    text = inner_text[:end] + "\n".join(lines) + "\n}\n"
    graph.parse(text, f"{transform} output")  # must still parse

    m = bundle.manifest
    new_index = {i: j for j, i in enumerate(keep)}
    inputs = [dataclasses.replace(m.inputs[i], index=new_index[i]) for i in keep]
    colls = []
    for c in m.collectives:
        colls.append(dataclasses.replace(
            c, token_input=new_index.get(c.token_input) if c.token_input is not None else None,
            token_mixed_into_operand=c.token_mixed_into_operand and c.token_input in new_index,
            operand_inputs=sorted(new_index[i] for i in c.operand_inputs if i in new_index)))
    manifest = dataclasses.replace(m, inputs=inputs, collectives=colls, transforms=m.transforms + [transform])
    used = {inp.file for inp in inputs if inp.file}
    return Bundle(text, manifest, {k: v for k, v in bundle.arrays.items() if k in used})


def strip_tokens(bundle: Bundle) -> Bundle:
    """A bundle whose `main` has no collective-token argument: the token is made inside.

    Example: ``run(strip_tokens(bundle), x)`` takes the same user inputs and gives the same result.
    """
    bundle = as_bundle(bundle)
    drop = {}
    for inp in bundle.manifest.inputs:
        if inp.kind == "collective_token":
            drop[inp.index] = _dense_literal(np.asarray(inp.value, np_dtype(inp.dtype)), inp.dtype)
    return _rewrite(bundle, drop, "strip_tokens")


def inline_constants(bundle: Bundle, weights: bool = False) -> Bundle:
    """A bundle whose lifted constants (and, with weights=True, parameters and buffers) are
    constants inside the module instead of `main` arguments.

    Example: ``b = inline_constants(bundle, weights=True)`` leaves only user inputs and tokens.
    """
    bundle = as_bundle(bundle)
    kinds = ("constant", "parameter", "buffer") if weights else ("constant",)
    drop = {}
    for inp in bundle.manifest.inputs:
        if inp.kind in kinds:
            drop[inp.index] = _dense_literal(np.asarray(bundle.arrays[inp.file]), inp.dtype)
    return _rewrite(bundle, drop, "inline_constants(weights=True)" if weights else "inline_constants")


def to_jax(bundle: Bundle, *, platform: str = "cpu") -> Any:
    """The bundle as a ``jax.export.Exported``: tokens made inside, weights and constants bound,
    taking the tensor user inputs in position order (unused ones too: JAX drops them through
    ``module_kept_var_idx``; Python constants are baked in, not arguments) and returning the
    outputs as a tuple in the manifest's order. Serialize it with ``jax.export.serialize``; call it
    with ``exp.call(*arrays)`` (inside ``jax.jit`` too). An int64 input stays int64: calling with
    one needs JAX's x64 mode, as for any JAX function taking int64.

    Example:
        >>> exp = to_jax(bundle)
        >>> again = jax.export.deserialize(jax.export.serialize(exp))
        >>> (logits,) = again.call(x)
    """
    import jax
    import jax.export  # a submodule `import jax` does not load
    from jax.extend import mlir as jmlir

    from torch_xla_ext._compat import jax_export, jax_mlir

    bundle = as_bundle(bundle)
    if not isinstance(platform, str) or not platform:
        raise BundleError(f"platform: expected a JAX platform name such as 'cpu', got {platform!r}")
    lean = inline_constants(strip_tokens(bundle), weights=True)
    m = lean.manifest
    order = sorted(range(len(m.inputs)), key=lambda k: m.inputs[k].position)
    lean = _rewrite(lean, {}, "user inputs in position order", order)
    tensors = [u for u in lean.manifest.user_inputs() if not is_python_constant(u["dtype"])]
    in_avals = tuple(jax.core.ShapedArray(tuple(u["shape"]), np_dtype(u["dtype"])) for u in tensors)
    kept = tuple(k for k, u in enumerate(tensors) if u["used"])
    out_avals = tuple(jax.core.ShapedArray(tuple(o["shape"]), np_dtype(o["dtype"])) for o in m.outputs)
    ctx, module = graph.parse(lean.module_text, MODULE_FILE)
    with ctx:
        code = jax_mlir.module_to_bytecode(module)
    serialized = jmlir.serialize_portable_artifact(code, jax_mlir.stablehlo_export_target_version())
    return jax_export.exported(
        fun_name="main",
        in_tree=jax.tree_util.tree_structure((tuple(range(len(in_avals))), {})),
        in_avals=in_avals,
        out_tree=jax.tree_util.tree_structure(tuple(range(len(out_avals)))),
        out_avals=out_avals,
        in_shardings_hlo=(None,) * len(in_avals),
        out_shardings_hlo=(None,) * len(out_avals),
        nr_devices=1,
        platforms=(platform,),
        ordered_effects=(),
        unordered_effects=(),
        disabled_safety_checks=(),
        mlir_module_serialized=serialized,
        calling_convention_version=jax.export.maximum_supported_calling_convention_version,
        module_kept_var_idx=kept,
        uses_global_constants=False,
        _get_vjp=None,
    )
