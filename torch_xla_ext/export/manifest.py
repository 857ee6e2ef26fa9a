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
from typing import Annotated, Any, Union

from typing_extensions import NotRequired, TypedDict  # pydantic's dependency; NotRequired on every Python

from torch_xla_ext import _dtypes, _frontend, _json, _validation
from torch_xla_ext._validation import Before, Check
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


# The manifest's JSON schema is the annotations of Input, Collective and Manifest below (validated
# by pydantic through torch_xla_ext/_validation.py); these are its rules beyond JSON types.
def _is_bundle_path(v: str) -> bool:
    """A relative path that stays inside the bundle directory (no absolute paths, no '..')."""
    if not v or "\x00" in v or os.path.isabs(v):
        return False
    norm = os.path.normpath(v)
    return norm != ".." and not norm.startswith(".." + os.sep)


def _finite_or_json_float(v: Any) -> Any:
    # a JSON int too large for a float (1e400 written as digits) is not a number we read
    return v if not (isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 2**1023) else str(v)


_NonNegative = Annotated[int, Check(lambda v: v >= 0, "a non-negative int")]
_Shape = list[_NonNegative]
_Number = Annotated[float, Before(_json.number), Before(_finite_or_json_float)]
_TensorDType = Annotated[str, Check(lambda v: v in MLIR_TYPES, "a dtype name (" + ", ".join(MLIR_TYPES) + ")")]
_UserDType = Annotated[str, Check(lambda v: v in MLIR_TYPES or bool(_PYTHON_TYPE.match(v)),
                                  "a dtype name or python:<type name>")]
_BundlePath = Annotated[str, Check(_is_bundle_path, "a relative path inside the bundle")]
_JsonScalar = Union[None, bool, int, float, str]


def _none_as(default: Any) -> Before:
    return Before(lambda v: default() if v is None else v)


# (Rules are named here, not written inline in the annotations: `from __future__ import
# annotations` evaluates those in the class's namespace, where a lambda would not see this module.)
_Kind = Annotated[str, Check(lambda v: v in INPUT_KINDS, "one of " + ", ".join(INPUT_KINDS))]
_Flag = Annotated[bool, _none_as(bool)]
_Strings = Annotated[list[str], _none_as(list)]
_TracedBy = Annotated[str, _none_as(lambda: TRACERS[0]), Check(lambda v: v in TRACERS, "one of " + ", ".join(TRACERS))]
_Frontend = Annotated[str, _none_as(lambda: _frontend.DEFAULT),
                      Check(lambda v: v in _frontend.FRONTENDS, "one of " + ", ".join(_frontend.FRONTENDS))]
_Positive = Annotated[int, Check(lambda v: v >= 1, "an int >= 1")]
MUTATED_KINDS = ("buffer", "user_input")
_MutatedKind = Annotated[str, Check(lambda v: v in MUTATED_KINDS, "one of " + ", ".join(MUTATED_KINDS))]


class Output(TypedDict):
    """One output of `main`: shape, dtype and its pytree path in the model's return value."""

    shape: _Shape
    dtype: _TensorDType
    name: NotRequired[str | None]


class UnusedInput(TypedDict):
    """A user input `main` does not take; `value` is a Python constant's (which `run` checks)."""

    position: int
    shape: _Shape
    dtype: _UserDType
    name: NotRequired[str | None]
    value: NotRequired[_JsonScalar]


class NestedCollective(TypedDict):
    op: str
    inside: str


_NestedCollectives = Annotated[list[NestedCollective], _none_as(list)]


class DroppedMutation(TypedDict):
    """An in-place write of the forward pass that `main` does not return (torch.export's
    BUFFER_MUTATION or USER_INPUT_MUTATION output): the buffer's state-dict name, or the input's."""

    kind: _MutatedKind
    name: str


_DroppedMutations = Annotated[list[DroppedMutation], _none_as(list)]


@dataclasses.dataclass
class _Versioned:
    """What is read of a manifest before its version says which fields it has."""

    format_version: int


@dataclasses.dataclass
class Input:
    """One argument of `main`, in order."""

    index: int
    kind: _Kind
    shape: _Shape
    dtype: _TensorDType
    position: int | None = None  # user inputs: index into the flattened (args, kwargs)
    name: str | None = None      # state-dict name of parameters/buffers/constants; user inputs: argument name
    value: _Number | None = None   # scalar constants and tokens
    file: _BundlePath | None = None  # bundle-relative .npy holding the value (not for tokens)


@dataclasses.dataclass
class Collective:
    """One collective op of `main`, in program order."""

    op: str
    reduce: str | None
    replica_groups: list[list[_NonNegative]]
    token_input: int | None
    operand_inputs: list[_NonNegative]
    scale: _Number                        # applied: the constant multiplied into the result
    requested_scale: _Number | None = None  # what the caller asked for, if the hook recorded it
    lowering: str | None = None           # what the recording lowering says it emitted
    # torch_xla adds the token into the data operand of collectives that take no token operand
    token_mixed_into_operand: _Flag = False


@dataclasses.dataclass
class Manifest:
    """What every argument and result of `main` is. `outputs` are {"shape", "dtype", "name"}
    (name: the output's pytree path in the model's return value, e.g. "output['logits']");
    `unused_inputs` are user inputs `main` does not take: {"position", "shape", "dtype", "name",
    "value"} (value: a Python constant's value, which `run` checks)."""

    inputs: list[Input]
    collectives: list[Collective]
    outputs: list[Output]
    unused_inputs: list[UnusedInput]
    num_user_inputs: _NonNegative
    transforms: _Strings = dataclasses.field(default_factory=list)
    portable_artifact_version: str | None = None  # StableHLO version module.mlirbc targets
    # Collectives inside while/case bodies, which `collectives` does not describe: {"op", "inside"}
    nested_collectives: _NestedCollectives = dataclasses.field(default_factory=list)
    format_version: int = FORMAT_VERSION
    traced_by: _TracedBy = "torch.export"
    fallback_reason: str | None = None     # why torch.export's path was not taken (traced_by != torch.export)
    # Whose lowering made the program: "torch_xla" (its exporter or lazy trace) or "torchax".
    frontend: _Frontend = _frontend.DEFAULT
    # In-place writes the program does not return ({"kind", "name"}): a run leaves those tensors as
    # they were (a BatchNorm's running statistics in training mode). Both exporters drop them.
    dropped_mutations: _DroppedMutations = dataclasses.field(default_factory=list)
    # The replica count the program computes for, when it depends on it (torchax's average divides
    # by the size of its collective axis at export); None: any. `run` refuses another.
    num_replicas: _Positive | None = None

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
        untrusted input, and every later use (load, run, table, transforms) relies on it. The
        fields' types and ranges are the dataclasses' annotations (pydantic, through
        torch_xla_ext/_validation.py); what relates one field to another is checked here. A
        BundleError names `where` and the field's path."""
        version = _validation.validate(_Versioned, d, BundleError, where).format_version
        if version not in READABLE_FORMAT_VERSIONS:
            newer = " (written by a newer torch_xla_ext)" if version > max(READABLE_FORMAT_VERSIONS) else ""
            raise BundleVersionError(f"{where}: format_version {version} is not supported{newer}; this "
                                     f"torch_xla_ext reads {', '.join(map(str, READABLE_FORMAT_VERSIONS))}")
        m: Manifest = _validation.validate(cls, d, BundleError, where)
        num_user = m.num_user_inputs
        positions: dict[int, str] = {}

        def position(p: int | None, field: str) -> int:
            if p is None:
                raise BundleError(f"{where}: missing field '{field}.position'")
            if not 0 <= p < num_user:
                raise BundleError(f"{where}: field '{field}.position' is {p}, expected an int in "
                                  f"[0, num_user_inputs={num_user})")
            if p in positions:
                raise BundleError(f"{where}: field '{field}.position' is {p}, already the position of {positions[p]}")
            positions[p] = field
            return p

        for i, inp in enumerate(m.inputs):
            f = f"inputs[{i}]"
            if inp.index != i:
                raise BundleError(f"{where}: field '{f}.index' is {inp.index}, expected {i}")
            inp.position = position(inp.position, f) if inp.kind == "user_input" else None
            if inp.kind in ("parameter", "buffer", "constant") and inp.file is None:
                raise BundleError(f"{where}: field '{f}.file' is required for a {inp.kind}")
            if inp.kind == "collective_token" and inp.value is None:
                raise BundleError(f"{where}: field '{f}.value' is required for a collective_token")
        for i, c in enumerate(m.collectives):
            if c.token_input is not None and not 0 <= c.token_input < len(m.inputs):
                raise BundleError(f"{where}: field 'collectives[{i}].token_input' {c.token_input} is not an input index")
            # operand_inputs are range-checked by load after the argument count, the clearer error
        for out in m.outputs:
            if out.get("name", "") is None:
                del out["name"]
        for i, u in enumerate(m.unused_inputs):
            f = f"unused_inputs[{i}]"
            position(u["position"], f)
            if u.get("name", "") is None:
                del u["name"]
            if "value" in u:
                if not is_python_constant(u["dtype"]):
                    raise BundleError(f"{where}: field '{f}.value' is only for a Python constant "
                                      f"(dtype python:<type>), not {u['dtype']}")
                if u["dtype"] == PYTHON_PREFIX + "float":  # "nan"/"inf"/"-inf" as the JSON rule writes them
                    u["value"] = _json.number(u["value"])
        return m

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
        if self.frontend != _frontend.DEFAULT:
            out.append(f"frontend: {self.frontend}")
        if self.num_replicas is not None:
            out.append(f"computes for {self.num_replicas} replica(s) only (an average divides by it)")
        if self.dropped_mutations:
            out.append("in-place writes not returned (a run leaves them as exported): " +
                       ", ".join(f"{d['kind']} {d['name']}" for d in self.dropped_mutations))
        return "\n\n".join(out)


def _shape_text(shape: list[int]) -> str:
    return "x".join(map(str, shape)) or "scalar"


def _format_table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
