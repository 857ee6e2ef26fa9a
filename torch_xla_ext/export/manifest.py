"""The manifest: `main`'s typed calling convention (what every argument is, what every collective
does, what every output is called) and its validation as untrusted input; and the one dtype table
of the export component (MLIR element type <-> numpy dtype name <-> torch's name), from the one
table in torch_xla_ext/_dtypes.py.

Example:
    >>> import json, torch
    >>> from torch_xla_ext import export
    >>> export.export(torch.nn.Linear(4, 4), (torch.randn(2, 4),)).save("bundle")
    >>> with open("bundle/manifest.json") as f:
    ...     m = Manifest.from_dict(json.load(f))          # validates every field
    >>> for line in m.table().splitlines()[:5]:   # the inputs; then outputs and collectives
    ...     print(line)                           # doctest: +NORMALIZE_WHITESPACE
    #  kind        shape  dtype    name/position/value
    -  ----------  -----  -------  -------------------
    0  parameter   4      float32  bias
    1  parameter   4x4    float32  weight
    2  user_input  2x4    float32  input (position 0)
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any

from torch_xla_ext import _dtypes, _json
from torch_xla_ext.export.errors import BundleError, BundleVersionError

FORMAT_VERSION = 2
# Version 1 had no output names, no user-input names and no Python constants; it still loads.
# Version 3 is a bundle with inlined values (dense_resource constants, resources/<name>.npy):
# written only for those, so readers of 2 refuse them by name and still read every other bundle.
RESOURCES_FORMAT_VERSION = 3
READABLE_FORMAT_VERSIONS = (1, 2, 3)
MANIFEST_FILE = "manifest.json"
INPUT_KINDS = ("user_input", "parameter", "buffer", "constant", "collective_token")
# What traced the program: torch.export (then torch_xla's exporter), or torch_xla's lazy trace of
# one forward pass when torch.export could not (export/lazy.py).
TRACERS = ("torch.export", "torch_xla lazy trace")

# MLIR element type <-> dtype name of the bundle's dtypes: the rows of the one dtype table
# (torch_xla_ext/_dtypes.py) but float8, which a bundle's .npy files cannot hold.
ELEMENT_TYPES = {r.mlir: r.name for r in _dtypes.ROWS if not r.name.startswith("float8")}
MLIR_TYPES = {v: k for k, v in ELEMENT_TYPES.items()}
# A user input that is not a tensor (an int, a float, a list torch_xla did not flatten) is a
# Python constant torch.export baked into the program; its dtype is "python:<type name>".
PYTHON_PREFIX = "python:"
_PYTHON_TYPE = re.compile(r"python:[A-Za-z_][A-Za-z0-9_]*\Z")


np_dtype = _dtypes.numpy_dtype  # the numpy dtype of a manifest dtype name (bfloat16 through ml_dtypes)
dtype_name = _dtypes.name_of    # the manifest name of a numpy dtype


def torch_dtype_name(d: str) -> str:
    """The manifest name of a dtype as torch_xla's meta writes it: ``str(tensor.dtype)`` without
    "torch." for tensors, ``type(value).__name__`` for a Python value ("int", "float", "list")."""
    d = d.replace("torch.", "")
    if d in MLIR_TYPES:
        return d
    return PYTHON_PREFIX + d if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", d) else d


def is_python_constant(dtype: str) -> bool:
    return dtype.startswith(PYTHON_PREFIX)


@dataclasses.dataclass
class Input:
    """One argument of `main`, in order."""

    index: int
    kind: str
    shape: list[int]
    dtype: str
    position: int | None = None  # user inputs: index into the flattened (args, kwargs)
    name: str | None = None      # state-dict name of parameters/buffers/constants; user inputs: argument name
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
    """What every argument and result of `main` is. `outputs` are {"shape", "dtype", "name"}
    (name: the output's pytree path in the model's return value, e.g. "output['logits']");
    `unused_inputs` are user inputs `main` does not take: {"position", "shape", "dtype", "name",
    "value"} (value: a Python constant's value, which `run` checks)."""

    inputs: list[Input]
    collectives: list[Collective]
    outputs: list[dict[str, Any]]
    unused_inputs: list[dict[str, Any]]
    num_user_inputs: int
    transforms: list[str] = dataclasses.field(default_factory=list)
    portable_artifact_version: str | None = None  # StableHLO version module.mlirbc targets
    # Collectives inside while/case bodies, which `collectives` does not describe: {"op", "inside"}
    nested_collectives: list[dict[str, str]] = dataclasses.field(default_factory=list)
    format_version: int = FORMAT_VERSION
    traced_by: str = "torch.export"        # one of TRACERS
    fallback_reason: str | None = None     # why torch.export's path was not taken (traced_by != torch.export)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self, **kwargs: Any) -> str:
        return _json.dumps(self.to_dict(), **kwargs)

    @property
    def output_names(self) -> list[str | None]:
        """The outputs' pytree paths, in `run`'s result order."""
        return [o.get("name") for o in self.outputs]

    def user_inputs(self) -> list[dict[str, Any]]:
        """Every user input in position order (`run`'s argument order): {"position", "name",
        "shape", "dtype", "used"} (used: whether `main` takes it)."""
        rows = [{"position": i.position, "name": i.name, "shape": i.shape, "dtype": i.dtype, "used": True}
                for i in self.inputs if i.kind == "user_input"]
        rows += [{"position": u["position"], "name": u.get("name"), "shape": u["shape"], "dtype": u["dtype"],
                  "used": False} for u in self.unused_inputs]
        return sorted(rows, key=lambda r: r["position"])

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

        def dtype(obj, field, python_ok=False):
            v = need(obj, "dtype", field + ".dtype", _is_str, "a dtype name")
            if v not in MLIR_TYPES and not (python_ok and _PYTHON_TYPE.match(v)):
                extra = " or python:<type name>" if python_ok else ""
                raise BundleError(f"{where}: field '{field}.dtype' is unknown dtype {_short(v)} "
                                  f"(expected one of {', '.join(MLIR_TYPES)}{extra})")
            return v

        def name(obj, field):
            return need(obj, "name", field + ".name", _is_str, "a string", optional=True)

        version = need(d, "format_version", "format_version", _is_int, "an int")
        if version not in READABLE_FORMAT_VERSIONS:
            newer = " (written by a newer torch_xla_ext)" if version > max(READABLE_FORMAT_VERSIONS) else ""
            raise BundleVersionError(f"{where}: format_version {version} is not supported{newer}; this "
                                     f"torch_xla_ext reads {', '.join(map(str, READABLE_FORMAT_VERSIONS))}")
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
                raise BundleError(f"{where}: field '{f}.kind' is unknown kind '{kind}' "
                                  f"(expected one of {', '.join(INPUT_KINDS)})")
            index = need(raw, "index", f + ".index", _is_int, "an int")
            if index != i:
                raise BundleError(f"{where}: field '{f}.index' is {index}, expected {i}")
            inp = Input(index, kind, shape(raw, f), dtype(raw, f), name=name(raw, f),
                        value=_json.number(need(raw, "value", f + ".value", _is_number, "a number", optional=True)),
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
                requested_scale=_json.number(need(raw, "requested_scale", f + ".requested_scale", _is_number,
                                                  "a number or null", optional=True)),
                lowering=need(raw, "lowering", f + ".lowering", _is_str, "a string or null", optional=True),
                token_mixed_into_operand=bool(need(raw, "token_mixed_into_operand", f + ".token_mixed_into_operand",
                                                   lambda v: isinstance(v, bool), "a bool", optional=True))))
            ti = colls[-1].token_input
            if ti is not None and not in_range(ti):
                raise BundleError(f"{where}: field '{f}.token_input' {ti} is not an input index")
            # operand_inputs are range-checked by load after the argument count, the clearer error
        outputs = []
        for i, raw in enumerate(items(d, "outputs", "outputs")):
            f = f"outputs[{i}]"
            out = {"shape": shape(raw, f), "dtype": dtype(raw, f)}
            n = name(raw, f)
            if n is not None:
                out["name"] = n
            outputs.append(out)
        unused = []
        for i, raw in enumerate(items(d, "unused_inputs", "unused_inputs")):
            f = f"unused_inputs[{i}]"
            u = {"position": position(raw, f), "shape": shape(raw, f), "dtype": dtype(raw, f, python_ok=True)}
            n = name(raw, f)
            if n is not None:
                u["name"] = n
            if "value" in raw:
                if not is_python_constant(u["dtype"]):
                    raise BundleError(f"{where}: field '{f}.value' is only for a Python constant "
                                      f"(dtype python:<type>), not {u['dtype']}")
                u["value"] = need(raw, "value", f + ".value", _is_json_scalar,
                                  "null, a bool, a number or a string", optional=True)
                if u["dtype"] == PYTHON_PREFIX + "float":  # "nan"/"inf"/"-inf" as the JSON rule writes them
                    u["value"] = _json.number(u["value"])
            unused.append(u)
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
            nested_collectives=nested, format_version=version,
            traced_by=need(d, "traced_by", "traced_by", lambda v: v in TRACERS, f"one of {', '.join(TRACERS)}",
                           optional=True) or "torch.export",
            fallback_reason=need(d, "fallback_reason", "fallback_reason", _is_str, "a string or null",
                                 optional=True))

    def table(self) -> str:
        """The manifest as plain-text tables (inputs, outputs, collectives)."""
        rows = [("#", "kind", "shape", "dtype", "name/position/value")]
        for i in self.inputs:
            if i.kind == "user_input":
                what = f"{i.name} (position {i.position})" if i.name else f"position {i.position}"
            elif i.value is not None and i.name is None:
                what = f"value {i.value!r}"
            else:
                what = i.name or i.file or ""
            rows.append((str(i.index), i.kind, _shape_text(i.shape), i.dtype, what))
        for u in self.unused_inputs:
            what = f"{u['name']} (position {u['position']})" if u.get("name") else f"position {u['position']}"
            if "value" in u:
                what += f" = {u['value']!r}"
            rows.append(("-", "unused user_input", _shape_text(u["shape"]), u["dtype"],
                         what + ", not an argument of main"))
        out = [_format_table(rows)]
        if self.outputs:
            orow = [("output", "name", "shape", "dtype")]
            for k, o in enumerate(self.outputs):
                orow.append((str(k), o.get("name") or "-", _shape_text(o["shape"]), o["dtype"]))
            out.append(_format_table(orow))
        if self.collectives:
            crow = [("#", "op", "reduce", "replica_groups", "token_input", "operand_inputs", "scale",
                     "requested_scale")]
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
        if self.traced_by != "torch.export":
            out.append(f"traced by: {self.traced_by} ({self.fallback_reason})")
        return "\n\n".join(out)


def _shape_text(shape: list[int]) -> str:
    return "x".join(map(str, shape)) or "scalar"


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    # JSON numbers (a huge int must still convert to a float), or a non-finite float as _json writes it.
    return ((isinstance(v, float) or _is_int(v)) and (isinstance(v, float) or abs(v) < 2**1023)) or \
        (isinstance(v, str) and v in _json.NON_FINITE)


def _is_json_scalar(v: Any) -> bool:
    return v is None or isinstance(v, (bool, str, float)) or _is_int(v)


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
