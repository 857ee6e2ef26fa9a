"""JAX's MLIR and PJRT internals that have no public equivalent yet, in one place (jax/jaxlib 0.7.1,
the pin, to 0.12, the newest tested).

Public JAX/jaxlib APIs are used directly elsewhere (``jax.extend.mlir.ir``,
``jax.extend.mlir.hlo_to_stablehlo``, ``jax.extend.mlir.{de}serialize_portable_artifact``,
``jax.extend.backend``, ``jax.export``). What is here is what those lack: an MLIR context with
every dialect JAX's own lowering registers (StableHLO *and* func/chlo/sdy, which a module printed
by torch_xla needs), the bytecode writer JAX's compile path uses, StableHLO's version queries, and
a PJRT CPU client of our own (N devices, arrays placed with their dtype kept), so running a module
neither depends on nor changes the process's JAX configuration (``jax_enable_x64``,
``jax_num_cpu_devices``, ``jax_platforms``).
"""

from __future__ import annotations

import re
import threading
from typing import Any, Sequence

import numpy as np


# How MLIR's parser names a dialect it does not have (pt2e exports use `quant`, for example):
# `!"quant"<...>` type created with unregistered dialect; 'quant.qcast' op ... unregistered
# dialect; Dialect `quant' not found for custom op.
_DIALECT_ERRORS = (
    re.compile(r"[!#]\"?([A-Za-z_]\w*)\"?[<.]"),
    re.compile(r"'([A-Za-z_]\w*)\.[\w.]+' op"),
    re.compile(r"[Dd]ialect [`'\"]([A-Za-z_]\w*)[`'\"]"),
)


def unknown_dialect(message: str) -> str | None:
    """The dialect an MLIR parse error says is unregistered, if it says so."""
    if "unregistered dialect" not in message and not re.search(r"[Dd]ialect .* not found", message):
        return None
    for pattern in _DIALECT_ERRORS:
        m = pattern.search(message)
        if m:
            return m.group(1)
    return None


def isa(value: Any, cls: type) -> bool:
    """Whether an MLIR type or attribute is a ``cls`` (``ir.RankedTensorType``, ``ir.FloatAttr``):
    jaxlib up to 0.8 has ``cls.isinstance(value)`` (values come back as the generic ``ir.Type``);
    later jaxlibs return the concrete class and dropped that method, so ``isinstance`` works."""
    check = getattr(cls, "isinstance", None)
    return bool(check(value)) if check is not None else isinstance(value, cls)


def bool_elements_attr(values: np.ndarray, element_type: Any, shape: list[int]) -> Any:
    """A DenseElementsAttr of i1 ``element_type`` holding the bools ``values`` (inside a context).
    jaxlib up to 0.8 reads i1 buffers bit-packed (little bit order; a one-element buffer must be
    a splat byte, 0x00 or 0xFF); later ones read one byte per element. Which one is probed once:
    an unpacked two-element buffer is the wrong size for the packed reader, which refuses it."""
    from jax.extend.mlir import ir

    flat = np.ascontiguousarray(values, dtype=np.bool_).reshape(-1)
    if _bools_unpacked(element_type):
        return ir.DenseElementsAttr.get(flat, type=element_type, shape=shape)
    packed = np.packbits(flat, bitorder="little")
    if flat.size == 1:
        packed = np.array(0xFF if flat[0] else 0, np.uint8)
    return ir.DenseElementsAttr.get(packed, type=element_type, shape=shape)


_UNPACKED_BOOLS: list[bool] = []


def _bools_unpacked(element_type: Any) -> bool:
    if not _UNPACKED_BOOLS:
        from jax.extend.mlir import ir

        try:
            ir.DenseElementsAttr.get(np.array([True, False]), type=element_type, shape=[2])
            _UNPACKED_BOOLS.append(True)
        except ValueError:
            _UNPACKED_BOOLS.append(False)
    return _UNPACKED_BOOLS[0]


def isa_check(cls: type) -> Any:
    """``lambda value: isa(value, cls)``, resolved once (for loops over every value of a module)."""
    check = getattr(cls, "isinstance", None)
    return check if check is not None else (lambda value: isinstance(value, cls))


def is_dense_resource(value: Any) -> bool:
    """Whether an attribute is a ``DenseResourceElementsAttr``: jaxlib up to 0.8 has
    ``isinstance``; later ones neither have it nor downcast this attribute, so a cast is tried
    (after the dense case, whose failed cast would print every element into its message)."""
    from jax.extend.mlir import ir

    check = getattr(ir.DenseResourceElementsAttr, "isinstance", None)
    if check is not None:
        return bool(check(value))
    if isinstance(value, ir.DenseElementsAttr):
        return False
    try:
        ir.DenseResourceElementsAttr(value)
    except ValueError:
        return False
    return True


def make_context() -> Any:
    """A fresh MLIR context with the dialects of JAX's lowering (StableHLO, CHLO, func, Shardy).
    jax 0.12's ``make_ir_context`` hands a thread's context out up to ten times, where a module
    parsed before keeps its resource names (a second ``dense_resource<x>`` becomes ``x_1``); its
    ``_create_ir_context`` makes a new one, as ``make_ir_context`` did before."""
    from jax._src.interpreters import mlir as jmlir

    create = getattr(jmlir, "_create_ir_context", None)
    return create() if create is not None else jmlir.make_ir_context()


def module_to_bytecode(module: Any) -> bytes:
    """MLIR bytecode of ``module`` as JAX hands it to PJRT's ``compile``."""
    from jax._src.interpreters import mlir as jmlir

    return jmlir.module_to_bytecode(module)


def portable_artifact_to_text(data: bytes) -> str:
    """The module of a StableHLO portable artifact as text. jaxlib up to 0.8 returns the text;
    later ones return an ``ir.Module`` in the context given (one of our own here).
    Raises RuntimeError (jaxlib's message) for bytes it cannot read."""
    from jax.extend import mlir as jmlir

    ctx = make_context()
    with ctx:
        out = jmlir.deserialize_portable_artifact(data)
        return out if isinstance(out, str) else str(out)


# ---- StableHLO versions -----------------------------------------------------------------------


def stablehlo_current_version() -> str:
    """The StableHLO version this jaxlib writes by default (e.g. "1.13.0")."""
    from jax._src.lib.mlir.dialects import hlo

    return hlo.get_current_version()


def stablehlo_export_target_version() -> str:
    """The StableHLO version ``jax.export`` serializes for (about 4 weeks old, so consumers that
    update monthly can read it); the same rule jax.export applies to its own modules."""
    from jax._src.lib.mlir.dialects import hlo

    if hlo.get_api_version() < 9:
        return hlo.get_minimum_version()
    return hlo.get_version_from_compatibility_requirement(hlo.StablehloCompatibilityRequirement.WEEK_4)


# ---- a PJRT CPU client of our own -------------------------------------------------------------

_CLIENTS: dict[int, Any] = {}
_CLIENTS_LOCK = threading.Lock()


def cpu_client(num_devices: int) -> Any:
    """A PJRT CPU client with exactly ``num_devices`` devices, made once per count and kept for
    the process. It is not JAX's default backend: ``jax.devices()`` and the user's JAX config
    are untouched, and buffers placed on it keep their dtype whatever ``jax_enable_x64`` says."""
    from jax._src.lib import xla_client as xc

    with _CLIENTS_LOCK:
        if num_devices not in _CLIENTS:
            _CLIENTS[num_devices] = xc.make_cpu_client(num_devices=num_devices)
        return _CLIENTS[num_devices]


# XLA:CPU's scheduler that runs independent ops as early as it can (its default) also converts
# every weight of a narrow-float program to f32 at the start, each into a buffer of its own: at 0.9B
# parameters 3.4 GB of fresh pages per execution. The memory-minimising schedule converts each
# right before its use, into reused buffers. The schedule changes no arithmetic.
_MEMORY_SCHEDULE = ("xla_cpu_enable_concurrency_optimized_scheduler", False)


def compile_replicated(client: Any, bytecode: bytes, num_replicas: int, *, optimize: bool = True,
                       memory_schedule: bool = False) -> Any:
    """Compiles MLIR bytecode for ``num_replicas`` replicas (one partition) on the client's first
    ``num_replicas`` devices; ``optimize=False`` compiles with LLVM's optimization level 0 (several
    times faster to compile); ``memory_schedule`` schedules for memory rather than concurrency
    (where the jaxlib has that option). Raises RuntimeError (XLA's message) when XLA cannot
    compile it."""
    from jax._src.lib import xla_client as xc

    devices = client.devices()[:num_replicas]
    overrides = [("xla_backend_optimization_level", 0)] if not optimize else []
    if memory_schedule:
        overrides.append(_MEMORY_SCHEDULE)

    def compiled(overrides: list) -> Any:
        opts = xc.CompileOptions()
        opts.num_replicas = num_replicas
        opts.num_partitions = 1
        opts.device_assignment = xc.DeviceAssignment.create(np.arange(num_replicas).reshape(num_replicas, 1))
        if overrides:
            opts.env_option_overrides = overrides
        return client.compile_and_load(bytecode, xc.DeviceList(tuple(devices)), opts)

    try:
        try:
            return compiled(overrides)
        except xc.XlaRuntimeError as e:
            if memory_schedule and f"No such compile option: '{_MEMORY_SCHEDULE[0]}'" in str(e):
                return compiled([o for o in overrides if o != _MEMORY_SCHEDULE])
            raise
    except xc.XlaRuntimeError as e:
        raise RuntimeError(str(e)) from None


def _place(client: Any, value: np.ndarray, device: Any) -> Any:
    """``value`` on ``device`` with its dtype kept whatever ``jax_enable_x64`` says. jaxlib up to
    0.8 has the client's ``buffer_from_pyval``; later ones dropped it, and their
    ``batched_device_put`` takes ``enable_x64`` per call instead."""
    put = getattr(client, "buffer_from_pyval", None)
    if put is not None:
        return put(value, device)
    from jax._src import core
    from jax._src.lib import xla_client as xc
    from jax.sharding import SingleDeviceSharding

    aval = core.ShapedArray(value.shape, value.dtype)
    return xc.batched_device_put(aval, SingleDeviceSharding(device), [value], [device], True, enable_x64=True)


def execute_on_device(client: Any, executable: Any, args: Sequence[Any]) -> list[Any]:
    """Runs ``executable`` on the client's first device with ``args`` (numpy arrays, placed as
    ``execute_replicated`` places them, or arrays this function returned before) and returns its
    outputs as device arrays, to pass on to another executable or read with ``np.asarray``."""
    device = client.devices()[0]
    placed = [_place(client, a, device) if isinstance(a, np.ndarray) else a for a in args]
    outs = executable.execute_sharded(placed).disassemble_into_single_device_arrays()
    return [o[0] for o in outs]


def execute_replicated(client: Any, executable: Any,
                       per_replica: Sequence[Sequence[np.ndarray]]) -> list[list[np.ndarray]]:
    """Runs ``executable`` with replica r's arguments ``per_replica[r]`` on device r; returns the
    outputs per replica as numpy arrays. Arguments are placed with their dtype (``_place``; JAX's
    ``device_put`` would narrow int64/float64 with x64 off)."""
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    n = len(per_replica)
    if n == 1:
        return [[np.asarray(o) for o in execute_on_device(client, executable, per_replica[0])]]
    devices = client.devices()[:n]
    buffers = [[_place(client, a, devices[r]) for a in args] for r, args in enumerate(per_replica)]
    # One array per argument whose shard on device r is replica r's value (pmap's layout).
    replicated = NamedSharding(Mesh(np.array(devices), ("replica",)), PartitionSpec())
    args = [jax.make_array_from_single_device_arrays(buffers[0][k].shape, replicated,
                                                      [buffers[r][k] for r in range(n)])
            for k in range(len(buffers[0]))]
    outs = executable.execute_sharded(args).disassemble_into_single_device_arrays()
    return [[np.asarray(o[r]) for o in outs] for r in range(n)]
