"""torch_xla's StableHLO exporter (torch_xla.stablehlo, for torch_xla 2.9): exporting a torch.export
program, running an export with torch_xla itself, and reading the directory ``save_as_stablehlo``
writes. The one place that knows that subsystem; everything else works from the plain data here.

Reading a saved directory imports neither torch nor torch_xla (the JAX-only install reads them):
its ``.meta`` is untrusted JSON, validated like every file we read (torch_xla_ext/_validation.py).
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from typing import Annotated, Any, Callable

import numpy as np

from torch_xla_ext import _dtypes, _json, _validation
from torch_xla_ext.errors import InvalidArgumentError, NotFoundError, UnimplementedError


@dataclasses.dataclass
class InputLocation:
    """One `main` argument as torch_xla's StableHLOFunctionMeta.input_locations describes it."""

    type: str  # "parameter" | "constant" | "input_arg" (torch_xla's VariableType values)
    position: int
    name: str


@dataclasses.dataclass
class TorchXlaExport:
    """What torch_xla's exporter produced, as plain data."""

    text: str
    input_locations: list[InputLocation]
    input_signature: list[tuple[list[int], str]]  # (shape, torch dtype name) per main argument
    output_signature: list[tuple[list[int], str]]
    unused_inputs: list[tuple[int, list[int], str]]  # (position, shape, dtype) of dropped user inputs
    state_dict: dict[str, np.ndarray]
    additional_constants: list[np.ndarray]
    bytecode: bytes | None = None
    bytecode_path: str | None = None  # where the bytecode was read from (errors name it)
    # Buffers the decomposed program writes in place (its BUFFER_MUTATION outputs), which the
    # exporter does not return; None where unknown (a saved directory).
    mutated_buffers: list[str] | None = None


# torch_xla's StableHLOFunctionMeta as its JSON (StableHLOJSONSerializer) writes it: the schema of
# the `.meta` file, validated by pydantic (torch_xla_ext/_validation.py). Fields we do not read
# (name, stablehlo_version, the pytree specs, dynamic_dims) are not checked.
_NonNegative = Annotated[int, _validation.Check(lambda v: v >= 0, "a non-negative int")]


@dataclasses.dataclass
class _Signature:  # VariableSignature
    shape: list[_NonNegative]
    dtype: str


@dataclasses.dataclass
class _Location:  # InputLocation (type_ is VariableType's value)
    type_: str
    position: int
    name: str


@dataclasses.dataclass
class _UnusedLocation:  # the InputLocation of an unused input: only its position is read
    position: int


@dataclasses.dataclass
class _Meta:
    input_locations: list[_Location]
    input_signature: list[_Signature]
    output_signature: list[_Signature]
    unused_inputs: list[tuple[_UnusedLocation, _Signature]] | None


def _from_meta(meta: dict[str, Any], text: str | None, state_dict, constants, bytecode=None,
               where: str = "meta", bytecode_path: str | None = None) -> TorchXlaExport:
    """A StableHLOFunctionMeta as the dict its JSON form loads to, validated: an
    InvalidArgumentError naming `where` and the field's path when it is malformed."""
    m: _Meta = _validation.validate(_Meta, meta, InvalidArgumentError, where)
    return TorchXlaExport(
        text=text,
        input_locations=[InputLocation(loc.type_, loc.position, loc.name) for loc in m.input_locations],
        input_signature=[(s.shape, s.dtype) for s in m.input_signature],
        output_signature=[(s.shape, s.dtype) for s in m.output_signature],
        unused_inputs=[(loc.position, s.shape, s.dtype) for loc, s in m.unused_inputs or []],
        state_dict=state_dict,
        additional_constants=constants,
        bytecode=bytecode,
        bytecode_path=bytecode_path,
    )


_decompose_lock = threading.Lock()


def export_program(exported_program: Any, *, custom_ops_allowed_in_graph: tuple[str, ...] = (),
                   export_node_metadata: bool = False,
                   after_decompositions: Callable[[Any], None] | None = None) -> TorchXlaExport:
    """torch_xla.stablehlo.exported_program_to_stablehlo on a torch.export ExportedProgram (with
    StableHLOExportOptions' fields of the same names).

    `after_decompositions(graph_module)` edits the program between torch_xla's own decomposition
    pass (``stablehlo._run_decompositions``: torch.export's default table plus torch_xla's extras)
    and its lowering, in place; it sees the very ops torch_xla lowers, at no second decomposition.
    The decomposed program's mutated buffers are kept in ``mutated_buffers``."""
    from torch_xla import stablehlo as shlo  # as in from_graph_module

    options = shlo.StableHLOExportOptions()
    options.custom_ops_allowed_in_graph = set(custom_ops_allowed_in_graph)
    options.export_node_metadata = export_node_metadata
    decompose = shlo._run_decompositions
    mutated: list[str] = []

    def decompose_then_edit(program):
        decomposed = decompose(program)
        # torch_xla's lowering returns the user outputs only (it drops these writes)
        mutated.extend(decomposed.graph_signature.buffers_to_mutate.values())
        if after_decompositions is not None:
            after_decompositions(decomposed.graph_module)
        return decomposed

    with _decompose_lock:  # the module attribute is process-wide while it is swapped
        shlo._run_decompositions = decompose_then_edit
        try:
            gm = shlo.exported_program_to_stablehlo(exported_program, options)
        finally:
            shlo._run_decompositions = decompose
    out = from_graph_module(gm)
    out.graph_module = gm  # kept for running torch_xla's own execution in tests/bench
    out.mutated_buffers = mutated
    return out


def from_graph_module(gm: Any) -> TorchXlaExport:
    """The plain data of a StableHLOGraphModule (exported_program_to_stablehlo's result)."""
    from torch_xla import stablehlo as shlo  # torch_xla: not in the JAX-only install that reads saved dirs

    bundle = gm._bundle
    if len(bundle.stablehlo_funcs) != 1:
        # exported_program_to_stablehlo writes one function ("forward"); several would need a
        # manifest per function, which the bundle format does not have.
        raise UnimplementedError(f"torch_xla produced {len(bundle.stablehlo_funcs)} functions; the bundle holds one")
    func = bundle.stablehlo_funcs[0]
    state = {k: np.asarray(v) for k, v in bundle.state_dict.items()}
    consts = [np.asarray(c) for c in bundle.additional_constants]
    # The meta as its JSON form (what save_as_stablehlo writes, torch_xla's serializer turning
    # its enums into values) under the package's one JSON policy, read by the one validator.
    meta = _json.encode(func.meta, default=shlo.StableHLOJSONSerializer().default)
    return _from_meta(meta, func.text, state, consts, bytes(func.bytecode), where="torch_xla's meta")


# torch's messages for a view whose strides cannot express the new shape (fake/meta tensors
# raise the first while torch.export's decompositions re-trace, eager tensors the second).
_UNVIEWABLE = ("Cannot view a tensor with shape", "view size is not compatible with input tensor's size and stride")


def is_unviewable_view_error(error: BaseException) -> bool:
    """Whether torch_xla's exporter failed because torch.export's decompositions (which
    exported_program_to_stablehlo runs) re-traced an aten.view on strides that cannot express it
    (pytorch/pytorch#141107: scaled_dot_product_attention's decomposition changes its output's
    strides, so a later `x.view(-1, n)` no longer fits)."""
    return isinstance(error, (RuntimeError, ValueError)) and any(m in str(error) for m in _UNVIEWABLE)


def run_with_torch_xla(graph_module: Any, *args: Any) -> list[np.ndarray]:
    """Runs an export with torch_xla itself (StableHLOGraphModule.__call__, i.e. _XLAC._run_stablehlo);
    the outputs flattened as torch.utils._pytree flattens the model's return value."""
    import torch  # as in from_graph_module
    import torch_xla

    from torch_xla_ext._compat import pytree  # imports torch, as above

    device = torch_xla.device()
    res = graph_module(*[torch.as_tensor(a).to(device) if isinstance(a, np.ndarray) or torch.is_tensor(a) else a
                         for a in args])
    return [_dtypes.numpy_from_tensor(r) for r in pytree.tree_leaves(res)]


def is_saved_dir(path: str) -> bool:
    """Whether `path` looks like torch_xla's save_as_stablehlo output (a functions/ folder)."""
    return os.path.isdir(os.path.join(path, "functions"))


def read_saved_dir(path: str, load_npy) -> TorchXlaExport:
    """Reads a save_as_stablehlo directory without importing torch or unpickling anything.

    Layout (torch_xla/stablehlo.py, _save_program_bundle): functions/<name>.meta (JSON),
    functions/<name>.bytecode (VHLO portable artifact), functions/<name>.mlir (text, optional),
    data/<state_dict key> and constants/<i> (np.save'd, no extension). `load_npy(path, field)` reads
    one array and raises a typed error naming the file.
    """
    fdir = os.path.join(path, "functions")
    metas = sorted(n for n in os.listdir(fdir) if n.endswith(".meta"))
    if not metas:
        raise NotFoundError(f"{fdir}: no <name>.meta file")
    name = "forward" if "forward.meta" in metas else metas[0][: -len(".meta")]
    meta_path = os.path.join(fdir, name + ".meta")
    try:
        meta = json.loads(_read(meta_path).decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise InvalidArgumentError(f"{meta_path}: not JSON ({type(e).__name__}: {e})") from None
    text = None
    bytecode = None
    text_path = os.path.join(fdir, name + ".mlir")
    if os.path.exists(text_path):
        try:
            text = _read(text_path).decode("utf-8")
        except UnicodeDecodeError as e:
            raise InvalidArgumentError(f"{text_path}: not UTF-8 text ({e})") from None
    bc_path = os.path.join(fdir, name + ".bytecode")
    if os.path.exists(bc_path):
        bytecode = _read(bc_path)
    if text is None and bytecode is None:
        raise NotFoundError(f"{fdir}: neither {name}.mlir nor {name}.bytecode")
    # The text is read when it parses; the caller falls back to the bytecode when it does not
    # (torch_xla prints MLIR debug info as bare string locations, which MLIR cannot parse back).
    state: dict[str, np.ndarray] = {}
    ddir = os.path.join(path, "data")
    if os.path.isdir(ddir):
        for key in sorted(os.listdir(ddir)):
            state[key] = load_npy(os.path.join(ddir, key), f"data/{key}")
    consts = []
    cdir = os.path.join(path, "constants")
    if os.path.isdir(cdir):
        keys = sorted(os.listdir(cdir), key=lambda k: int(k) if k.isdigit() else -1)
        for key in keys:
            if not key.isdigit():
                raise InvalidArgumentError(f"{os.path.join(cdir, key)}: constant files are named by index")
            consts.append(load_npy(os.path.join(cdir, key), f"constants/{key}"))
    return _from_meta(meta, text, state, consts, bytecode, where=meta_path, bytecode_path=bc_path)


def _read(path: str) -> bytes:
    """A file's bytes; a directory or a symlink loop in its place is an InvalidArgumentError naming it."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise
    except OSError as e:
        raise InvalidArgumentError(f"{path}: unreadable ({e.strerror or e})") from None
