"""Bundle I/O: the `Bundle` (module, manifest, arrays), `save`, and `load` of our bundles and of
torch_xla's `save_as_stablehlo` directories, treating both as untrusted input (never unpickles,
checks .npy headers before reading data, validates every manifest field against `main`).

Example:
    >>> import torch
    >>> from torch_xla_ext import export
    >>> x = torch.randn(2, 4)
    >>> bundle = export.export(torch.nn.Linear(4, 4), (x,))
    >>> bundle.save("exported")
    >>> again = load("exported")
    >>> again.manifest.table() == bundle.manifest.table(), sorted(again.arrays) == sorted(bundle.arrays)
    (True, True)
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import tokenize
from typing import Any

import numpy as np

from torch_xla_ext import _versions
from torch_xla_ext.export import graph
from torch_xla_ext.export.errors import BundleError, BundleFileNotFoundError, BundleTypeError, BundleVersionError
from torch_xla_ext.export.manifest import (MANIFEST_FILE, MLIR_TYPES, RESOURCES_FORMAT_VERSION, Input,
                                           Manifest, dtype_name, np_dtype, torch_dtype_name)

MODULE_FILE = "module.mlir"
ARTIFACT_FILE = "module.mlirbc"  # StableHLO portable artifact (VHLO bytecode) of the same module
JAX_EXPORT_DIR = "jax_export"  # optional: to_jax(bundle).save() (exported.jax + weights.safetensors)
RESOURCES_DIR = "resources"  # <name>.npy for each `dense_resource<name>` constant (inline_constants)
_RESOURCE_NAME = re.compile(r"txe_[0-9a-f]{32}\Z")
_RESOURCE_REF = re.compile(r"dense_resource<(txe_[0-9a-f]{32})>")


@dataclasses.dataclass
class Bundle:
    """A StableHLO module, the arrays its non-user arguments take (keyed by the manifest's
    `file` field) and the manifest describing `main`'s calling convention. `resources` holds the
    values of the module's constants written `dense_resource<name>` (what ``inline_constants``
    inlines), keyed by name: the text names them and never holds their data; :func:`mlir_module`
    binds them (as dense attributes: neither XLA nor StableHLO's portable artifact reads
    resource blobs)."""

    module_text: str
    manifest: Manifest
    arrays: dict[str, np.ndarray]
    torch_xla_export: Any = dataclasses.field(default=None, repr=False, compare=False)
    resources: dict[str, np.ndarray] = dataclasses.field(default_factory=dict, repr=False)

    @property
    def weights(self) -> dict[str, np.ndarray]:
        return {i.name: self.arrays[i.file] for i in self.manifest.inputs
                if i.kind in ("parameter", "buffer") and i.file in self.arrays}

    def save(self, path: str | os.PathLike, *, portable_artifact: bool | None = None, jax_export: bool = False) -> None:
        """Writes manifest.json, module.mlir (text), module.mlirbc (the StableHLO portable
        artifact, stable across StableHLO versions) and one .npy per array under `path`; with
        ``jax_export=True`` also ``jax_export/``, what ``to_jax(bundle).save`` writes
        (``exported.jax``, jax.export's own serialization, and ``weights.safetensors``), which a
        JAX user reads with ``export.load_jax`` (it checks the running JAX's window first) or with
        jax.export and safetensors alone. It holds the weights a second time. Inlined values
        (``resources``) go to ``resources/<name>.npy`` and the manifest's format_version becomes
        RESOURCES_FORMAT_VERSION, which older readers refuse by name. The portable artifact is
        written by default (``portable_artifact=None``) unless there are inlined values: it
        would hold them a second time (StableHLO has no resource blobs) and its writer copies them
        about five times (GPT-2 124M: 2.9 GiB peak instead of 0.6); ``portable_artifact=True``
        writes it anyway.

        Example: ``bundle.save("/tmp/exported")``.
        """
        path = os.fspath(path)
        os.makedirs(path, exist_ok=True)
        if jax_export:
            from torch_xla_ext.export.transforms import to_jax

            to_jax(self).save(os.path.join(path, JAX_EXPORT_DIR))
        manifest = self.manifest
        resources = used_resources(self.module_text, self.resources, MODULE_FILE)
        if resources:
            manifest = dataclasses.replace(manifest, format_version=RESOURCES_FORMAT_VERSION)
        if portable_artifact or (portable_artifact is None and not resources):
            version, data = portable_artifact_of(self.module_text, resources)
            with open(os.path.join(path, ARTIFACT_FILE), "wb") as f:
                f.write(data)
            del data
            manifest = dataclasses.replace(manifest, portable_artifact_version=version)
        files = {**self.arrays, **{f"{RESOURCES_DIR}/{k}.npy": v for k, v in resources.items()}}
        for key, arr in files.items():
            dest = os.path.join(path, key)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            arr = np.asarray(arr)
            if dtype_name(arr.dtype) == "bfloat16":  # .npy has no bfloat16: its bits as uint16
                arr = arr.view(np.uint16)
            np.save(dest, arr, allow_pickle=False)
        with open(os.path.join(path, MODULE_FILE), "w") as f:
            f.write(self.module_text)
        with open(os.path.join(path, MANIFEST_FILE), "w") as f:
            f.write(manifest.to_json(indent=2))


def portable_artifact_of(text: str, resources: dict[str, np.ndarray] | None = None) -> tuple[str, bytes]:
    """(StableHLO version, portable artifact bytes) of a module's text, its resources bound."""
    from jax.extend import mlir as jmlir

    from torch_xla_ext._compat import jax_mlir

    ctx, module, _ = mlir_module(text, resources or {}, MODULE_FILE)
    with ctx:
        version = jax_mlir.stablehlo_current_version()
        code = jax_mlir.module_to_bytecode(module)
    del module, ctx  # the bound values (the context owns them): freed before the artifact copies them again
    return version, jmlir.serialize_portable_artifact(code, version)


# --- inlined values: `dense_resource<name>` in the text, arrays beside it ----------------------


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
    from jax.extend.mlir import ir

    from torch_xla_ext._compat import jax_mlir

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
    from jax.extend.mlir import ir

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
    from jax.extend.mlir import ir

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
    from jax.extend.mlir import ir

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


def array_key(kind: str, name: str | None, index: int) -> str:
    if name:
        safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
        return f"{'weights' if kind in ('parameter', 'buffer') else 'constants'}/{safe}.npy"
    return f"constants/{index}.npy"


def parsable_text(text: str | None, bytecode: bytes | None, where: str, bytecode_where: str):
    """(text, (ctx, module)) of a module given as text and/or a portable artifact: the text when it
    parses, else the artifact's (torch_xla's text printed with its MLIR debug info, bare string
    locations, does not parse; its bytecode does)."""
    from torch_xla_ext._compat import stablehlo as _shlo

    first: BundleError | None = None
    if text is not None:
        try:
            return text, graph.parse(text, where)
        except BundleError as e:
            if bytecode is None or "not a parsable" not in str(e):
                raise
            first = e
    if bytecode is None:
        raise BundleFileNotFoundError(f"{where}: no module text and no portable artifact")
    with typed_errors():
        fallback = _shlo.portable_artifact_to_text(bytecode, bytecode_where)
    try:
        return fallback, graph.parse(fallback, bytecode_where)
    except BundleError as e:
        if first is None or graph.DIALECT_ERROR in str(e):
            raise  # the artifact's error says more (it names the unknown dialect)
        raise first from None  # neither parses: the text's error is the one to read


def from_torch_xla(tx, kinds_by_target: dict[str, str] | None, user_leaves: list[dict[str, Any]] | None,
                   calls: list[dict[str, Any]] | None, where: str = "",
                   output_names: list[str] | None = None) -> Bundle:
    """A Bundle of what torch_xla's exporter produced (`_compat.stablehlo.TorchXlaExport`).

    kinds_by_target: state-dict name -> parameter/buffer/constant (torch.export's graph
    signature); without it (a save_as_stablehlo directory) every state entry is a parameter.
    user_leaves: every user input leaf in position order ({"name", "shape", "dtype", "value"}),
    from the example inputs; without it, torch_xla's own unused_inputs are used.
    """
    inputs: list[Input] = []
    arrays: dict[str, np.ndarray] = {}
    src = where or MODULE_FILE

    def check(arr, shape, dtype, file, i):
        # Read from disk (load): the file must hold what input_signature says main takes.
        if where and (list(arr.shape) != list(shape) or dtype_name(arr.dtype) != dtype):
            raise BundleError(f"{where}{file}: {dtype_name(arr.dtype)}{list(arr.shape)} but meta field "
                              f"'input_signature[{i}]' is {dtype}{list(shape)}")
        return arr

    if len(tx.input_locations) != len(tx.input_signature):
        raise BundleError(f"{where}meta: {len(tx.input_locations)} input_locations but "
                          f"{len(tx.input_signature)} input_signature entries")
    for i, (loc, (shape, tdtype)) in enumerate(zip(tx.input_locations, tx.input_signature)):
        dtype = torch_dtype_name(tdtype)
        if loc.type == "input_arg":
            if loc.position < 0 or any(p.position == loc.position for p in inputs if p.kind == "user_input"):
                raise BundleError(f"{where}meta: input_locations[{i}].position {loc.position} is negative "
                                  f"or repeated")
            name = None
            if user_leaves is not None:
                if loc.position >= len(user_leaves):
                    raise BundleError(f"{src}: main's argument {i} is user input {loc.position}, but the example "
                                      f"inputs have {len(user_leaves)} leaves")
                name = user_leaves[loc.position]["name"]
            inputs.append(Input(i, "user_input", shape, dtype, position=loc.position, name=name))
        elif loc.type == "parameter":
            if loc.name not in tx.state_dict:
                raise BundleError(f"{where}data/{loc.name}: missing weight for main argument {i}")
            kind = (kinds_by_target or {}).get(loc.name, "parameter")
            arr = check(tx.state_dict[loc.name], shape, dtype, f"data/{loc.name}", i)
            key = array_key(kind, loc.name, i)
            arrays[key] = arr
            value = _scalar_value(arr) if kind == "constant" else None
            inputs.append(Input(i, kind, shape, dtype, name=loc.name, value=value, file=key))
        elif loc.type == "constant":
            if not 0 <= loc.position < len(tx.additional_constants):
                raise BundleError(f"{where}constants/{loc.position}: missing constant for main argument {i}")
            arr = check(tx.additional_constants[loc.position], shape, dtype, f"constants/{loc.position}", i)
            key = f"constants/{loc.position}.npy"
            arrays[key] = arr
            inputs.append(Input(i, "constant", shape, dtype, value=_scalar_value(arr), file=key))
        else:
            raise BundleError(f"{where}meta: input_locations[{i}] has unknown type '{loc.type}'")
    used = {i.position for i in inputs if i.kind == "user_input"}
    if user_leaves is not None:
        # Every leaf of the example inputs main does not take (torch_xla's own list indexes the
        # top-level arguments, not the leaves, so it is wrong for nested inputs).
        unused = []
        for p, leaf in enumerate(user_leaves):
            if p in used:
                continue
            u = {"position": p, "shape": leaf["shape"], "dtype": leaf["dtype"], "name": leaf["name"]}
            if "value" in leaf:
                u["value"] = leaf["value"]
            unused.append(u)
        num_user = len(user_leaves)
    else:
        unused = [{"position": p, "shape": s, "dtype": torch_dtype_name(d)} for p, s, d in tx.unused_inputs]
        positions = sorted(used | {u["position"] for u in unused})
        num_user = positions[-1] + 1 if positions else 0
    outputs = []
    for k, (s, d) in enumerate(tx.output_signature):
        out = {"shape": s, "dtype": torch_dtype_name(d)}
        if output_names is not None and k < len(output_names):
            out["name"] = output_names[k]
        outputs.append(out)
    manifest = Manifest(inputs=inputs, collectives=[], outputs=outputs, unused_inputs=unused,
                        num_user_inputs=num_user)
    text, parsed = parsable_text(tx.text, tx.bytecode, src, tx.bytecode_path or "torch_xla's bytecode")
    graph.analyze_into(text, manifest, calls or [], src, parsed=parsed)
    # Tokens keep their value for assembling arguments, but need no file.
    for inp in manifest.inputs:
        if inp.kind == "collective_token" and inp.file is not None:
            inp.value = float(arrays.pop(inp.file))
            inp.file = None
    return Bundle(text, manifest, arrays)


def _scalar_value(arr: np.ndarray) -> float | None:
    if arr.ndim != 0 or arr.dtype.kind not in "biuf":
        return None
    return float(arr)


# --- load --------------------------------------------------------------------------------------


def load_npy(path: str, field: str) -> np.ndarray:
    """Reads a plain numeric .npy without unpickling: the header is checked (dtype kind, shape,
    data size against the file size) before any data is read, so a corrupt header can neither
    reach the pickle path nor make numpy allocate what the file does not hold."""
    if not os.path.exists(path):
        raise BundleFileNotFoundError(f"{path}: missing (referenced by {field})")
    fmt = np.lib.format
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            version = fmt.read_magic(f)
            if version not in ((1, 0), (2, 0)):
                raise ValueError(f"unsupported .npy format version {version}")
            read_header = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
            shape, fortran_order, dtype = read_header(f)
            if dtype.kind not in "biufc" or dtype.hasobject or dtype.fields is not None or dtype.subdtype:
                raise ValueError(f"dtype {dtype.str} is not a plain numeric dtype")
            if any(s < 0 for s in shape):
                raise ValueError(f"negative dimension in shape {shape}")
            nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
            if size - f.tell() != nbytes:
                raise ValueError(f"header says {nbytes} bytes of data ({dtype.str}{list(shape)}), "
                                 f"the file holds {size - f.tell()}")
            data = f.read(nbytes)
    except IsADirectoryError:
        raise BundleError(f"{path}: a directory, not an .npy file ({field})") from None
    except (ValueError, SyntaxError, tokenize.TokenError, RecursionError) as e:  # bad magic, header, size
        raise BundleError(f"{path}: not a plain numeric .npy file ({field}): {e}") from None
    except (OSError, EOFError) as e:
        raise BundleError(f"{path}: unreadable .npy ({field}): {e}") from None
    arr = np.frombuffer(data, dtype).reshape(shape, order="F" if fortran_order else "C")
    return arr.astype(dtype.newbyteorder("="))  # a copy in native byte order (what JAX takes)


def read_file(path: str, what: str, binary: bool = False):
    """The whole file at `path`; OS and encoding failures become our typed errors naming it."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise BundleFileNotFoundError(f"{path}: missing ({what})") from None
    except IsADirectoryError:
        raise BundleError(f"{path}: a directory, not a file ({what})") from None
    except OSError as e:
        raise BundleError(f"{path}: unreadable ({what}): {e.strerror or e}") from None
    if binary:
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BundleError(f"{path}: not UTF-8 text ({what}): {e}") from None


def _read_json(path: str, what: str) -> Any:
    text = read_file(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise BundleError(f"{path}: not JSON ({e})") from None
    except RecursionError:
        raise BundleError(f"{path}: not JSON we accept (nested too deeply)") from None


@contextlib.contextmanager
def typed_errors():
    """Plain ValueError / FileNotFoundError from _compat readers become this component's types."""
    try:
        yield
    except (BundleError, BundleFileNotFoundError):
        raise
    except FileNotFoundError as e:
        raise BundleFileNotFoundError(str(e)) from None
    except ValueError as e:
        raise BundleError(str(e)) from None
    except OSError as e:  # a directory or a symlink loop where a file should be
        raise BundleError(f"{e.filename}: unreadable: {e.strerror or e}") from None


def load(path: str | os.PathLike) -> Bundle:
    """Loads a bundle written by :meth:`Bundle.save`, or torch_xla's own `save_as_stablehlo`
    directory, and validates it against the module's `main` (argument count, shapes, dtypes).
    Never unpickles. Raises BundleError / BundleFileNotFoundError naming the file and field.

    Example: ``bundle = export.load("/tmp/exported")``.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise BundleTypeError(f"path: expected a bundle directory, got {type(path).__name__}")
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise BundleFileNotFoundError(f"{path}: not a directory")
    _versions.require("export.jax")
    from torch_xla_ext._compat import stablehlo as _shlo

    mpath = os.path.join(path, MANIFEST_FILE)
    if not os.path.lexists(mpath) and _shlo.is_saved_dir(path):
        with typed_errors():
            tx = _shlo.read_saved_dir(path, load_npy)
        return from_torch_xla(tx, None, None, None, where=path + "/")
    if not os.path.exists(mpath):
        raise BundleFileNotFoundError(f"{mpath}: missing (and {path} is not a save_as_stablehlo directory)")
    manifest = Manifest.from_dict(_read_json(mpath, "the manifest"), mpath)
    modpath = os.path.join(path, MODULE_FILE)
    artpath = os.path.join(path, ARTIFACT_FILE)
    # save writes text that parses, so here (unlike torch_xla's directories) text that does not
    # parse is an error, not a reason to read the artifact instead.
    if os.path.exists(modpath):
        text = read_file(modpath, "the module's text")
        ctx, module = graph.parse(text, modpath)
    elif os.path.exists(artpath):
        artifact = read_file(artpath, "the module's portable artifact", binary=True)
        text, (ctx, module) = parsable_text(None, artifact, artpath, artpath)
        modpath = artpath
    else:
        raise BundleFileNotFoundError(f"{modpath}: missing (and no {ARTIFACT_FILE})")
    with ctx:
        arg_types = graph.argument_types(module, modpath, graph.describe_input(manifest))
        constants = resource_constants(module, modpath)
    graph.check_signature(arg_types, manifest, modpath)
    resources: dict[str, np.ndarray] = {}
    for _, name, shape, dtype in constants:
        if name in resources:
            continue
        file = os.path.join(path, RESOURCES_DIR, f"{name}.npy")
        arr = load_npy(file, f"{modpath}'s constant dense_resource<{name}>")
        if dtype == "bfloat16" and arr.dtype == np.uint16:  # how save writes bfloat16
            arr = arr.view(np_dtype("bfloat16"))
        if list(arr.shape) != shape or dtype_name(arr.dtype) != dtype:
            raise BundleError(f"{file}: {dtype_name(arr.dtype)}{list(arr.shape)}, but {modpath}'s constant "
                              f"dense_resource<{name}> is {dtype}{shape}")
        resources[name] = arr
    del ctx, module, constants
    for k, c in enumerate(manifest.collectives):
        if any(i >= len(manifest.inputs) for i in c.operand_inputs):
            raise BundleError(f"{mpath}: field 'collectives[{k}].operand_inputs' is {c.operand_inputs}, "
                              f"but there are {len(manifest.inputs)} inputs")
    arrays: dict[str, np.ndarray] = {}
    for inp in manifest.inputs:
        if inp.file is None:
            continue
        field = f"{MANIFEST_FILE} inputs[{inp.index}].file"
        arr = load_npy(os.path.join(path, inp.file), field)
        if inp.dtype == "bfloat16" and arr.dtype == np.uint16:  # how save writes bfloat16
            arr = arr.view(np_dtype("bfloat16"))
        if list(arr.shape) != inp.shape:
            raise BundleError(f"{os.path.join(path, inp.file)}: shape {list(arr.shape)} but "
                              f"{MANIFEST_FILE} field 'inputs[{inp.index}].shape' is {inp.shape}")
        if dtype_name(arr.dtype) != inp.dtype:
            raise BundleError(f"{os.path.join(path, inp.file)}: dtype {dtype_name(arr.dtype)} but "
                              f"{MANIFEST_FILE} field 'inputs[{inp.index}].dtype' is {inp.dtype}")
        arrays[inp.file] = arr
    return Bundle(text, manifest, arrays, resources=resources)



def as_bundle(value: Any, what: str = "bundle") -> Bundle:
    """``value`` as a :class:`Bundle`: a Bundle as it is, a directory read with :func:`load`.

    Example: ``as_bundle("/tmp/exported")`` is ``load("/tmp/exported")``.
    """
    if isinstance(value, Bundle):
        return value
    if isinstance(value, (str, os.PathLike)):
        return load(value)
    raise BundleTypeError(f"{what}: expected an export.Bundle or a bundle directory, got {type(value).__name__}")
