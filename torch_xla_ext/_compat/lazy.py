"""torch_xla's lazy-tensor runtime (private ``_XLAC`` entry points), in one place: the step marker,
the devices and the pending graph. (Its metric registry is ``_compat/metrics.py``; IR debug,
which records each op's Python frames, is ``_compat/hlo_debug.py``.) Imports torch_xla only when a
function runs, so a module that imports this one does not start torch_xla.

* The step marker (``_XLAC._xla_step_marker``, where ``torch_xla.sync()``, ``xm.mark_step()`` and
  MpDeviceLoader's step end all land), the one place that wraps it: :func:`chain_step_marker`
  puts a stand-in in front of whatever is there now, for the rest of the process (the script
  trace's); :func:`replace_step_marker` does so until :func:`restore_step_marker` (an accounting
  region's, which may wrap the trace's stand-in and put it back).
* The pending graph of a device (every live tensor's pending IR, what a sync would compile):
  ``_XLAC._get_stablehlo([], device, [], True)`` lowers it to a StableHLO portable artifact
  without running it (:func:`pending_graph`). With IR debug on while the step was traced
  (``_compat.hlo_debug.set_ir_debug``; it does not change graph hashes) each op's location
  carries its aten op (``aten__mul``) and the Python frames that created it.
  :func:`graph_signature` reads that artifact with jaxlib's MLIR bindings. (``XLA_HLO_DEBUG`` is
  not needed for that, and setting it, even to 0, changes every graph hash torch_xla computes.)
* A thread's device ordinal (:func:`replica`) and whether the runtime has started.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from torch_xla_ext.errors import InternalError

__all__ = [
    "chain_step_marker", "default_device", "graph_signature", "pending_graph", "replace_step_marker", "replica",
    "restore_step_marker", "runtime_ordinal",
]

_tls = threading.local()
_original_step_marker: Callable[..., Any] | None = None


def _xlac() -> Any:
    import torch_xla

    return torch_xla._XLAC


def chain_step_marker(make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Replaces ``_XLAC._xla_step_marker`` with ``make(current)`` for the rest of the process."""
    x = _xlac()
    x._xla_step_marker = make(x._xla_step_marker)


def replace_step_marker(make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Replaces ``_XLAC._xla_step_marker`` (where ``torch_xla.sync()`` and ``xm.mark_step()`` end)
    with ``make(current)`` until :func:`restore_step_marker`."""
    global _original_step_marker
    if _original_step_marker is not None:
        raise InternalError("torch_xla_ext._compat.lazy.replace_step_marker: already replaced")
    x = _xlac()
    _original_step_marker = x._xla_step_marker
    x._xla_step_marker = make(_original_step_marker)


def restore_step_marker() -> None:
    """Puts back the step marker :func:`replace_step_marker` replaced."""
    global _original_step_marker
    if _original_step_marker is not None:
        _xlac()._xla_step_marker = _original_step_marker
        _original_step_marker = None


def default_device() -> str:
    return str(_xlac()._xla_get_default_device())


def replica() -> int:
    """The device ordinal of the calling thread's default XLA device (0 in a one-device process),
    asked once per thread."""
    r = getattr(_tls, "replica", None)
    if r is None:
        x = _xlac()
        r = _tls.replica = int(x._xla_get_device_ordinal(x._xla_get_default_device()))
    return r


def runtime_ordinal() -> int | None:
    """torch_xla's index of this process once its runtime started, else None (asking earlier
    would start it). A process driving several devices from threads (xmp.spawn on CPU) is one
    index; each thread's device is :func:`replica`."""
    x = _xlac()
    if not x._xla_runtime_is_initialized():
        return None
    import torch_xla.runtime as xr

    return int(xr.process_index())


def pending_graph(device: str) -> bytes:
    """The graph a sync of ``device`` would compile now, as a StableHLO portable artifact
    (lowered, not compiled or run; tensors are left as they are)."""
    return bytes(_xlac()._get_stablehlo([], device, [], True))


# ---- reading a pending graph -----------------------------------------------------------------------


def graph_signature(artifact: bytes) -> dict[str, Any]:
    """What a pending graph is made of, as plain values: ``args`` and ``results`` (MLIR types such
    as ``tensor<4x16xi64>``), ``ops`` (one ``[op, aten op, result type, frames id]`` per op of
    ``main``'s body, in order; the aten op from torch_xla's location name, "" where it has none),
    ``frames`` (the distinct Python frame lists, innermost first, each ``[file, line, function]``)
    and ``constants`` (``[op index, type, value]`` of each constant of at most 8 elements: the
    scalars torch_xla compiled into the graph)."""
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo

    from torch_xla_ext._compat import jax_mlir  # jaxlib: only this reader of torch_xla's IR needs it

    ctx = jax_mlir.make_context()
    with ctx:
        module = stablehlo.deserialize_portable_artifact(ctx, artifact)
        main = next(op for op in module.body.operations
                    if op.operation.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == "main")
        block = main.regions[0].blocks[0]
        frames_index: dict[tuple, int] = {}
        frames: list[list[list[Any]]] = []
        ops: list[list[Any]] = []
        constants: list[list[Any]] = []
        for i, op in enumerate(block.operations):
            name = op.operation.name
            aten, stack = _location(op.location)
            key = tuple(tuple(f) for f in stack)
            fid = frames_index.get(key)
            if fid is None:
                fid = frames_index[key] = len(frames)
                frames.append([list(f) for f in stack])
            rtype = str(op.results[0].type) if len(op.results) else ""
            ops.append([name, aten, rtype, fid])
            if name == "stablehlo.constant" and "value" in op.attributes:
                attr = op.attributes["value"]
                value = _small_constant(attr)
                if value is not None:
                    constants.append([i, rtype, value])
        # A live tensor that is device data already goes in and out unchanged (the pending graph of
        # every live tensor has it; a sync's graph does not): left out of both lists.
        through = [a for a in block.arguments if _only_returned(a)]
        args = [str(a.type) for a in block.arguments if a not in through]
        ret = block.operations[len(block.operations) - 1]
        results = [str(v.type) for v in ret.operands if v not in through]
    return {"args": args, "results": results, "ops": ops, "frames": frames, "constants": constants,
            "passed_through": len(through)}


def _only_returned(value: Any) -> bool:
    uses = list(value.uses)
    return bool(uses) and all(u.owner.name == "func.return" for u in uses)


def _location(loc: Any) -> tuple[str, list[list[Any]]]:
    """(aten op, frames innermost first) of a torch_xla op location: ``"aten__mul.1/aten__mul"``
    naming ``callsite("f"("file":L:C) at ...)``."""
    aten = ""
    if loc.is_a_name():
        aten = loc.name_str.rsplit("/", 1)[-1]
        loc = loc.child_loc
    out: list[list[Any]] = []
    _frames(loc, out, 0)
    return aten, out


def _frames(loc: Any, out: list[list[Any]], depth: int) -> None:
    if depth > 256:
        return
    if loc.is_a_callsite():
        _frames(loc.callee, out, depth + 1)
        _frames(loc.caller, out, depth + 1)
    elif loc.is_a_name():
        child = loc.child_loc
        if child.is_a_file():
            out.append([child.filename, int(child.start_line), loc.name_str])
        else:
            _frames(child, out, depth + 1)
    elif loc.is_a_file():
        out.append([loc.filename, int(loc.start_line), ""])
    elif loc.is_a_fused():
        for part in loc.locations:
            _frames(part, out, depth + 1)


def _small_constant(attr: Any) -> Any:
    """A constant's value when it has at most 8 elements (a splat counts as one): a number or a
    list; None for anything larger."""
    from jaxlib.mlir import ir

    try:
        dense = ir.DenseElementsAttr(attr)
    except (ValueError, TypeError):
        return None
    if dense.is_splat:
        return _scalar(dense.get_splat_value())
    if len(dense) > 8:
        return None
    for cls in (ir.DenseFPElementsAttr, ir.DenseIntElementsAttr):
        try:
            typed = cls(attr)
        except (ValueError, TypeError):
            continue
        return [typed[i] for i in range(len(typed))]
    return None


def _scalar(attr: Any) -> Any:
    from jaxlib.mlir import ir

    for cls in (ir.FloatAttr, ir.IntegerAttr, ir.BoolAttr):
        try:
            return cls(attr).value
        except (ValueError, TypeError):
            continue
    return str(attr)
