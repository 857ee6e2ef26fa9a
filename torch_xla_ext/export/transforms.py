"""Rewrites of a bundle's `main` (each gives a new Bundle and appends to `manifest.transforms`):
`strip_tokens` (collective tokens made inside), `inline_constants` (lifted constants, optionally
weights, as module constants that stay arrays: `dense_resource<name>` in the text, the values in
`Bundle.resources`); and `to_jax`, the token-free program as a `jax.export.Exported`
with its weights kept as arrays bound to its leading arguments (a `JaxExport`; saved as jax's own
versioned format plus a safetensors file, read back with `load_jax`).

Example:
    >>> import torch
    >>> from torch_xla_ext import export
    >>> x = torch.randn(2, 4)
    >>> bundle = export.export(torch.nn.Linear(4, 4), (x,))
    >>> lean = inline_constants(strip_tokens(bundle), weights=True)   # main takes user inputs only
    >>> [i.kind for i in lean.manifest.inputs]
    ['user_input']
    >>> exp = to_jax(bundle); exp.save("m.jax"); (y,) = load_jax("m.jax").call(x.numpy())
    >>> y.shape
    (2, 4)
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import TYPE_CHECKING, Any

import numpy as np

from torch_xla_ext import _dtypes, _json, _versions
from torch_xla_ext._compat import jax_export, jax_mlir
from torch_xla_ext.export import graph, main_wrapper, tensor_file
from torch_xla_ext.export.files import JAX_EXPORT_DIR, MODULE_FILE, read_file
from torch_xla_ext.export.manifest import Manifest
from torch_xla_ext.export.program import constant_to_argument, mlir_module, resource_name, resource_of, used_resources
from torch_xla_ext.export.errors import (BundleError, BundleFileNotFoundError, BundleTypeError, BundleVersionError,
                                        JaxExportExpiredError,
                                        RunInputError, WeightsTooLargeError)
from torch_xla_ext.export.manifest import dtype_name, is_python_constant, np_dtype

if TYPE_CHECKING:
    from torch_xla_ext.export.bundle import Bundle  # the transforms take and make Bundles; bundle.py uses them

_INNER = "_txe_main_inner"


def as_bundle(value: Any, what: str = "bundle") -> "Bundle":
    """``value`` if it is a Bundle; a BundleTypeError naming ``what`` otherwise. (These transforms
    take a Bundle; ``export.strip_tokens`` and the others in ``torch_xla_ext.export`` also take its
    directory, which they load first.)"""
    if not (isinstance(getattr(value, "manifest", None), Manifest) and isinstance(getattr(value, "module_text", None), str)):
        raise BundleTypeError(f"{what}: expected an export.Bundle or a bundle directory, got {type(value).__name__}")
    return value

def _resource_constant(arr: np.ndarray, dtype: str, resources: dict[str, np.ndarray]) -> np.ndarray | str:
    """What an inlined array becomes: the name of a `dense_resource` (text holds no data; the
    array is kept in `resources` under its digest name and bundle.mlir_module binds it when
    compiling), or the empty array itself (a dense constant of no elements)."""
    if arr.size == 0:
        return arr
    name = resource_name(arr, dtype)
    resources.setdefault(name, arr)
    return name


def _constant_attribute(value: np.ndarray | str, arg_type: Any, dtype: str | None, named: dict[str, Any]) -> Any:
    """The attribute of a constant made inside the new `main`: a ``dense_resource`` placeholder
    named ``value`` (no data: the array stays in Bundle.resources), or ``value``'s elements in
    ``dtype`` (the manifest's: as the values' numbers, not their bits), which is the argument's.
    ``named`` holds the module's resource attributes by name: MLIR renames a second handle of a
    name it already has (``name_1``), so each name is made once per context."""
    from jax.extend.mlir import ir

    if isinstance(value, str):
        if value not in named:
            # jaxlib's builder for resources takes the data; a placeholder is its attribute syntax.
            named[value] = ir.Attribute.parse(f"dense_resource<{value}> : {arg_type}")
        return named[value]
    return main_wrapper.dense_attribute(np.asarray(value).astype(np_dtype(dtype), copy=False), arg_type)


def _rewrite(bundle: Bundle, drop: dict[int, np.ndarray | str], transform: str, order: list[int] | None = None,
             resources: dict[str, np.ndarray] | None = None) -> Bundle:
    """A bundle whose new `main` takes every argument but `drop` (index -> its value, or the name
    of a resource in `resources`), in `order` (old indices; default: as before), and calls the old
    `main`, renamed private, with those made inside (built with jaxlib's MLIR builders,
    export/main_wrapper.py); `resources` are the values of new `dense_resource` constants."""
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
        # Values inlined before (inline_constants) move up into the new `main` with the new ones,
        # so every inlined value stays at the top of `main`, where run binds them as arguments.
        hoisted: dict[int, str] = {}
        named: dict[str, Any] = {}
        for op in list(block.operations):
            found = resource_of(op, MODULE_FILE)
            if found is not None:
                named[found[0]] = op.attributes["value"]
                constant_to_argument(main, op)
                hoisted[len(block.arguments) - 1] = found[0]
        arg_types = [a.type for a in block.arguments]
        inputs = bundle.manifest.inputs
        constants = {i: _constant_attribute(v, arg_types[i], inputs[i].dtype if i < len(inputs) else None, named)
                     for i, v in {**drop, **hoisted}.items()}
        main_wrapper.wrap_main(module, main, keep, constants, inner)
        if not module.operation.verify():
            raise BundleError(f"{transform} output: the rewritten module does not verify")
        text = str(module)
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
    values = used_resources(text, {**bundle.resources, **(resources or {})}, f"{transform} output")
    return dataclasses.replace(bundle, module_text=text, manifest=manifest, torch_xla_export=None,
                               arrays={k: v for k, v in bundle.arrays.items() if k in used}, resources=values)


def strip_tokens(bundle: Bundle) -> Bundle:
    """A bundle whose `main` has no collective-token argument: the token is made inside.

    Example: ``run(strip_tokens(bundle), x)`` takes the same user inputs and gives the same result.
    """
    _versions.require("export.jax")
    bundle = as_bundle(bundle)
    drop = {}
    for inp in bundle.manifest.inputs:
        if inp.kind == "collective_token":
            drop[inp.index] = np.asarray(inp.value, np_dtype(inp.dtype))
    return _rewrite(bundle, drop, "strip_tokens")


def inline_constants(bundle: Bundle, weights: bool = False) -> Bundle:
    """A bundle whose lifted constants (and, with weights=True, parameters and buffers) are
    constants inside the module instead of `main` arguments. The values never become text: the
    module names each ``dense_resource<txe_...>`` and the arrays stay in ``Bundle.resources``
    (saved as ``resources/<name>.npy``, bound as dense attributes only when compiled), so any
    size inlines; only ``to_jax`` of the result puts them into jax.export's 2 GiB flatbuffer.

    Example: ``b = inline_constants(bundle, weights=True)`` leaves only user inputs and tokens.
    """
    _versions.require("export.jax")
    bundle = as_bundle(bundle)
    kinds = ("constant", "parameter", "buffer") if weights else ("constant",)
    drop: dict[int, np.ndarray | str] = {}
    resources: dict[str, np.ndarray] = {}
    for inp in bundle.manifest.inputs:
        if inp.kind in kinds:
            drop[inp.index] = _resource_constant(np.asarray(bundle.arrays[inp.file]), inp.dtype, resources)
    return _rewrite(bundle, drop, "inline_constants(weights=True)" if weights else "inline_constants",
                    resources=resources)




# ---- to_jax: the program as a jax.export.Exported with its weights bound ----------------------

# Arrays JAX narrows with its default x64 mode off; to_jax keeps the small ones (position ids,
# scalars) as module constants so calling needs x64 only for int64 user inputs.
_NARROWED = _dtypes.X64_ONLY
_NARROWED_INLINE_BYTES = 2**20
EXPORTED_FILE = "exported.jax"          # jax.export.serialize of JaxExport.exported
WEIGHTS_FILE = "weights.safetensors"    # its bound arrays, in argument order
_FORMAT = "torch_xla_ext.jax_export/1"
_MAX_ARGUMENTS = 2**16 - 1  # jax.export's serialization writes module_kept_var_idx as uint16


@dataclasses.dataclass(frozen=True)
class JaxExport:
    """What :func:`to_jax` returns: ``exported``, a ``jax.export.Exported`` whose arguments are
    the bound arrays (``weight_names``/``weights``, in that order) followed by the tensor user
    inputs, and the arrays themselves. The weights stay arrays (never MLIR text, never inside
    the flatbuffer, so no 2 GiB limit): ``save`` writes ``exported.jax`` (jax's own versioned
    format) and ``weights.safetensors`` next to it; :func:`load_jax` reads them back.

    Example:
        >>> import torch
        >>> from torch_xla_ext import export
        >>> x = torch.randn(2, 4)
        >>> bundle = export.export(torch.nn.Linear(4, 4), (x,))
        >>> exp = to_jax(bundle); exp.save("m.jax")
        >>> (logits,) = load_jax("m.jax").call(x.numpy())
        >>> import jax
        >>> (again,) = jax.jit(exp.exported.call)(*exp.weights, x.numpy())   # inside jit: weights as arguments
        >>> bool((again == logits).all()), exp.weight_names
        (True, ('bias', 'weight'))
    """

    exported: Any
    weight_names: tuple[str, ...]
    weights: tuple[np.ndarray, ...]

    @property
    def in_avals(self) -> tuple:
        """The user inputs' avals (what :meth:`call` takes)."""
        return self.exported.in_avals[len(self.weights):]

    @property
    def out_avals(self) -> tuple:
        return self.exported.out_avals

    def call(self, *user_inputs: Any) -> Any:
        """The outputs (a tuple in ``manifest.outputs`` order) for the tensor user inputs in
        position order. Inside ``jax.jit`` call ``exported.call(*weights, *user_inputs)`` with the
        weights as arguments of the jitted function: closed over, JAX would make them constants."""
        if len(user_inputs) != len(self.in_avals):
            raise RunInputError(f"user_inputs: expected {len(self.in_avals)} tensor user inputs, got {len(user_inputs)}")
        return self.exported.call(*self.weights, *user_inputs)

    def serialize(self, where: str = "JaxExport.exported") -> bytes:
        """``jax.export.serialize`` of ``exported`` (the program alone: the weights are not in
        it); past its 2 GiB flatbuffer, WeightsTooLargeError naming the limit and the route.

        Example: ``jax.export.deserialize(to_jax(bundle).serialize())``.
        """
        try:
            return jax_export.serialize(self.exported, where)
        except ValueError as e:  # over jax.export's flatbuffer limit
            raise WeightsTooLargeError(
                f"{e}; values inlined into the module (inline_constants) count towards it: call to_jax on the "
                f"bundle before inline_constants, which keeps weights as arrays beside the program, or save and "
                f"run the inlined bundle itself (Bundle.save, export.run), which has no such limit") from None

    def save(self, path: str | os.PathLike) -> None:
        """Writes ``path/exported.jax`` (``jax.export.serialize``) and ``path/weights.safetensors``
        (the safetensors format, written with numpy alone: see :mod:`.tensor_file`)."""
        path = os.fspath(path)
        os.makedirs(path, exist_ok=True)
        dest = os.path.join(path, EXPORTED_FILE)
        data = self.serialize(dest)
        with open(dest, "wb") as f:
            f.write(data)
        meta = {"format": _FORMAT, "order": _json.dumps(list(self.weight_names))}
        tensor_file.write(os.path.join(path, WEIGHTS_FILE), dict(zip(self.weight_names, self.weights)), meta)


def load_jax(path: str | os.PathLike) -> JaxExport:
    """Reads what :meth:`JaxExport.save` wrote (or a bundle directory saved with
    ``jax_export=True``); the weights are checked against the ``Exported``'s argument avals. An
    Exported whose calling convention lies outside the running JAX's window, or a serialization
    this JAX cannot read, raises BundleVersionError naming the file and the window (JAX itself
    would call an Exported of a newer calling convention without checking). Other bad files raise
    BundleError / BundleFileNotFoundError naming the file. One older than the running JAX reads
    (jax.export keeps a 6-month window: jax 0.11.1 and later refuse jax 0.7.1's serializations)
    raises JaxExportExpiredError, a BundleVersionError; ``export.load_jax`` of a bundle directory
    re-lowers the bundle's StableHLO instead, so the window does not bite a bundle.

    Example: ``(y,) = load_jax("/tmp/m.jax").call(x)``.
    """
    import jax  # JAX is imported when a JAX export is read or made, not with export

    if not isinstance(path, (str, os.PathLike)):
        raise BundleTypeError(f"path: expected a directory written by JaxExport.save (or a bundle saved with "
                              f"jax_export=True), got {type(path).__name__}")
    path = os.fspath(path)
    if not os.path.exists(path):
        raise BundleFileNotFoundError(f"{path}: missing (a directory written by JaxExport.save)")
    _versions.require("export.jax")
    if os.path.isdir(os.path.join(path, JAX_EXPORT_DIR)):
        path = os.path.join(path, JAX_EXPORT_DIR)
    epath, wpath = os.path.join(path, EXPORTED_FILE), os.path.join(path, WEIGHTS_FILE)
    data = read_file(epath, "the serialized jax.export.Exported", binary=True)
    try:
        exported = jax_export.deserialize(data)
    except ValueError as e:
        if jax_export.expired(e):  # jax's words: matched in _compat
            raise JaxExportExpiredError(f"{epath}: serialized by a jax.export older than jax {jax.__version__} "
                                        f"reads ({e}); re-export it, or load the bundle directory") from None
        newer = jax_export.unsupported_version(e)  # jax's words: matched in _compat
        if newer is not None and newer > 0:
            raise BundleVersionError(f"{epath}: written by a newer jax.export than jax {jax.__version__} reads "
                                     f"({e})") from None
        raise BundleError(f"{epath}: not a jax.export.Exported this JAX ({jax.__version__}) reads: {e}") from None
    low, high = jax_export.calling_convention_window()
    version = exported.calling_convention_version
    if version < low:
        raise JaxExportExpiredError(f"{epath}: calling convention version {version} is below jax {jax.__version__}'s "
                                    f"window [{low}, {high}]; re-export it, or load the bundle directory")
    if not low <= version <= high:
        raise BundleVersionError(f"{epath}: calling convention version {version} is outside jax {jax.__version__}'s "
                                 f"window [{low}, {high}] (jax.export's minimum/maximum_supported_calling_"
                                 f"convention_version); re-export it with a JAX in that window, or use a JAX "
                                 f"whose window holds {version}")
    meta, tensors = tensor_file.read(wpath)
    if meta.get("format") != _FORMAT:
        raise BundleError(f"{wpath}: metadata field 'format' is {meta.get('format')!r}, expected {_FORMAT!r}")
    try:
        order = json.loads(meta.get("order", "null"))
    except (json.JSONDecodeError, RecursionError):
        order = None
    if not (isinstance(order, list) and set(order) == set(tensors) and len(order) == len(tensors)
            and len(order) <= len(exported.in_avals)):
        raise BundleError(f"{wpath}: metadata field 'order' does not list its tensors")
    weights = []
    for k, name in enumerate(order):
        arr, aval = tensors[name], exported.in_avals[k]
        if tuple(arr.shape) != tuple(aval.shape) or arr.dtype != aval.dtype:
            raise BundleError(f"{wpath}: tensor {name!r} is {dtype_name(arr.dtype)}{list(arr.shape)}, but "
                              f"{EXPORTED_FILE} argument {k} is {aval.dtype}{list(aval.shape)}")
        weights.append(arr)
    return JaxExport(exported, tuple(order), tuple(weights))


def to_jax(bundle: Bundle, *, platform: str = "cpu") -> JaxExport:
    """The bundle as a :class:`JaxExport`: a ``jax.export.Exported`` with tokens made inside,
    taking the bound arrays (parameters, buffers, lifted constants; ``weights``) and then the
    tensor user inputs in position order (unused ones too: JAX drops them through
    ``module_kept_var_idx``; Python constants are baked in), returning the outputs as a tuple in
    the manifest's order. The weights stay numpy arrays: nothing is copied into MLIR text or into
    the serialized program, so memory and the serialized size do not depend on a flatbuffer
    limit. 64-bit arrays up to 1 MiB (position ids) are module constants, so only int64 user
    inputs need JAX's x64 mode, as for any JAX function taking int64.

    Example:
        >>> import torch
        >>> from torch_xla_ext import export
        >>> x = torch.randn(2, 4)
        >>> bundle = export.export(torch.nn.Linear(4, 4), (x,))
        >>> exp = to_jax(bundle)
        >>> exp.save("m.jax"); again = load_jax("m.jax")
        >>> (logits,) = again.call(x.numpy())
        >>> logits.shape, str(logits.dtype)
        ((2, 4), 'float32')
    """
    _versions.require("export.jax")
    import jax  # as in load_jax
    import jax.export  # a submodule `import jax` does not load
    from jax.extend import mlir as jmlir

    bundle = as_bundle(bundle)
    if not isinstance(platform, str) or not platform:
        raise BundleError(f"platform: expected a JAX platform name such as 'cpu', got {platform!r}")
    if bundle.manifest.num_replicas not in (None, 1):
        # the Exported runs on one device, where the average would divide one replica's sum
        raise BundleError(f"to_jax: the program computes for {bundle.manifest.num_replicas} replicas only (manifest "
                          f"field 'num_replicas'); a jax.export.Exported of it runs on one device")
    stripped = strip_tokens(bundle)
    inlined = sum(np.asarray(a).nbytes for a in stripped.resources.values())
    if inlined >= jax_export.SERIALIZED_LIMIT:  # refused before materializing what cannot be serialized
        raise WeightsTooLargeError(
            f"to_jax: the bundle's {inlined} bytes of values inlined into the module (inline_constants) go into "
            f"jax.export's serialized module, which holds less than {jax_export.SERIALIZED_LIMIT} bytes (2 GiB, "
            f"flatbuffers' limit): call to_jax on the bundle before inline_constants, which keeps weights as "
            f"arrays beside the program, or save and run the inlined bundle itself (Bundle.save, export.run)")
    m = stripped.manifest
    state = [i for i in m.inputs if i.kind in ("parameter", "buffer", "constant")]
    small = [i for i in state if i.dtype in _NARROWED]
    small = small if sum(np.asarray(stripped.arrays[i.file]).nbytes for i in small) <= _NARROWED_INLINE_BYTES else []
    values: dict[str, np.ndarray] = {}
    lean = _rewrite(stripped, {i.index: _resource_constant(np.asarray(stripped.arrays[i.file]), i.dtype, values)
                               for i in small}, "inline_constants(64-bit)", resources=values) if small else stripped
    m = lean.manifest
    bound = [i for i in m.inputs if i.kind in ("parameter", "buffer", "constant")]
    users = sorted((i for i in m.inputs if i.kind == "user_input"), key=lambda i: i.position)
    lean = _rewrite(lean, {}, "weights then user inputs in position order", [i.index for i in bound + users])
    tensors = [u for u in lean.manifest.user_inputs() if not is_python_constant(u["dtype"])]
    names = [_weight_name(i) for i in bound]
    if len(set(names)) != len(names):
        names = [i.file for i in bound]
    weights = tuple(np.asarray(lean.arrays[i.file]) for i in bound)
    in_avals = tuple(jax.core.ShapedArray(w.shape, w.dtype) for w in weights) + tuple(
        jax.core.ShapedArray(tuple(u["shape"]), np_dtype(u["dtype"])) for u in tensors)
    if len(in_avals) > _MAX_ARGUMENTS:
        raise WeightsTooLargeError(
            f"to_jax: {len(bound)} weight arrays and {len(tensors)} user inputs exceed jax.export's "
            f"{_MAX_ARGUMENTS} arguments (its flatbuffer stores module_kept_var_idx as uint16); run the bundle "
            f"with export.run, which has no such limit")
    kept = tuple(range(len(bound))) + tuple(len(bound) + k for k, u in enumerate(tensors) if u["used"])
    out_avals = tuple(jax.core.ShapedArray(tuple(o["shape"]), np_dtype(o["dtype"])) for o in m.outputs)
    ctx, module, _ = mlir_module(lean.module_text, lean.resources, MODULE_FILE)
    with ctx:
        code = jax_mlir.module_to_bytecode(module)
    del module, ctx
    serialized = jmlir.serialize_portable_artifact(code, jax_mlir.stablehlo_export_target_version())
    exported = jax_export.exported(
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
    return JaxExport(exported, tuple(names), weights)


def _weight_name(inp) -> str:
    return inp.name or f"constants/{inp.index}"
