"""A bundle's module as MLIR beyond its value graph: the values inlined into it
(``dense_resource<name>`` constants, their arrays beside the text) bound when the module is
compiled, constants made arguments, the portable artifact written, and the text chosen between a
module's text and its artifact when reading torch_xla's.

Example:
    >>> import numpy as np
    >>> text = ('func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {\\n'
    ...         '  %c = stablehlo.constant dense_resource<txe_00000000000000000000000000000000> : tensor<2xf32>\\n'
    ...         '  %0 = stablehlo.add %x, %c : tensor<2xf32>\\n  return %0 : tensor<2xf32>\\n}')
    >>> resources = {"txe_00000000000000000000000000000000": np.ones(2, np.float32)}
    >>> ctx, module, names = mlir_module(text, resources, "example")   # the constant holds the array
    >>> "dense<1.000000e+00>" in str(module)
    True
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import numpy as np

from torch_xla_ext._compat import jax_mlir
from torch_xla_ext.export import artifact_reader, graph
from torch_xla_ext.export.errors import BundleError, BundleFileNotFoundError, ModuleTextError, UnknownDialectError
from torch_xla_ext.export.files import MODULE_FILE
from torch_xla_ext.export.manifest import MLIR_TYPES, dtype_name

_RESOURCE_NAME = re.compile(r"txe_[0-9a-f]{32}\Z")
_RESOURCE_REF = re.compile(r"dense_resource<(txe_[0-9a-f]{32})>")


def portable_artifact_of(text: str, resources: dict[str, np.ndarray] | None = None) -> tuple[str, bytes]:
    """(StableHLO version, portable artifact bytes) of a module's text, its resources bound."""
    from jax.extend import mlir as jmlir  # JAX is imported when a module is written, not with export

    ctx, module, _ = mlir_module(text, resources or {}, MODULE_FILE)
    with ctx:
        version = jax_mlir.stablehlo_current_version()
        code = jax_mlir.module_to_bytecode(module)
    del module, ctx  # the bound values (the context owns them): freed before the artifact copies them again
    return version, jmlir.serialize_portable_artifact(code, version)


def resource_name(arr: np.ndarray, dtype: str) -> str:
    """The name an inlined value gets: a digest of its dtype, shape and bytes, so equal values
    share one array and a module's text identifies its program (run caches by the text)."""
    h = hashlib.blake2b(f"{dtype}{list(arr.shape)}".encode(), digest_size=16)
    if arr.flags.c_contiguous:
        h.update(arr.reshape(-1).view(np.uint8))
    else:  # a view (broadcast, transposed): its elements in order, a block at a time, never all copied
        for block in np.nditer(arr, flags=["external_loop", "buffered", "zerosize_ok"], buffersize=2**18, order="C"):
            h.update(np.ascontiguousarray(block).view(np.uint8))
    return f"txe_{h.hexdigest()}"


def used_resources(text: str, resources: dict[str, np.ndarray], where: str) -> dict[str, np.ndarray]:
    """The arrays of the resources `text` names, in the order it names them; a BundleError
    naming the first it names that `resources` lacks."""
    out = {}
    for name in _RESOURCE_REF.findall(text):
        if name not in out:
            if name not in resources:
                raise BundleError(f"{where}: constant dense_resource<{name}> has no value (the bundle's "
                                  f"resources lack it)")
            out[name] = resources[name]
    return out


def _walk(op):
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                yield inner
                yield from _walk(inner)


def resource_of(op, where: str) -> tuple[str, list[int], str] | None:
    """(name, shape, dtype) of a constant whose value is a ``dense_resource``, else None; a
    BundleError for a resource name we do not write (the name becomes a file name)."""
    from jax.extend.mlir import ir  # as in portable_artifact_of

    value = op.attributes["value"] if "value" in op.attributes else None
    if value is None or not jax_mlir.is_dense_resource(value):
        return None
    value = ir.DenseResourceElementsAttr(value)  # (jaxlib 0.10 hands back a plain Attribute)
    text = str(value)
    name = text[len("dense_resource<"):text.index(">")]
    if not _RESOURCE_NAME.match(name):
        raise BundleError(f"{where}: constant dense_resource<{name[:80]}> is not a resource name "
                          f"inline_constants writes (txe_ and 32 hex digits)")
    shape, dtype = graph.tensor_type(value.type, f"{where}: constant dense_resource<{name}>")
    return name, shape, dtype


def constant_to_argument(func, op) -> None:
    """Makes `op` (a constant at the top of `func`) a new last argument of `func` instead."""
    from jax.extend.mlir import ir  # as in portable_artifact_of

    block = func.regions[0].blocks[0]
    arg = block.add_argument(op.result.type, ir.Location.unknown(context=func.context))
    op.result.replace_all_uses_with(arg)
    op.operation.erase()
    ftype = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
    func.attributes["function_type"] = ir.TypeAttr.get(
        ir.FunctionType.get([a.type for a in block.arguments], list(ftype.results), context=func.context))
    if "arg_attrs" in func.attributes:
        old = ir.ArrayAttr(func.attributes["arg_attrs"])
        func.attributes["arg_attrs"] = ir.ArrayAttr.get(
            [old[k] for k in range(len(old))] + [ir.DictAttr.get({}, context=func.context)], context=func.context)


def resource_constants(module, where: str) -> list[tuple[Any, str, list[int], str]]:
    """(op, name, shape, dtype) of every constant whose value is a ``dense_resource``."""
    return [(op, *found) for op in _walk(module.operation) if (found := resource_of(op, where))]


def _dense(arr: np.ndarray, dtype: str):
    from jax.extend.mlir import ir  # as in portable_artifact_of

    shape = list(arr.shape)
    arr = np.ascontiguousarray(arr)  # (1-d for a scalar: the shape is passed on its own)
    if dtype == "bool":
        return ir.DenseElementsAttr.get(arr, shape=shape)  # the bindings pack bools themselves
    # One bit pattern per element: the bindings take a buffer of the element's width and the
    # element type to read it as (numpy has no bfloat16 buffer format).
    width = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}.get(arr.dtype.itemsize)
    data = arr.view(width) if width is not None else arr
    return ir.DenseElementsAttr.get(data, type=ir.Type.parse(MLIR_TYPES[dtype]), shape=shape)


def mlir_module(text: str, resources: dict[str, np.ndarray], where: str, *, as_arguments: bool = False):
    """(context, module, names) of a bundle's text with every ``dense_resource<name>`` constant
    bound to ``resources[name]`` as a dense attribute (one copy of the array, inside MLIR; never
    text). With ``as_arguments``, those at the top of ``main`` (where inline_constants puts them)
    become trailing arguments of ``main`` instead, ``names`` saying which resource each takes:
    an executor passes the arrays as it passes weights, and the optimization barrier that follows
    them keeps the program the one the constants make. A BundleError names a resource that is
    missing or whose array does not match its type."""
    from jax.extend.mlir import ir  # as in portable_artifact_of

    ctx, module = graph.parse(text, where)
    names: list[str] = []

    def value(name: str, shape: list[int], dtype: str) -> np.ndarray:
        if name not in resources:
            raise BundleError(f"{where}: constant dense_resource<{name}> has no value (the bundle's resources "
                              f"lack it)")
        arr = np.asarray(resources[name])
        if list(arr.shape) != shape or dtype_name(arr.dtype) != dtype:
            raise BundleError(f"{where}: resource {name} is {dtype_name(arr.dtype)}{list(arr.shape)}, but its "
                              f"constant is {dtype}{shape}")
        return arr

    with ctx, ir.Location.unknown():
        if as_arguments:
            main = graph.main_func(module, where)
            block = main.regions[0].blocks[0]
            for op in list(block.operations):
                found = resource_of(op, where)
                if found is None:
                    continue
                value(*found)
                constant_to_argument(main, op)
                names.append(found[0])
        made: dict[str, Any] = {}
        for op, name, shape, dtype in resource_constants(module, where):
            if name not in made:
                made[name] = _dense(value(name, shape, dtype), dtype)
            op.attributes["value"] = made[name]
    return ctx, module, names


def parsable_text(text: str | None, bytecode: bytes | None, where: str, bytecode_where: str):
    """(text, (ctx, module)) of a module given as text and/or a portable artifact: the text when it
    parses, else the artifact's (torch_xla's text printed with its MLIR debug info, bare string
    locations, does not parse; its bytecode does)."""
    first: ModuleTextError | None = None
    if text is not None:
        try:
            return text, graph.parse(text, where)
        except ModuleTextError as e:
            if bytecode is None:
                raise
            first = e
    if bytecode is None:
        raise BundleFileNotFoundError(f"{where}: no module text and no portable artifact")
    fallback = artifact_reader.portable_artifact_to_text(bytecode, bytecode_where)
    try:
        return fallback, graph.parse(fallback, bytecode_where)
    except UnknownDialectError:
        raise  # the artifact's error says more (it names the unknown dialect)
    except BundleError:
        if first is None:
            raise
        raise first from None  # neither parses: the text's error is the one to read
