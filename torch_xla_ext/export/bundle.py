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

import dataclasses
import functools
import os
from typing import Any

import numpy as np

from torch_xla_ext import _versions
from torch_xla_ext._compat import stablehlo as _shlo
from torch_xla_ext.export import graph, transforms
from torch_xla_ext.export.errors import BundleError, BundleFileNotFoundError, BundleTypeError, JaxExportExpiredError
from torch_xla_ext.export.files import (ARTIFACT_FILE, JAX_EXPORT_DIR, MODULE_FILE, RESOURCES_DIR, load_npy, read_file,
                                        read_json, save_npy, typed_errors)
from torch_xla_ext.export.manifest import (MANIFEST_FILE, RESOURCES_FORMAT_VERSION, Input, Manifest, dtype_name,
                                           np_dtype, torch_dtype_name)
from torch_xla_ext.export.program import parsable_text, portable_artifact_of, resource_constants, used_resources


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
            transforms.to_jax(self).save(os.path.join(path, JAX_EXPORT_DIR))
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
            save_npy(os.path.join(path, key), arr)
        with open(os.path.join(path, MODULE_FILE), "w") as f:
            f.write(self.module_text)
        with open(os.path.join(path, MANIFEST_FILE), "w") as f:
            f.write(manifest.to_json(indent=2))


def array_key(kind: str, name: str | None, index: int) -> str:
    if name:
        safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
        return f"{'weights' if kind in ('parameter', 'buffer') else 'constants'}/{safe}.npy"
    return f"constants/{index}.npy"


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
    mpath = os.path.join(path, MANIFEST_FILE)
    if not os.path.lexists(mpath) and _shlo.is_saved_dir(path):
        with typed_errors():
            tx = _shlo.read_saved_dir(path, load_npy)
        return from_torch_xla(tx, None, None, None, where=path + "/")
    if not os.path.exists(mpath):
        raise BundleFileNotFoundError(f"{mpath}: missing (and {path} is not a save_as_stablehlo directory)")
    manifest = Manifest.from_dict(read_json(mpath, "the manifest"), mpath)
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


# --- the transforms as the export API takes them: a Bundle or its directory ------------------------
# (export/transforms.py takes Bundles only: Bundle.save writes to_jax's files, so transforms sits
# below this module and cannot load a directory itself.)


def _taking_directories(transform: Any) -> Any:
    @functools.wraps(transform)
    def wrapper(bundle: Any, *args: Any, **kwargs: Any) -> Any:
        return transform(as_bundle(bundle), *args, **kwargs)
    return wrapper


strip_tokens = _taking_directories(transforms.strip_tokens)
inline_constants = _taking_directories(transforms.inline_constants)
to_jax = _taking_directories(transforms.to_jax)


@functools.wraps(transforms.load_jax)
def load_jax(path: str | os.PathLike) -> transforms.JaxExport:
    try:
        return transforms.load_jax(path)
    except JaxExportExpiredError:
        # a bundle directory keeps its StableHLO: re-lowered in the running JAX, the window does not bite
        if isinstance(path, (str, os.PathLike)) and os.path.isfile(os.path.join(os.fspath(path), MANIFEST_FILE)):
            return transforms.to_jax(load(path))
        raise

