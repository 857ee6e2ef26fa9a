"""The one place that knows torch_xla's StableHLO export internals (torch_xla.stablehlo) and its
collective entry points (torch_xla.core.xla_model / _XLAC), for torch_xla 2.9.

Everything else in torch_xla_ext works from the plain data returned here.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import warnings
from typing import Any, Callable

import numpy as np

from torch_xla_ext.errors import UnimplementedError


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


def _from_meta(meta: Any, text: str | None, state_dict, constants, bytecode=None,
               where: str = "meta", bytecode_path: str | None = None) -> TorchXlaExport:
    """Reads a StableHLOFunctionMeta (object, or the dict its JSON form loads to). A malformed
    JSON meta raises ValueError naming `where` and the field."""

    def get(obj, key, field):
        if isinstance(obj, dict):
            if key not in obj:
                raise ValueError(f"{where}: missing field '{field}'")
            return obj[key]
        if not hasattr(obj, key):
            raise ValueError(f"{where}: field '{field}' is missing (got {type(obj).__name__})")
        return getattr(obj, key)

    def items(obj, key, field):
        v = get(obj, key, field)
        if not isinstance(v, (list, tuple)):
            raise ValueError(f"{where}: field '{field}' is {type(v).__name__}, expected a list")
        return v

    def integer(v, field):
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"{where}: field '{field}' is {v!r}, expected an int")
        return v

    def shape(v, field):
        dims = items(v, "shape", field + ".shape")
        for k, s in enumerate(dims):
            if integer(s, f"{field}.shape[{k}]") < 0:
                raise ValueError(f"{where}: field '{field}.shape[{k}]' is {s}, expected >= 0")
        return list(dims)

    def string(v, field):
        if not isinstance(v, str):
            raise ValueError(f"{where}: field '{field}' is {type(v).__name__}, expected a string")
        return v

    def vtype(t, field):
        return string(t if isinstance(t, str) else getattr(t, "value", t), field)

    locations = []
    for k, loc in enumerate(items(meta, "input_locations", "input_locations")):
        f = f"input_locations[{k}]"
        locations.append(InputLocation(vtype(get(loc, "type_", f + ".type_"), f + ".type_"),
                                       integer(get(loc, "position", f + ".position"), f + ".position"),
                                       string(get(loc, "name", f + ".name"), f + ".name")))

    def sig(key):
        return [(shape(v, f"{key}[{k}]"), string(get(v, "dtype", f"{key}[{k}].dtype"), f"{key}[{k}].dtype"))
                for k, v in enumerate(items(meta, key, key))]

    unused = []
    raw_unused = get(meta, "unused_inputs", "unused_inputs") or []
    if not isinstance(raw_unused, (list, tuple)):
        raise ValueError(f"{where}: field 'unused_inputs' is {type(raw_unused).__name__}, expected a list")
    for k, pair in enumerate(raw_unused):
        f = f"unused_inputs[{k}]"
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise ValueError(f"{where}: field '{f}' is not a [location, signature] pair")
        loc, v = pair
        unused.append((integer(get(loc, "position", f + "[0].position"), f + "[0].position"),
                       shape(v, f + "[1]"), string(get(v, "dtype", f + "[1].dtype"), f + "[1].dtype")))
    return TorchXlaExport(
        text=text,
        input_locations=locations,
        input_signature=sig("input_signature"),
        output_signature=sig("output_signature"),
        unused_inputs=unused,
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
    and its lowering, in place; it sees the very ops torch_xla lowers, at no second decomposition."""
    from torch_xla import stablehlo as shlo

    options = shlo.StableHLOExportOptions()
    options.custom_ops_allowed_in_graph = set(custom_ops_allowed_in_graph)
    options.export_node_metadata = export_node_metadata
    if after_decompositions is None:
        gm = shlo.exported_program_to_stablehlo(exported_program, options)
    else:
        decompose = shlo._run_decompositions

        def decompose_then_edit(program):
            decomposed = decompose(program)
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
    return out


def from_graph_module(gm: Any) -> TorchXlaExport:
    """The plain data of a StableHLOGraphModule (exported_program_to_stablehlo's result)."""
    bundle = gm._bundle
    if len(bundle.stablehlo_funcs) != 1:
        # exported_program_to_stablehlo writes one function ("forward"); several would need a
        # manifest per function, which the bundle format does not have.
        raise UnimplementedError(f"torch_xla produced {len(bundle.stablehlo_funcs)} functions; the bundle holds one")
    func = bundle.stablehlo_funcs[0]
    state = {k: np.asarray(v) for k, v in bundle.state_dict.items()}
    consts = [np.asarray(c) for c in bundle.additional_constants]
    return _from_meta(func.meta, func.text, state, consts, bytes(func.bytecode))


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
    import torch
    import torch_xla

    device = torch_xla.device()
    res = graph_module(*[torch.as_tensor(a).to(device) if isinstance(a, np.ndarray) or torch.is_tensor(a) else a
                         for a in args])
    return [r.cpu().numpy() for r in torch.utils._pytree.tree_leaves(res)]


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
        raise FileNotFoundError(f"{fdir}: no <name>.meta file")
    name = "forward" if "forward.meta" in metas else metas[0][: -len(".meta")]
    meta_path = os.path.join(fdir, name + ".meta")
    try:
        meta = json.loads(_read(meta_path).decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise ValueError(f"{meta_path}: not JSON ({type(e).__name__}: {e})") from None
    text = None
    bytecode = None
    text_path = os.path.join(fdir, name + ".mlir")
    if os.path.exists(text_path):
        try:
            text = _read(text_path).decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"{text_path}: not UTF-8 text ({e})") from None
    bc_path = os.path.join(fdir, name + ".bytecode")
    if os.path.exists(bc_path):
        bytecode = _read(bc_path)
    if text is None and bytecode is None:
        raise FileNotFoundError(f"{fdir}: neither {name}.mlir nor {name}.bytecode")
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
                raise ValueError(f"{os.path.join(cdir, key)}: constant files are named by index")
            consts.append(load_npy(os.path.join(cdir, key), f"constants/{key}"))
    return _from_meta(meta, text, state, consts, bytecode, where=meta_path, bytecode_path=bc_path)


def _read(path: str) -> bytes:
    """A file's bytes; a directory or a symlink loop in its place is a ValueError naming it."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise
    except OSError as e:
        raise ValueError(f"{path}: unreadable ({e.strerror or e})") from None


# MLIR's bytecode reader and printer recurse once per level of type/attribute nesting, so a
# crafted artifact overflows the stack (a segfault, not an exception). Deserialize on a thread
# with a big stack, and refuse artifacts with more type/attribute entries than that stack can
# nest (nesting depth <= number of entries, each level being a distinct entry). The reader also
# crashes on some corrupt artifacts, so it runs in a forked child (_in_child).
_READER_STACK_BYTES = 1 << 30
_MAX_ATTR_TYPE_ENTRIES = 250_000


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """MLIR bytecode's prefix varint: trailing zeros of the first byte + 1 = its length in bytes."""
    first = data[pos]
    if first == 0:
        return int.from_bytes(data[pos + 1:pos + 9], "little"), pos + 9
    n = (first & -first).bit_length()
    return int.from_bytes(data[pos:pos + n], "little") >> n, pos + n


def _attr_type_entries(data: bytes) -> int | None:
    """numAttrs + numTypes from the bytecode's AttrTypeOffset section; None if not found (the
    reader then reports the malformed artifact itself)."""
    try:
        if data[:4] != b"ML\xefR":
            return None
        _, pos = _varint(data, 4)                  # version
        pos = data.index(b"\0", pos) + 1           # producer string
        while pos < len(data):
            code = data[pos]
            length, pos = _varint(data, pos + 1)
            if code & 0x80:                        # aligned section: alignment, then padding
                align, pos = _varint(data, pos)
                while align and pos % align and pos < len(data) and data[pos] == 0xCB:
                    pos += 1
            if code & 0x7F == 3:                   # kAttrTypeOffset
                num_attrs, p = _varint(data, pos)
                num_types, _ = _varint(data, p)
                return num_attrs + num_types
            pos += length
    except (IndexError, ValueError):
        return None
    return None


def portable_artifact_to_text(data: bytes, path: str, timeout: float = 120.0) -> str:
    """The module of a StableHLO portable artifact, as text. MLIR's bytecode reader can crash
    (SIGSEGV) on corrupt input, so it runs in a forked child; a crash, a hang or a rejection
    is a ValueError naming `path`."""
    entries = _attr_type_entries(data)
    if entries is not None and entries > _MAX_ATTR_TYPE_ENTRIES:
        raise ValueError(f"{path}: {entries} attribute/type entries; more than {_MAX_ATTR_TYPE_ENTRIES} "
                         f"could nest deeper than the reader's stack")
    kind, payload = _in_child(lambda: _on_big_stack(_deserialize, data, path), timeout)
    if kind == "ok":
        return payload
    if kind == "error":
        raise ValueError(payload)
    raise ValueError(f"{path}: not a StableHLO portable artifact (the bytecode reader {payload})")


def _in_child(fn, timeout: float) -> tuple[str, str]:
    """Runs `fn() -> str` in a forked child: ("ok", result), ("error", str(ValueError)) or
    ("crashed", how). The child only runs MLIR code, never the XLA runtime."""
    import select
    import signal
    import time

    r, w = os.pipe()
    with warnings.catch_warnings():
        # JAX warns that fork and its threads may deadlock; the child runs only MLIR's reader
        # (no XLA runtime), and a hang is bounded by `timeout` anyway.
        warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
        pid = os.fork()
    if pid == 0:  # child: never returns
        try:
            os.close(r)
            import faulthandler

            faulthandler.disable()  # an expected crash is reported by the parent, not dumped here
            try:
                payload = b"T" + fn().encode("utf-8", "surrogateescape")
            except ValueError as e:
                payload = b"E" + str(e).encode("utf-8", "replace")
            except BaseException as e:  # noqa: BLE001 - reported to the parent
                payload = b"X" + f"raised {type(e).__name__}: {e}".encode("utf-8", "replace")
            view = memoryview(payload)
            while view:
                view = view[os.write(w, view):]
        finally:
            os._exit(0)
    os.close(w)
    chunks, deadline, timed_out = [], time.monotonic() + timeout, False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([r], [], [], left)[0]:
                timed_out = True
                os.kill(pid, signal.SIGKILL)
                break
            chunk = os.read(r, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(r)
        _, status = os.waitpid(pid, 0)
    if timed_out:
        return "crashed", f"did not finish in {timeout:g} s"
    if os.WIFSIGNALED(status):
        return "crashed", f"crashed with {signal.Signals(os.WTERMSIG(status)).name}"
    out = b"".join(chunks)
    if not out:
        return "crashed", f"exited with status {os.waitstatus_to_exitcode(status)} and no result"
    tag, body = out[:1], out[1:].decode("utf-8", "surrogateescape")
    return ("ok" if tag == b"T" else "error" if tag == b"E" else "crashed"), body


def _on_big_stack(fn, *args):
    import threading

    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - re-raised on the calling thread
            out["error"] = e

    old = threading.stack_size(_READER_STACK_BYTES)
    try:
        thread = threading.Thread(target=run, name="txe-artifact-reader")
        thread.start()
    finally:
        threading.stack_size(old)
    thread.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def _deserialize(data: bytes, path: str) -> str:
    from torch_xla_ext._compat import jax_mlir

    try:
        return jax_mlir.portable_artifact_to_text(data)
    except RuntimeError as e:  # jaxlib's XlaRuntimeError (INVALID_ARGUMENT: failed to deserialize)
        raise ValueError(f"{path}: not a StableHLO portable artifact ({e})") from None


# --- collectives -------------------------------------------------------------------------------

REDUCE_TYPES = ("sum", "mul", "and", "or", "min", "max")  # xm.REDUCE_* values


def world_size() -> int:
    from torch_xla import runtime

    return int(runtime.world_size())


def device_type() -> str:
    """The PJRT device type of this process ("CPU", "TPU", "CUDA", ...)."""
    from torch_xla import runtime

    return str(runtime.device_type())


def c10d_all_reduce(tensor: Any, reduce_type: str) -> Any:
    """The traceable all-reduce over all replicas that xm.all_reduce uses for scale == 1.0 and
    no groups: torch.ops._c10d_functional.all_reduce with the default group ("")."""
    import torch

    return torch.ops._c10d_functional.all_reduce(tensor, reduce_type, "")


def xla_all_reduce(reduce_type: str, tensor: Any, scale: float, groups: list[list[int]]) -> Any:
    """torch_xla's own lowering with scale and replica groups (not traceable by torch.export)."""
    import torch_xla

    return torch_xla._XLAC._xla_all_reduce(reduce_type, tensor, scale, groups, True)


# ---- torch_xla's lazy trace (the export fallback, export/lazy.py) ------------------------------


def tensor_id(tensor: Any) -> int:
    """torch_xla's id of an XLA tensor: what `lazy_graph`'s parameter ids are matched against
    (the tensor that first owned a device buffer; torch_xla's own exporter matches the same way)."""
    import torch_xla

    return int(torch_xla._XLAC._xla_get_tensor_id(tensor))


def lazy_graph(tensors: list) -> tuple[list[int], list[Any], bytes]:
    """The pending lazy graph computing ``tensors``, without running it: (tensor id of the device
    data behind each HLO parameter, that data as a tensor, the HloModuleProto). Parameter i of
    the entry computation is the i-th device-data node of the same walk of the IR graph."""
    import torch_xla

    ids, values = torch_xla._XLAC._get_tensors_xla_device_data_node(list(tensors))
    proto = torch_xla._XLAC._get_xla_tensors_hlo_proto(list(tensors))
    return [int(i) for i in ids], list(values), bytes(proto)


def hlo_to_stablehlo_text(proto: bytes) -> str:
    """StableHLO text of an HloModuleProto (jaxlib's converter, XLA's own HLO importer)."""
    from jax.extend import mlir as jmlir
    from jax.extend.mlir import ir

    from torch_xla_ext._compat import jax_mlir

    bytecode = jmlir.hlo_to_stablehlo(proto)
    with jax_mlir.make_context():
        module = ir.Module.parse(bytecode)
        return module.operation.get_asm(enable_debug_info=False)


def sync_and_wait() -> None:
    """Runs every pending graph and waits for it (and every earlier execution) to finish, so
    torch_xla's execution metrics move no more until something new runs."""
    import torch_xla
    import torch_xla.core.xla_model as xm

    torch_xla.sync()
    xm.wait_device_ops()


def host_sync_counts() -> tuple[int, int]:
    """(graphs executed, device-to-host transfers) so far in this process, from torch_xla's
    metrics: a forward pass that moves either was cut into several graphs by the host."""
    import torch_xla.debug.metrics as met

    def count(name):
        data = met.metric_data(name)
        return int(data[0]) if data else 0

    return count("ExecuteTime"), count("TransferFromDeviceTime")

