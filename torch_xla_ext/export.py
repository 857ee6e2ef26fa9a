"""StableHLO export with a typed calling convention: what every `main` argument is (user input,
parameter, buffer, constant, collective token), what every collective does (reduce, groups,
token, scale), a bundle format that loads without pickle, and a runner that needs no torch.

Example:
    >>> from torch_xla_ext import export
    >>> bundle = export.export(model, (x,))            # torch.export + torch_xla's exporter
    >>> [i.kind for i in bundle.manifest.inputs]
    ['collective_token', 'parameter', 'parameter', 'user_input']
    >>> bundle.save("/tmp/m"); outs = export.run("/tmp/m", x.numpy())

The classification runs in C++ (cc/collectives/analysis.h) over `main`'s value graph, built here
from the module parsed with JAX's MLIR bindings. A token is found by structure: a scalar operand
of a collective whose matching result is unused (or only feeds later collectives' tokens).
`run`, `load`, `strip_tokens` and `inline_constants` import JAX only, never torch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import tokenize
from typing import Any, Sequence

import numpy as np

from torch_xla_ext._ext import collectives as _core
from torch_xla_ext.errors import TorchXlaExtError

__all__ = [
    "Bundle", "BundleError", "Collective", "ExportOptions", "Input", "Manifest", "FORMAT_VERSION",
    "export", "load", "run", "strip_tokens", "inline_constants",
]

FORMAT_VERSION = 1
MANIFEST_FILE = "manifest.json"
MODULE_FILE = "module.mlir"
ARTIFACT_FILE = "module.mlirbc"  # StableHLO portable artifact (VHLO bytecode) of the same module
INPUT_KINDS = ("user_input", "parameter", "buffer", "constant", "collective_token")

# MLIR element type <-> numpy dtype name (bfloat16 through ml_dtypes).
_ELEMENT_TYPES = {
    "f64": "float64", "f32": "float32", "f16": "float16", "bf16": "bfloat16",
    "i64": "int64", "i32": "int32", "i16": "int16", "i8": "int8", "i1": "bool",
    "ui64": "uint64", "ui32": "uint32", "ui16": "uint16", "ui8": "uint8",
}
_MLIR_TYPES = {v: k for k, v in _ELEMENT_TYPES.items()}


class BundleError(TorchXlaExtError, ValueError):
    """A bundle that is malformed or does not match its module; names the file and field."""


class BundleFileNotFoundError(TorchXlaExtError, FileNotFoundError):
    """A file the manifest refers to (or the manifest itself) is missing."""


class RunInputError(TorchXlaExtError, ValueError):
    """User inputs that do not match the manifest (count, shape, dtype)."""


# --- manifest ----------------------------------------------------------------------------------


@dataclasses.dataclass
class Input:
    """One argument of `main`, in order."""

    index: int
    kind: str
    shape: list[int]
    dtype: str
    position: int | None = None  # user inputs: index into the flattened (args, kwargs)
    name: str | None = None      # parameters, buffers, named (lifted) constants
    value: float | None = None   # scalar constants and tokens
    file: str | None = None      # bundle-relative .npy holding the value (not for tokens)


@dataclasses.dataclass
class Collective:
    """One collective op of `main`, in program order."""

    op: str
    reduce: str | None
    replica_groups: list[list[int]]
    token_input: int | None
    operand_inputs: list[int]
    scale: float                        # applied: the constant multiplied into the result
    requested_scale: float | None = None  # what the caller asked for, if the hook recorded it
    lowering: str | None = None           # what the recording lowering says it emitted
    # torch_xla adds the token into the data operand of collectives that take no token operand
    token_mixed_into_operand: bool = False


@dataclasses.dataclass
class Manifest:
    inputs: list[Input]
    collectives: list[Collective]
    outputs: list[dict[str, Any]]           # {"shape", "dtype"} per result of main
    unused_inputs: list[dict[str, Any]]     # user inputs torch_xla dropped: {"position", "shape", "dtype"}
    num_user_inputs: int
    transforms: list[str] = dataclasses.field(default_factory=list)
    portable_artifact_version: str | None = None  # StableHLO version module.mlirbc targets
    # Collectives inside while/case bodies, which `collectives` does not describe: {"op", "inside"}
    nested_collectives: list[dict[str, str]] = dataclasses.field(default_factory=list)
    format_version: int = FORMAT_VERSION

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_dict(cls, d: Any, where: str = MANIFEST_FILE) -> "Manifest":
        """Validates every field (type, range, cross-references) before building: a manifest is
        untrusted input, and every later use (load, run, table, transforms) relies on it."""
        def need(obj, key, field, check, expected, optional=False):
            if not isinstance(obj, dict):
                raise BundleError(f"{where}: field '{field.rsplit('.', 1)[0]}' is not an object")
            if key not in obj or (optional and obj[key] is None):
                if optional:
                    return None
                raise BundleError(f"{where}: missing field '{field}'")
            if not check(obj[key]):
                raise BundleError(f"{where}: field '{field}' is {_short(obj[key])}, expected {expected}")
            return obj[key]

        def items(obj, key, field):
            return need(obj, key, field, lambda v: isinstance(v, list), "a list")

        def shape(obj, field):
            return list(need(obj, "shape", field + ".shape", _is_shape, "a list of non-negative ints"))

        def dtype(obj, field):
            v = need(obj, "dtype", field + ".dtype", _is_str, "a dtype name")
            if v not in _MLIR_TYPES:
                raise BundleError(f"{where}: field '{field}.dtype' is unknown dtype {_short(v)} "
                                  f"(expected one of {', '.join(_MLIR_TYPES)})")
            return v

        version = need(d, "format_version", "format_version", _is_int, "an int")
        if version != FORMAT_VERSION:
            raise BundleError(f"{where}: format_version {version} is not supported (expected {FORMAT_VERSION})")
        num_user = need(d, "num_user_inputs", "num_user_inputs", lambda v: _is_int(v) and v >= 0,
                        "a non-negative int")
        position_ok = (lambda v: _is_int(v) and 0 <= v < num_user)
        positions: dict[int, str] = {}

        def position(obj, field):
            p = need(obj, "position", field + ".position", position_ok, f"an int in [0, num_user_inputs={num_user})")
            if p in positions:
                raise BundleError(f"{where}: field '{field}.position' is {p}, already the position of {positions[p]}")
            positions[p] = field
            return p

        inputs = []
        for i, raw in enumerate(items(d, "inputs", "inputs")):
            f = f"inputs[{i}]"
            kind = need(raw, "kind", f + ".kind", lambda v: isinstance(v, str), "a string")
            if kind not in INPUT_KINDS:
                raise BundleError(f"{where}: field '{f}.kind' is unknown kind '{kind}' (expected one of {', '.join(INPUT_KINDS)})")
            index = need(raw, "index", f + ".index", _is_int, "an int")
            if index != i:
                raise BundleError(f"{where}: field '{f}.index' is {index}, expected {i}")
            inp = Input(index, kind, shape(raw, f), dtype(raw, f),
                        name=need(raw, "name", f + ".name", _is_str, "a string", optional=True),
                        value=need(raw, "value", f + ".value", _is_number, "a number", optional=True),
                        file=need(raw, "file", f + ".file", _is_bundle_path, "a relative path inside the bundle",
                                  optional=True))
            if kind == "user_input":
                inp.position = position(raw, f)
            if kind in ("parameter", "buffer", "constant") and inp.file is None:
                raise BundleError(f"{where}: field '{f}.file' is required for a {kind}")
            if kind == "collective_token" and inp.value is None:
                raise BundleError(f"{where}: field '{f}.value' is required for a collective_token")
            inputs.append(inp)
        in_range = (lambda v: _is_int(v) and 0 <= v < len(inputs))
        colls = []
        for i, raw in enumerate(items(d, "collectives", "collectives")):
            f = f"collectives[{i}]"
            colls.append(Collective(
                op=need(raw, "op", f + ".op", _is_str, "a string"),
                reduce=need(raw, "reduce", f + ".reduce", _is_str, "a string or null", optional=True),
                replica_groups=need(raw, "replica_groups", f + ".replica_groups", _is_groups,
                                    "a list of lists of non-negative ints"),
                token_input=need(raw, "token_input", f + ".token_input", _is_int, "an int or null", optional=True),
                operand_inputs=need(raw, "operand_inputs", f + ".operand_inputs",
                                    lambda v: isinstance(v, list) and all(_is_int(x) and x >= 0 for x in v),
                                    "a list of input indices"),
                scale=float(need(raw, "scale", f + ".scale", _is_number, "a number")),
                requested_scale=need(raw, "requested_scale", f + ".requested_scale", _is_number,
                                     "a number or null", optional=True),
                lowering=need(raw, "lowering", f + ".lowering", _is_str, "a string or null", optional=True),
                token_mixed_into_operand=bool(need(raw, "token_mixed_into_operand", f + ".token_mixed_into_operand",
                                                   lambda v: isinstance(v, bool), "a bool", optional=True))))
            ti = colls[-1].token_input
            if ti is not None and not in_range(ti):
                raise BundleError(f"{where}: field '{f}.token_input' {ti} is not an input index")
            # operand_inputs are range-checked by load after the argument count, the clearer error
        outputs = []
        for i, raw in enumerate(items(d, "outputs", "outputs")):
            outputs.append({"shape": shape(raw, f"outputs[{i}]"), "dtype": dtype(raw, f"outputs[{i}]")})
        unused = []
        for i, raw in enumerate(items(d, "unused_inputs", "unused_inputs")):
            f = f"unused_inputs[{i}]"
            unused.append({"position": position(raw, f), "shape": shape(raw, f), "dtype": dtype(raw, f)})
        nested = []
        for i, raw in enumerate(need(d, "nested_collectives", "nested_collectives", lambda v: isinstance(v, list),
                                     "a list", optional=True) or []):
            f = f"nested_collectives[{i}]"
            nested.append({"op": need(raw, "op", f + ".op", _is_str, "a string"),
                           "inside": need(raw, "inside", f + ".inside", _is_str, "a string")})
        return cls(
            inputs=inputs, collectives=colls, outputs=outputs, unused_inputs=unused, num_user_inputs=num_user,
            transforms=list(need(d, "transforms", "transforms",
                                 lambda v: isinstance(v, list) and all(_is_str(t) for t in v),
                                 "a list of strings", optional=True) or []),
            portable_artifact_version=need(d, "portable_artifact_version", "portable_artifact_version", _is_str,
                                           "a string or null", optional=True),
            nested_collectives=nested, format_version=version)

    def table(self) -> str:
        """The manifest as two plain-text tables (inputs, collectives)."""
        rows = [("#", "kind", "shape", "dtype", "position/name/value")]
        for i in self.inputs:
            what = (f"position {i.position}" if i.kind == "user_input" else
                    f"value {i.value!r}" if i.value is not None and i.name is None else (i.name or i.file or ""))
            rows.append((str(i.index), i.kind, "x".join(map(str, i.shape)) or "scalar", i.dtype, what))
        for u in self.unused_inputs:
            rows.append(("-", "unused user_input", "x".join(map(str, u["shape"])) or "scalar", u["dtype"],
                         f"position {u['position']} (not an argument of main)"))
        out = [_format_table(rows)]
        if self.collectives:
            crow = [("#", "op", "reduce", "replica_groups", "token_input", "operand_inputs", "scale", "requested_scale")]
            for k, c in enumerate(self.collectives):
                crow.append((str(k), c.op, c.reduce or "-", str(c.replica_groups or "all"),
                             "-" if c.token_input is None else str(c.token_input),
                             ",".join(map(str, c.operand_inputs)), f"{c.scale:g}",
                             "-" if c.requested_scale is None else f"{c.requested_scale:g}"))
            out.append(_format_table(crow))
        else:
            out.append("(no collectives)")
        if self.nested_collectives:
            out.append("not described (inside regions): " +
                       ", ".join(f"{c['op']} in {c['inside']}" for c in self.nested_collectives))
        if self.transforms:
            out.append("transforms: " + ", ".join(self.transforms))
        return "\n\n".join(out)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    # JSON numbers only; a huge int must still convert to a float.
    return (isinstance(v, float) or _is_int(v)) and (isinstance(v, float) or abs(v) < 2**1023)


def _is_str(v: Any) -> bool:
    return isinstance(v, str)


def _is_shape(v: Any) -> bool:
    return isinstance(v, list) and all(_is_int(s) and s >= 0 for s in v)


def _is_groups(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(g, list) and all(_is_int(x) and x >= 0 for x in g) for g in v)


def _is_bundle_path(v: Any) -> bool:
    """A relative path that stays inside the bundle directory (no absolute paths, no '..')."""
    if not isinstance(v, str) or not v or "\x00" in v or os.path.isabs(v):
        return False
    norm = os.path.normpath(v)
    return norm != ".." and not norm.startswith(".." + os.sep)


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _format_table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


# --- bundle ------------------------------------------------------------------------------------


@dataclasses.dataclass
class Bundle:
    """A StableHLO module, the arrays its non-user arguments take (keyed by the manifest's
    `file` field) and the manifest describing `main`'s calling convention."""

    module_text: str
    manifest: Manifest
    arrays: dict[str, np.ndarray]
    torch_xla_export: Any = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def weights(self) -> dict[str, np.ndarray]:
        return {i.name: self.arrays[i.file] for i in self.manifest.inputs
                if i.kind in ("parameter", "buffer") and i.file in self.arrays}

    def save(self, path: str | os.PathLike, *, portable_artifact: bool = True) -> None:
        """Writes manifest.json, module.mlir (text), module.mlirbc (the StableHLO portable
        artifact, stable across StableHLO versions) and one .npy per array under `path`.

        Example: ``bundle.save("/tmp/exported")``.
        """
        path = os.fspath(path)
        os.makedirs(path, exist_ok=True)
        manifest = self.manifest
        if portable_artifact:
            version, data = _portable_artifact(self.module_text)
            with open(os.path.join(path, ARTIFACT_FILE), "wb") as f:
                f.write(data)
            manifest = dataclasses.replace(manifest, portable_artifact_version=version)
        for key, arr in self.arrays.items():
            dest = os.path.join(path, key)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            arr = np.asarray(arr)
            if _dtype_name(arr.dtype) == "bfloat16":  # .npy has no bfloat16: its bits as uint16
                arr = arr.view(np.uint16)
            np.save(dest, arr, allow_pickle=False)
        with open(os.path.join(path, MODULE_FILE), "w") as f:
            f.write(self.module_text)
        with open(os.path.join(path, MANIFEST_FILE), "w") as f:
            f.write(manifest.to_json(indent=2))


def _portable_artifact(text: str) -> tuple[str, bytes]:
    from jax._src.lib.mlir.dialects import hlo

    ctx, module = _parse(text, MODULE_FILE)
    with ctx:
        version = hlo.get_current_version()
        return version, hlo.serialize_portable_artifact(module, version)


@dataclasses.dataclass
class ExportOptions:
    """Options of :func:`export`. `strict` is torch.export's."""

    strict: bool = False


def _array_key(kind: str, name: str | None, index: int) -> str:
    if name:
        safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
        return f"{'weights' if kind in ('parameter', 'buffer') else 'constants'}/{safe}.npy"
    return f"constants/{index}.npy"


def export(model: Any, args: Sequence[Any], kwargs: dict[str, Any] | None = None, *,
           options: ExportOptions | None = None) -> Bundle:
    """torch.export + torch_xla's StableHLO exporter, plus a typed manifest of `main`.

    Example:
        >>> b = export(torch.nn.Linear(4, 4), (torch.randn(2, 4),))
        >>> [i.kind for i in b.manifest.inputs]
        ['parameter', 'parameter', 'user_input']
    """
    import torch
    from torch_xla_ext._compat import stablehlo as _shlo

    options = options or ExportOptions()
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"args: expected a tuple of example inputs, got {type(args).__name__}")
    prefix = ""
    flat_args = tuple(args)
    if kwargs:
        # torch_xla's exporter takes no kwargs: export a module taking (args, kwargs) flattened
        # positionally, the order `run` takes user inputs in.
        model, flat_args = _Positional(model, len(args), list(kwargs)), tuple(args) + tuple(kwargs.values())
        prefix = "inner."
    start = _core.next_all_reduce_sequence()
    ep = torch.export.export(model, flat_args, strict=options.strict)
    calls = _core.recorded_all_reduces_since(start)
    tx = _shlo.export_program(ep)
    if prefix:
        _strip_prefix(tx, prefix)

    sig = ep.graph_signature
    kinds_by_target: dict[str, str] = {}
    for targets, kind in ((sig.inputs_to_parameters, "parameter"), (sig.inputs_to_buffers, "buffer"),
                          (sig.inputs_to_lifted_tensor_constants, "constant")):
        for t in targets.values():
            kinds_by_target[t[len(prefix):] if prefix and t.startswith(prefix) else t] = kind
    num_user = len(torch.utils._pytree.tree_leaves(flat_args))
    bundle = _bundle_from_torch_xla(tx, kinds_by_target, num_user, calls)
    bundle.torch_xla_export = tx
    return bundle


def _positional_module():
    import torch

    class Positional(torch.nn.Module):
        """`inner(*args, **kwargs)` called with (args, kwargs) flattened positionally."""

        def __init__(self, inner, num_args: int, kwarg_names: list[str]):
            super().__init__()
            self.inner = inner
            self.num_args = num_args
            self.kwarg_names = kwarg_names

        def forward(self, *flat):
            n = self.num_args
            return self.inner(*flat[:n], **dict(zip(self.kwarg_names, flat[n:])))

    return Positional


def _Positional(inner, num_args, kwarg_names):  # noqa: N802 - a class made lazily (torch import)
    return _positional_module()(inner, num_args, kwarg_names)


def _strip_prefix(tx, prefix: str) -> None:
    tx.state_dict = {(k[len(prefix):] if k.startswith(prefix) else k): v for k, v in tx.state_dict.items()}
    for loc in tx.input_locations:
        if loc.name.startswith(prefix):
            loc.name = loc.name[len(prefix):]


def _bundle_from_torch_xla(tx, kinds_by_target: dict[str, str] | None, num_user: int | None,
                           calls: list[dict[str, Any]] | None, where: str = "") -> Bundle:
    inputs: list[Input] = []
    arrays: dict[str, np.ndarray] = {}

    def check(arr, shape, dtype, file, i):
        # Read from disk (load): the file must hold what input_signature says main takes.
        if where and (list(arr.shape) != list(shape) or _dtype_name(arr.dtype) != dtype):
            raise BundleError(f"{where}{file}: {_dtype_name(arr.dtype)}{list(arr.shape)} but meta field "
                              f"'input_signature[{i}]' is {dtype}{list(shape)}")
        return arr

    for i, (loc, (shape, tdtype)) in enumerate(zip(tx.input_locations, tx.input_signature)):
        dtype = _torch_dtype_name(tdtype)
        if loc.type == "input_arg":
            if loc.position < 0 or any(p.position == loc.position for p in inputs if p.kind == "user_input"):
                raise BundleError(f"{where}meta: input_locations[{i}].position {loc.position} is negative "
                                  f"or repeated")
            inputs.append(Input(i, "user_input", shape, dtype, position=loc.position))
        elif loc.type == "parameter":
            if loc.name not in tx.state_dict:
                raise BundleError(f"{where}data/{loc.name}: missing weight for main argument {i}")
            kind = (kinds_by_target or {}).get(loc.name, "parameter")
            arr = check(tx.state_dict[loc.name], shape, dtype, f"data/{loc.name}", i)
            key = _array_key(kind, loc.name, i)
            arrays[key] = arr
            value = float(arr) if arr.ndim == 0 and kind == "constant" else None
            inputs.append(Input(i, kind, shape, dtype, name=loc.name, value=value, file=key))
        elif loc.type == "constant":
            if not 0 <= loc.position < len(tx.additional_constants):
                raise BundleError(f"{where}constants/{loc.position}: missing constant for main argument {i}")
            arr = check(tx.additional_constants[loc.position], shape, dtype, f"constants/{loc.position}", i)
            key = f"constants/{loc.position}.npy"
            arrays[key] = arr
            value = float(arr) if arr.ndim == 0 else None
            inputs.append(Input(i, "constant", shape, dtype, value=value, file=key))
        else:
            raise BundleError(f"{where}meta: input_locations[{i}] has unknown type '{loc.type}'")
    if len(tx.input_locations) != len(tx.input_signature):
        raise BundleError(f"{where}meta: {len(tx.input_locations)} input_locations but "
                          f"{len(tx.input_signature)} input_signature entries")
    unused = [{"position": p, "shape": s, "dtype": _torch_dtype_name(d)} for p, s, d in tx.unused_inputs]
    if num_user is None:
        positions = [i.position for i in inputs if i.kind == "user_input"] + [u["position"] for u in unused]
        num_user = max(positions) + 1 if positions else 0
    manifest = Manifest(inputs=inputs, collectives=[],
                        outputs=[{"shape": s, "dtype": _torch_dtype_name(d)} for s, d in tx.output_signature],
                        unused_inputs=unused, num_user_inputs=num_user)
    _analyze_into(tx.text, manifest, calls or [], where or MODULE_FILE)
    # Tokens keep their value for assembling arguments, but need no file.
    for inp in manifest.inputs:
        if inp.kind == "collective_token" and inp.file is not None:
            inp.value = float(arrays.pop(inp.file))
            inp.file = None
    return Bundle(tx.text, manifest, arrays)


def _torch_dtype_name(d: str) -> str:
    d = d.replace("torch.", "")
    return {"float": "float32", "double": "float64", "half": "float16", "long": "int64",
            "int": "int32"}.get(d, d)


# --- the module's graph, for cc/collectives ----------------------------------------------------


# MLIR's parser recurses once per nesting level of types, attributes and regions: a module
# nested deeply enough overflows the stack (a segfault). Real modules nest a few dozen levels.
_MAX_NESTING = 1000
_BRACKET_STEP = np.zeros(256, np.int8)
_BRACKET_STEP[[ord(c) for c in "([{<"]] = 1
_BRACKET_STEP[[ord(c) for c in ")]}>"]] = -1


def _nesting_depth(text: str) -> int:
    """The deepest bracket nesting outside string literals (an upper bound on parser recursion)."""
    bare = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text).replace("->", "")
    step = _BRACKET_STEP[np.frombuffer(bare.encode("utf-8", "replace"), np.uint8)]
    return int(np.cumsum(step, dtype=np.int64).max(initial=0))


def _parse(text: str, where: str):
    from jax.extend.mlir import ir

    from torch_xla_ext._compat import jax_mlir

    depth = _nesting_depth(text)
    if depth > _MAX_NESTING:
        raise BundleError(f"{where}: nested {depth} levels deep (more than {_MAX_NESTING}); not parsed")
    ctx = jax_mlir.make_context()
    with ctx:
        try:
            module = ir.Module.parse(text)
        except Exception as e:  # noqa: BLE001 - MLIR raises its own error type
            detail = " ".join(line.strip() for line in str(e).splitlines()[:3])
            raise BundleError(f"{where}: not a parsable StableHLO module ({detail})") from None
    return ctx, module


def _main(module, where: str):
    from jax.extend.mlir import ir

    for op in module.body.operations:
        if "sym_name" in op.attributes and ir.StringAttr(op.attributes["sym_name"]).value == "main":
            return op
    raise BundleError(f"{where}: module has no function 'main'")


def _tensor_type(t, where: str = "value") -> tuple[list[int], str]:
    from jax.extend.mlir import ir

    if not ir.RankedTensorType.isinstance(t) or not ir.RankedTensorType(t).has_static_shape:
        raise BundleError(f"{where}: type {t} is not a statically shaped tensor")
    rt = ir.RankedTensorType(t)
    et = str(rt.element_type)
    return list(rt.shape), _ELEMENT_TYPES.get(et, et)


def _build_graph(ctx, module, where: str):
    """main's top-level ops as (values, num_args, ops, returned) for _core.analyze."""
    from jax.extend.mlir import ir

    with ctx:
        main = _main(module, where)
        block = main.regions[0].blocks[0]
        values: list[tuple[list[int], str]] = []
        ids: dict[Any, int] = {}
        for k, a in enumerate(block.arguments):
            ids[a] = len(values)
            values.append(_tensor_type(a.type, f"{where}: main's argument {k}"))
        num_args = len(values)
        ops, returned = [], []
        for op in block.operations:
            o = op.operation
            operands = [ids[v] for v in o.operands]
            if o.name == "func.return":
                returned = operands
                continue
            results = []
            for r in o.results:
                ids[r] = len(values)
                results.append(len(values))
                try:
                    values.append(_tensor_type(r.type))
                except ValueError:  # tokens/tuples: not tensors
                    values.append(([], str(r.type)))
            reduction, groups, splat = "", [], None
            if o.name == "stablehlo.constant":
                attr = ir.DenseElementsAttr(o.attributes["value"])
                if attr.is_splat:
                    try:
                        splat = _splat_float(attr)
                    except (TypeError, ValueError):
                        splat = None
            elif "replica_groups" in o.attributes:
                arr = np.array(ir.DenseIntElementsAttr(o.attributes["replica_groups"]))
                groups = [[int(x) for x in row] for row in arr.reshape(arr.shape[0], -1)] if arr.size else []
            if len(o.regions) == 1 and o.name.startswith("stablehlo.") and o.regions[0].blocks:
                body = [b.operation.name for b in o.regions[0].blocks[0].operations]
                if len(body) == 2 and body[1] == "stablehlo.return":
                    reduction = body[0]
            ops.append((o.name, operands, results, reduction, groups, splat))
    return values, num_args, ops, returned


_COLLECTIVE_OPS = {f"stablehlo.{n}" for n in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                                "collective_permute", "collective_broadcast")}


def _nested_collectives(ctx, module, where: str) -> list[dict[str, str]]:
    """Collectives inside regions of main's ops (while/case bodies): the analysis sees main's top
    level only, so these are listed in the manifest rather than described."""
    found: list[dict[str, str]] = []

    def walk(op, top: str) -> None:
        for region in op.regions:
            for block in region.blocks:
                for inner in block.operations:
                    o = inner.operation
                    if o.name in _COLLECTIVE_OPS:
                        found.append({"op": o.name[len("stablehlo."):], "inside": top})
                    walk(o, top)

    with ctx:
        for op in _main(module, where).regions[0].blocks[0].operations:
            o = op.operation
            if o.name in _COLLECTIVE_OPS:
                continue  # its region is the reduction body
            walk(o, o.name)
    return found


def _splat_float(attr) -> float:
    from jax.extend.mlir import ir

    v = attr.get_splat_value()
    if ir.FloatAttr.isinstance(v):
        return float(ir.FloatAttr(v).value)
    if ir.IntegerAttr.isinstance(v):
        return float(ir.IntegerAttr(v).value)
    raise TypeError("not a number")


def _analyze_into(text: str, manifest: Manifest, calls: list[dict[str, Any]], where: str) -> None:
    ctx, module = _parse(text, where)
    values, num_args, ops, returned = _build_graph(ctx, module, where)
    manifest.nested_collectives = _nested_collectives(ctx, module, where)
    _check_signature(values[:num_args], manifest, where)
    declared = [(i.kind if i.kind != "collective_token" else "constant", i.value) for i in manifest.inputs]
    a = _core.analyze(values, num_args, ops, returned, declared)
    for inp, kind in zip(manifest.inputs, a["input_kinds"]):
        inp.kind = kind
    # Match recorded all-reduce calls to the module's all-reduces in program order; a model
    # traced more than once records each call once per trace, so take the newest trace.
    all_reduces = [c for c in a["collectives"] if c["op"] == "all_reduce"]
    recorded = calls[-len(all_reduces):] if all_reduces and len(calls) % len(all_reduces) == 0 and calls else []
    it = iter(recorded)
    for c in a["collectives"]:
        call = next(it) if (recorded and c["op"] == "all_reduce") else None
        manifest.collectives.append(Collective(
            op=c["op"], reduce=c["reduce"], replica_groups=c["replica_groups"],
            token_input=c["token_input"], token_mixed_into_operand=c["token_mixed_into_operand"],
            operand_inputs=c["operand_inputs"], scale=c["scale"],
            requested_scale=None if call is None else call["requested_scale"],
            lowering=None if call is None else call["lowering"]))


def _check_signature(arg_types: list[tuple[list[int], str]], manifest: Manifest, where: str) -> None:
    if len(arg_types) != len(manifest.inputs):
        raise BundleError(f"{where}: main has {len(arg_types)} arguments but {MANIFEST_FILE} field "
                          f"'inputs' has {len(manifest.inputs)} entries")
    for i, ((shape, dtype), inp) in enumerate(zip(arg_types, manifest.inputs)):
        if list(shape) != list(inp.shape):
            raise BundleError(f"{MANIFEST_FILE}: field 'inputs[{i}].shape' is {inp.shape} but main's "
                              f"argument {i} in {where} has shape {shape}")
        if dtype != inp.dtype:
            raise BundleError(f"{MANIFEST_FILE}: field 'inputs[{i}].dtype' is {inp.dtype} but main's "
                              f"argument {i} in {where} has dtype {dtype}")


# --- load --------------------------------------------------------------------------------------


def _load_npy(path: str, field: str) -> np.ndarray:
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
            if dtype.kind not in "biuf" or dtype.hasobject or dtype.fields is not None or dtype.subdtype:
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


def _read(path: str, what: str, binary: bool = False):
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
    text = _read(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise BundleError(f"{path}: not JSON ({e})") from None
    except RecursionError:
        raise BundleError(f"{path}: not JSON we accept (nested too deeply)") from None


@contextlib.contextmanager
def _typed_errors():
    """Plain ValueError / FileNotFoundError from _compat readers become this module's types."""
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
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise BundleFileNotFoundError(f"{path}: not a directory")
    from torch_xla_ext._compat import stablehlo as _shlo

    mpath = os.path.join(path, MANIFEST_FILE)
    if not os.path.lexists(mpath) and _shlo.is_saved_dir(path):
        with _typed_errors():
            tx = _shlo.read_saved_dir(path, _load_npy)
            return _bundle_from_torch_xla(tx, None, None, None, where=path + "/")
    if not os.path.exists(mpath):
        raise BundleFileNotFoundError(f"{mpath}: missing (and {path} is not a save_as_stablehlo directory)")
    manifest = Manifest.from_dict(_read_json(mpath, "the manifest"), mpath)
    modpath = os.path.join(path, MODULE_FILE)
    artpath = os.path.join(path, ARTIFACT_FILE)
    if os.path.exists(modpath):
        text = _read(modpath, "the module's text")
    elif os.path.exists(artpath):
        data = _read(artpath, "the module's portable artifact", binary=True)
        with _typed_errors():
            text = _shlo.portable_artifact_to_text(data, artpath)
        modpath = artpath
    else:
        raise BundleFileNotFoundError(f"{modpath}: missing (and no {ARTIFACT_FILE})")
    ctx, module = _parse(text, modpath)
    with ctx:
        main = _main(module, modpath)
        arg_types = [_tensor_type(a.type, f"{modpath}: main's argument {k}")
                     for k, a in enumerate(main.regions[0].blocks[0].arguments)]
    _check_signature(arg_types, manifest, modpath)
    for k, c in enumerate(manifest.collectives):
        if any(i >= len(manifest.inputs) for i in c.operand_inputs):
            raise BundleError(f"{mpath}: field 'collectives[{k}].operand_inputs' is {c.operand_inputs}, "
                              f"but there are {len(manifest.inputs)} inputs")
    arrays: dict[str, np.ndarray] = {}
    for inp in manifest.inputs:
        if inp.file is None:
            continue
        field = f"{MANIFEST_FILE} inputs[{inp.index}].file"
        arr = _load_npy(os.path.join(path, inp.file), field)
        if inp.dtype == "bfloat16" and arr.dtype == np.uint16:  # how save writes bfloat16
            arr = arr.view(_np_dtype("bfloat16"))
        if list(arr.shape) != inp.shape:
            raise BundleError(f"{os.path.join(path, inp.file)}: shape {list(arr.shape)} but "
                              f"{MANIFEST_FILE} field 'inputs[{inp.index}].shape' is {inp.shape}")
        if _dtype_name(arr.dtype) != inp.dtype:
            raise BundleError(f"{os.path.join(path, inp.file)}: dtype {_dtype_name(arr.dtype)} but "
                              f"{MANIFEST_FILE} field 'inputs[{inp.index}].dtype' is {inp.dtype}")
        arrays[inp.file] = arr
    return Bundle(text, manifest, arrays)


def _dtype_name(dt: np.dtype) -> str:
    return "bfloat16" if dt.name == "bfloat16" else np.dtype(dt).name


def _np_dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


# --- run ---------------------------------------------------------------------------------------

_EXECUTABLES: dict[tuple[str, int], Any] = {}


def _ensure_cpu_devices(n: int):
    import jax
    from jax._src import xla_bridge

    if not xla_bridge.backends_are_initialized() and jax.config.jax_num_cpu_devices < n:
        jax.config.update("jax_num_cpu_devices", n)
    devices = jax.devices("cpu")
    if len(devices) < n:
        raise RuntimeError(
            f"num_replicas={n} needs {n} JAX CPU devices but JAX already started with {len(devices)}; "
            f'call jax.config.update("jax_num_cpu_devices", {n}) before JAX is first used')
    return devices[:n]


def _executable(text: str, n: int):
    import jax  # noqa: F401
    from jax._src.lib import xla_client as xc

    from torch_xla_ext._compat import jax_mlir

    key = (hashlib.sha256(text.encode()).hexdigest(), n)
    if key not in _EXECUTABLES:
        devices = _ensure_cpu_devices(n)
        ctx, module = _parse(text, MODULE_FILE)
        with ctx:
            code = jax_mlir.module_to_bytecode(module)
        opts = xc.CompileOptions()
        opts.num_replicas = n
        opts.num_partitions = 1
        opts.device_assignment = xc.DeviceAssignment.create(np.arange(n).reshape(n, 1))
        try:
            exe = devices[0].client.compile_and_load(code, xc.DeviceList(tuple(devices)), opts)
        except xc.XlaRuntimeError as e:  # parses and verifies, but XLA cannot compile it
            detail = " ".join(str(e).splitlines()[:2])
            raise BundleError(f"{MODULE_FILE}: XLA cannot compile main ({detail})") from None
        _EXECUTABLES[key] = (exe, devices)
    return _EXECUTABLES[key]


def _arguments(bundle: Bundle, user_inputs: Sequence[Any], replica: int | None) -> list[np.ndarray]:
    m = bundle.manifest
    where = "user_inputs" if replica is None else f"user_inputs[{replica}]"
    if len(user_inputs) != m.num_user_inputs:
        raise RunInputError(f"{where}: expected {m.num_user_inputs} user inputs (flattened args, "
                            f"kwargs), got {len(user_inputs)}")
    args = []
    for inp in m.inputs:
        if inp.kind == "user_input":
            a = np.asarray(user_inputs[inp.position])
            if list(a.shape) != inp.shape or _dtype_name(a.dtype) != inp.dtype:
                raise RunInputError(f"{where}[{inp.position}]: expected {inp.dtype}{inp.shape}, "
                                    f"got {_dtype_name(a.dtype)}{list(a.shape)}")
        elif inp.kind == "collective_token":
            try:
                a = np.asarray(inp.value, dtype=_np_dtype(inp.dtype))
            except (ValueError, OverflowError) as e:  # NaN or out of range for an integer dtype
                raise BundleError(f"{MANIFEST_FILE}: field 'inputs[{inp.index}].value' {inp.value!r} is not "
                                  f"a {inp.dtype}: {e}") from None
        else:
            a = bundle.arrays[inp.file]
        args.append(np.ascontiguousarray(a))
    return args


def run(bundle_or_dir: Bundle | str | os.PathLike, *user_inputs: Any, num_replicas: int = 1) -> list:
    """Runs `main` with JAX/PJRT on the CPU (no torch), assembling every argument from the manifest.

    `user_inputs` are the flattened user inputs (args then kwargs, unused ones included). With
    num_replicas=N, pass N per-replica tuples; the result is then one list of outputs per replica,
    and collectives run across N JAX CPU devices.

    Example:
        >>> run(bundle, x)                                  # [out0, ...]
        >>> run(bundle, (x0,), (x1,), num_replicas=2)        # [[out0 on replica 0], [... 1]]
    """
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    bundle = bundle_or_dir if isinstance(bundle_or_dir, Bundle) else load(bundle_or_dir)
    if not isinstance(num_replicas, int) or num_replicas < 1:
        raise ValueError(f"num_replicas: expected an int >= 1, got {num_replicas!r}")
    if num_replicas == 1:
        per_replica = [_arguments(bundle, user_inputs, None)]
    else:
        if len(user_inputs) != num_replicas:
            raise RunInputError(f"user_inputs: expected {num_replicas} per-replica tuples, got {len(user_inputs)}")
        per_replica = [_arguments(bundle, tuple(u), r) for r, u in enumerate(user_inputs)]
    exe, devices = _executable(bundle.module_text, num_replicas)
    mesh = Mesh(np.array(devices), ("replica",))
    replicated = NamedSharding(mesh, PartitionSpec())
    # One array per argument whose shard on device r is replica r's value (the layout pmap used).
    args = [jax.make_array_from_single_device_arrays(
                per_replica[0][k].shape, replicated,
                [jax.device_put(per_replica[r][k], devices[r]) for r in range(num_replicas)])
            for k in range(len(per_replica[0]))]
    outs = exe.execute_sharded(args).disassemble_into_single_device_arrays()
    by_replica = [[np.asarray(o[r]) for o in outs] for r in range(num_replicas)]
    return by_replica[0] if num_replicas == 1 else by_replica


# --- transforms --------------------------------------------------------------------------------

_INNER = "_txe_main_inner"


def _dense_literal(arr: np.ndarray, dtype: str) -> str:
    ty = f"tensor<{''.join(f'{d}x' for d in arr.shape)}{_MLIR_TYPES[dtype]}>"
    if dtype == "bool":
        flat = ", ".join("true" if b else "false" for b in arr.reshape(-1))
        return f"stablehlo.constant dense<{'[' + flat + ']' if arr.ndim else flat}> : {ty}" if arr.size else \
            f"stablehlo.constant dense<> : {ty}"
    data = np.ascontiguousarray(arr.astype(_np_dtype(dtype), copy=False)).astype(
        _np_dtype(dtype).newbyteorder("<"), copy=False).tobytes()
    return f'stablehlo.constant dense<"0x{data.hex().upper()}"> : {ty}'


def _rewrite(bundle: Bundle, drop: dict[int, str], transform: str) -> Bundle:
    """A bundle whose new `main` takes every argument but `drop` (index -> constant op text) and
    calls the old `main`, renamed private, with those made inside."""
    from jax.extend.mlir import ir

    if not drop:
        b = dataclasses.replace(bundle, manifest=dataclasses.replace(bundle.manifest))
        b.manifest.transforms = bundle.manifest.transforms + [transform]
        return b
    ctx, module = _parse(bundle.module_text, MODULE_FILE)
    with ctx:
        main = _main(module, MODULE_FILE)
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
    keep = [i for i in range(len(arg_types)) if i not in drop]
    params = ", ".join(f"%arg{j}: {arg_types[i]}" for j, i in enumerate(keep))
    lines = [f"  func.func @main({params}) -> ({', '.join(result_types)}) {{"]
    operand = {}
    for j, i in enumerate(keep):
        operand[i] = f"%arg{j}"
    for i, op_text in drop.items():
        lines.append(f"    %c{i} = {op_text}")
        operand[i] = f"%c{i}"
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
    _parse(text, f"{transform} output")  # must still parse

    m = bundle.manifest
    new_index = {i: j for j, i in enumerate(keep)}
    inputs = []
    for i in keep:
        inp = dataclasses.replace(m.inputs[i], index=new_index[i])
        inputs.append(inp)
    colls = []
    for c in m.collectives:
        colls.append(dataclasses.replace(
            c, token_input=new_index.get(c.token_input) if c.token_input is not None else None,
            token_mixed_into_operand=c.token_mixed_into_operand and c.token_input in new_index,
            operand_inputs=[new_index[i] for i in c.operand_inputs if i in new_index]))
    manifest = dataclasses.replace(m, inputs=inputs, collectives=colls, transforms=m.transforms + [transform])
    used = {inp.file for inp in inputs if inp.file}
    return Bundle(text, manifest, {k: v for k, v in bundle.arrays.items() if k in used})


def strip_tokens(bundle: Bundle) -> Bundle:
    """A bundle whose `main` has no collective-token argument: the token is made inside.

    Example: ``run(strip_tokens(bundle), x)`` takes the same user inputs and gives the same result.
    """
    drop = {}
    for inp in bundle.manifest.inputs:
        if inp.kind == "collective_token":
            drop[inp.index] = _dense_literal(np.asarray(inp.value, _np_dtype(inp.dtype)), inp.dtype)
    return _rewrite(bundle, drop, "strip_tokens")


def inline_constants(bundle: Bundle, weights: bool = False) -> Bundle:
    """A bundle whose lifted constants (and, with weights=True, parameters and buffers) are
    constants inside the module instead of `main` arguments.

    Example: ``b = inline_constants(bundle, weights=True)`` leaves only user inputs and tokens.
    """
    kinds = ("constant", "parameter", "buffer") if weights else ("constant",)
    drop = {}
    for inp in bundle.manifest.inputs:
        if inp.kind in kinds:
            drop[inp.index] = _dense_literal(np.asarray(bundle.arrays[inp.file]), inp.dtype)
    return _rewrite(bundle, drop, "inline_constants(weights=True)" if weights else "inline_constants")
