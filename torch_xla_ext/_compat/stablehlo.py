"""The one place that knows torch_xla's StableHLO export internals (torch_xla.stablehlo) and its
collective entry points (torch_xla.core.xla_model / _XLAC), for torch_xla 2.9.

Everything else in torch_xla_ext works from the plain data returned here.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from typing import Any, Callable

import numpy as np

from torch_xla_ext.errors import InternalError, UnimplementedError


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


# MLIR's bytecode reader and printer recurse once per level of type/attribute nesting, and crash
# (SIGSEGV) on some corrupt artifacts: deserializing runs in a reader process of its own (a
# subprocess of this Python, not a fork beside JAX's threads), on a thread with a big stack, so a
# crash, a stack overflow or a hang there is a typed error here. The process is started at the first
# artifact and kept for the next ones (the first request imports jaxlib's MLIR, ~1 s).
_READER_STACK_BYTES = 1 << 30


def portable_artifact_to_text(data: bytes, path: str, timeout: float = 120.0) -> str:
    """The module of a StableHLO portable artifact, as text. MLIR's bytecode reader can crash
    (SIGSEGV) on corrupt input, so it runs in a reader process; a crash, a hang or a rejection
    is a ValueError naming `path`."""
    kind, payload = _READER.request(data, path, timeout)
    if kind == "ok":
        return payload
    if kind == "error":
        raise ValueError(f"{path}: not a StableHLO portable artifact ({payload})")
    raise ValueError(f"{path}: not a StableHLO portable artifact (the bytecode reader {payload})")


class _ReaderProcess:
    """One reader process (``python -c ... _serve``) and the two pipes to it, restarted after a
    crash or a timeout. Messages are ``multiprocessing.connection`` frames of raw bytes (never
    pickles): a request is 8 bytes of stack size then the artifact; a reply is a tag byte (T: text,
    E: ValueError's message, X: another exception) then UTF-8."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: Any = None
        self._conn: Any = None
        self._pid = -1  # the process that started it (a forked copy of this object starts its own)

    def request(self, data: bytes, path: str, timeout: float) -> tuple[str, str]:
        """("ok", text), ("error", message) or ("crashed", how)."""
        request = _READER_STACK_BYTES.to_bytes(8, "little") + data
        with self._lock:
            for attempt in (0, 1):
                if self._proc is None or self._pid != os.getpid() or self._proc.poll() is not None:
                    self._start(path)
                try:
                    self._conn.send_bytes(request)
                except OSError:  # it had died before this artifact: a new reader gets it once more
                    self._stop()
                    if attempt:
                        raise InternalError(f"{path}: the bytecode reader process does not take requests") from None
                    continue
                try:
                    if not self._conn.poll(timeout):
                        self._stop(kill=True)
                        return "crashed", f"did not finish in {timeout:g} s"
                    reply = self._conn.recv_bytes()
                except (EOFError, OSError):  # it died reading this artifact
                    return "crashed", self._stop()
                break
        tag, body = reply[:1], reply[1:].decode("utf-8", "surrogateescape")
        return ("ok" if tag == b"T" else "error" if tag == b"E" else "crashed"), body

    def _start(self, path: str) -> None:
        import subprocess
        import sys
        from multiprocessing.connection import Connection

        to_child, from_parent = os.pipe()
        to_parent, from_child = os.pipe()
        env = dict(os.environ)
        # The child imports this package from where this process did (tests put it on sys.path);
        # -P keeps the working directory off its sys.path, so another checkout there is not it.
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # above torch_xla_ext/
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        env.pop("PYTHONFAULTHANDLER", None)  # an expected crash is reported here, not dumped there
        try:
            self._proc = subprocess.Popen(
                [sys.executable, *(["-P"] if sys.version_info >= (3, 11) else []), "-c",
                 "import sys; from torch_xla_ext._compat import stablehlo; "
                 "stablehlo._serve(int(sys.argv[1]), int(sys.argv[2]))", str(to_child), str(from_child)],
                pass_fds=(to_child, from_child), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, env=env)
        except OSError as e:
            os.close(to_parent)
            os.close(from_parent)
            raise InternalError(f"{path}: cannot start the bytecode reader process {sys.executable!r} ({e})") from None
        finally:
            os.close(to_child)
            os.close(from_child)
        self._conn = _Duplex(Connection(to_parent, writable=False), Connection(from_parent, readable=False))
        self._pid = os.getpid()

    def _stop(self, kill: bool = False) -> str:
        """Ends the process (``kill``: now, it hangs); how it ended (for the error)."""
        import signal
        import subprocess

        proc, self._proc = self._proc, None
        self._conn.close()
        if kill:
            proc.kill()
        try:
            code = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        if code < 0:
            try:
                return f"crashed with {signal.Signals(-code).name}"
            except ValueError:
                return f"crashed with signal {-code}"
        return f"exited with status {code} and no result"

    def forget_after_fork(self) -> None:
        """In a forked child: the parent's reader is not this process's (its lock may even be
        held by a thread the fork did not copy); the next artifact starts a reader of its own."""
        self._lock = threading.Lock()
        if self._conn is not None:
            self._conn.close()
        self._proc = self._conn = None

    def close(self) -> None:
        with self._lock:
            if self._proc is not None and self._pid == os.getpid():
                self._conn.close()  # the reader sees the end of its input and exits
                try:
                    self._proc.wait(timeout=5)
                except Exception:  # noqa: BLE001 - at exit: never hang or raise
                    self._proc.kill()
                self._proc = None


class _Duplex:
    """A reading and a writing ``Connection`` (one pipe each) as one."""

    def __init__(self, reader: Any, writer: Any) -> None:
        self.reader, self.writer = reader, writer

    def send_bytes(self, data: bytes) -> None:
        self.writer.send_bytes(data)

    def poll(self, timeout: float) -> bool:
        return self.reader.poll(timeout)

    def recv_bytes(self) -> bytes:
        return self.reader.recv_bytes()

    def close(self) -> None:
        self.reader.close()
        self.writer.close()


_READER = _ReaderProcess()


def reader_process() -> Any:
    """The artifact reader's running process (a ``subprocess.Popen``), or None before the first
    read or after it ended: for tests and diagnostics."""
    return _READER._proc


def _close_reader() -> None:
    _READER.close()


import atexit  # noqa: E402 - next to what it closes

atexit.register(_close_reader)
os.register_at_fork(after_in_child=_READER.forget_after_fork)


def _serve(read_fd: int, write_fd: int) -> None:
    """The reader process: answers requests until its input ends. It only runs MLIR's reader."""
    from multiprocessing.connection import Connection

    requests, replies = Connection(read_fd, writable=False), Connection(write_fd, readable=False)
    while True:
        try:
            request = requests.recv_bytes()
        except EOFError:
            return
        stack, data = int.from_bytes(request[:8], "little"), request[8:]
        try:
            reply = b"T" + _on_big_stack(stack, _deserialize, data).encode("utf-8", "surrogateescape")
        except ValueError as e:
            reply = b"E" + str(e).encode("utf-8", "replace")
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            reply = b"X" + f"raised {type(e).__name__}: {e}".encode("utf-8", "replace")
        replies.send_bytes(reply)


def _on_big_stack(stack_bytes: int, fn, *args):
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - re-raised on the calling thread
            out["error"] = e

    old = threading.stack_size(stack_bytes)
    try:
        thread = threading.Thread(target=run, name="txe-artifact-reader")
        thread.start()
    finally:
        threading.stack_size(old)
    thread.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def _deserialize(data: bytes) -> str:
    """In the reader process: the artifact's text; ValueError(jaxlib's message) if it is not one."""
    from torch_xla_ext._compat import jax_mlir

    try:
        return jax_mlir.portable_artifact_to_text(data)
    except RuntimeError as e:  # jaxlib's XlaRuntimeError (INVALID_ARGUMENT: failed to deserialize)
        raise ValueError(str(e)) from None


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

