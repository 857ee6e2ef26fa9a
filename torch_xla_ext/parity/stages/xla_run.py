"""Stage 3, the XLA run: ``fn`` on the XLA device in the run's dtype, and the program it ran.

Before torch_xla compiles and executes, the pending outputs' HLO is taken (with the module path
of every op when op metadata is on: :mod:`torch_xla_ext._compat.hlo_debug`) and the replays'
compile starts beside torch_xla's (``early``, see :mod:`.replays`). The program's arguments are
not copied back: the model's weights are cast again from the user's model when a replay needs
them (bit for bit what the device held); inputs and other device data are copied before the run,
which may donate their buffers.

With a recorder (``capturing.Recorder``, or ``capturing.BlockValues`` for the blocks' boundaries
alone) the run's hooks keep module tensors as lazy tensors; their values come from the rounded
replay's program, which returns them after the outputs: torch_xla compiles and executes the
outputs' program alone.

Example:
    >>> import torch
    >>> run = run_xla(torch.nn.Linear(2, 2), (torch.ones(1, 2),), {}, torch.bfloat16, 0, capture_hlo=True)
    >>> [p for p, _ in run.outputs], run.program.proto is not None
    ([''], True)

torch_xla's own modules (``torch_xla``, and ``_compat.hlo``, which imports it) are imported inside
the functions that run on XLA: importing parity, and comparing a capture on a CPU host, need torch
alone.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from torch_xla_ext import _device
from torch_xla_ext._compat import hlo_debug as _hlo_debug
from torch_xla_ext.parity import capturing
from torch_xla_ext.parity.captures import Capture
from torch_xla_ext.parity.casts import cast_on_cpu, move, prepare, to_numpy
from torch_xla_ext.parity.errors import HloCaptureError, ParityError
from torch_xla_ext.parity.leaves import float_leaves
from torch_xla_ext.parity.pipeline import END, Outcome, Stage
from torch_xla_ext.parity.program.replay import LazyArgs
from torch_xla_ext.parity.record import ProgramRun, RunRecord, XlaRun
from torch_xla_ext.parity.user_code import UserFailure, call

__all__ = ["SAME_SHAPES", "capture", "program_of", "run_xla", "stage"]


class _Recast:
    """One argument of the XLA run's program made again when needed: ``original`` (the user's
    tensor, which stays) cast exactly as :func:`~torch_xla_ext.parity.casts.prepare` cast it for
    the run, so bit for bit what the device held."""

    def __init__(self, original: Any, dtype: Any):
        self.original, self.dtype = original, dtype

    def __call__(self) -> Any:
        return to_numpy(cast_on_cpu(self.original, self.dtype))


def run_xla(fn: Any, args: tuple, kwargs: dict, dtype: Any, seed: int, capture_hlo: bool,
            on_program: Callable[..., Any] | None = None, *, run: Callable[..., Any] = call,
            device: Any = None, stage: str = "XLA", replayed: Any = None) -> XlaRun:
    """The XLA run on ``device`` (default ``torch_xla.device()``). With ``capture_hlo`` its
    program comes with it (``XlaRun.program``), and ``on_program(program)`` gets it as soon as it
    exists, before torch_xla compiles and executes it. ``run(stage, model, args, kwargs)`` calls
    the prepared model (:func:`~torch_xla_ext.parity.user_code.call`, or a recorder). ``replayed``:
    a recorder whose tensors are not computed by this run but go into the program's
    ``capture_proto`` for the rounded replay (``device_values``, ``cuts``, ``release``)."""
    import torch_xla  # torch_xla: only where the run is on XLA (the module docstring)
    import torch_xla.core.xla_model as xm

    device = torch_xla.device() if device is None else device
    torch.manual_seed(seed)
    xm.set_rng_state(seed)
    with torch.no_grad():
        pairs: list = []
        model = prepare(fn, device, dtype, made=pairs)
        a, k = move(args, device, dtype), move(kwargs, device, dtype)
        with _hlo_debug.module_scopes(model if capture_hlo else None):  # module paths in the HLO
            out = run(stage, model, a, k)
    leaves = float_leaves(out, "fn")
    program = module_paths = None
    if capture_hlo:
        # Before sync: afterwards the outputs are device data and the graph is gone.
        tensors = [t for _, t in leaves]
        try:
            program, module_paths = program_of(tensors, pairs, dtype)
            extra = replayed.device_values(device) if replayed is not None else []
            if extra:
                with_extra, _ = program_of(tensors + extra, pairs, dtype)
                program.capture_proto, program.capture_args = with_extra.proto, with_extra.args
                del with_extra
            del extra
        except (RuntimeError, ValueError) as e:  # torch_xla's own error types
            program = ProgramRun(None, None, str(HloCaptureError(
                f"torch_xla could not give the HLO of the XLA run: {type(e).__name__}: {e}")))
    if replayed is not None:
        replayed.release()  # its device tensors die here: the sync below runs the outputs' program
    if program is not None and program.proto is not None and on_program is not None:
        on_program(program)
    try:
        torch_xla.sync()
        outputs = [(p, t.cpu()) for p, t in leaves]
    except RuntimeError as e:  # torch_xla failed to execute the user's program
        raise UserFailure(stage, e) from e
    del pairs, model
    return XlaRun(outputs, program, module_paths)


def capture(model: Any, inputs: tuple, kwargs: dict, dtype: Any, seed: int, device: Any = None, *,
            program: bool = False) -> Capture:
    """The XLA run of ``model`` with hooks on every submodule: its capture, every module call's
    tensors computed by torch_xla (one sync) and copied to the CPU; with ``program``, the program
    the device ran and its arguments too (what a capture file keeps). What the model raises
    propagates as a UserFailure at "XLA capture"."""
    recorder = capturing.Recorder()
    run = run_xla(model, inputs, kwargs, dtype, seed, program, run=recorder, device=device, stage="XLA capture")
    cap = recorder.capture(run.outputs, dtype, device)
    capturing.keep_program(cap, run.program)
    del run
    return cap


def program_of(tensors: list, pairs: list, dtype: Any) -> tuple[ProgramRun, dict[str, str] | None]:
    """The program of the pending XLA ``tensors`` (taken before torch_xla runs it) and its
    arguments, and the HLO instruction -> module path table of its op metadata (None without).
    The arguments of the program (the device data it reads), in its order: the model's weights
    (``pairs``: (device tensor, the user's tensor), as ``casts.prepare`` made them) are made
    again for the replays from the user's model; copying them back now would hold a copy through
    torch_xla's compile and execution (the run's peak at real sizes). Anything else is copied
    now: the run may donate its buffer. torch_xla's own errors (RuntimeError, ValueError) raise."""
    from torch_xla_ext._compat import hlo as _hlo  # imports torch_xla (the module docstring)

    proto, module_paths = _hlo_debug.split_metadata(_hlo.lowered_hlo_proto(tensors))
    origin = {_hlo.tensor_id(c): (c, o) for c, o in pairs}
    items = []
    for i, t in zip(_hlo.graph_input_ids(tensors), _hlo.graph_inputs(tensors)):
        c, o = origin.get(i, (None, None))
        same = c is not None and c.dtype == t.dtype and tuple(c.shape) == tuple(t.shape)
        items.append(_Recast(o, dtype) if same else to_numpy(t.cpu()))
    return ProgramRun(proto, LazyArgs(items)), module_paths


def stage(early: Callable[[RunRecord, ProgramRun, list[int]], None] | None = None, *, program: bool = True) -> Stage:
    """The XLA run as a stage (torch_xla's: a frontend's one seam). With ``program`` its program
    is kept (the replays, Model Explorer); ``early(record, program, cuts)`` (cuts: where the rounded
    replay may cut it) starts work on it before torch_xla runs it (the replays' compile). The
    run's hooks: a ``capturing.Recorder`` of every module call with localize (its capture's
    tensors come from the rounded replay when the replays run, else from this run), the blocks'
    boundaries alone (``capturing.BlockValues``: the rounded replay is cut there) without."""

    def run(record: RunRecord) -> None:
        r = record.request
        recorder = capturing.Recorder() if r.localize else (capturing.BlockValues() if r.emulate else None)
        replayed = recorder if r.emulate else None
        on_program = (lambda p: early(record, p, replayed.cuts)) if early is not None and r.emulate else None
        record.xla = run_xla(r.fn, r.inputs, r.kwargs, r.dtype, r.seed, program, on_program,
                             run=recorder or call, replayed=replayed)
        record.device = _device.current()
        if r.localize and not r.emulate:  # the run's one execution computed the module tensors
            record.capture = recorder.capture(record.xla.outputs, r.dtype)
        elif r.localize:
            record.recorder = recorder

    return Stage("XLA", run, reads=("request",), writes=("xla", "device", "recorder", "capture"), seconds="xla",
                 release="collect")


def _same_shapes(record: RunRecord) -> Outcome | None:
    """The same floating-point outputs on both sides. Outputs of other shapes from the same
    function end the run (XLA computed something else: FAIL, nothing else compared); from a
    separate reference, they are the caller's mismatch (ParityError)."""
    xla, cpu = record.xla.outputs, record.cpu
    paths = [p for p, _ in xla]
    if paths != [p for p, _ in cpu]:
        raise ParityError(f"fn and the reference return different floating-point outputs: {paths} vs "
                          f"{[p for p, _ in cpu]}")
    shapes = [(path or "<root>", list(a.shape), list(b.shape)) for (path, a), (_, b) in zip(xla, cpu)
              if tuple(a.shape) != tuple(b.shape)]
    if shapes and record.request.separate_reference:
        path, on_xla, on_cpu = shapes[0]
        raise ParityError(f"output {path}: fn returns shape {on_xla} on XLA, the reference {on_cpu} on the CPU")
    if shapes:
        record.shapes_differ = shapes
        return END
    return None


SAME_SHAPES = Stage("outputs' shapes", _same_shapes, reads=("request", "xla", "cpu"), writes=("shapes_differ",))
