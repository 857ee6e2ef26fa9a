"""Stage 3 under the torchax frontend: the XLA run is the model under torchax's environment, on
JAX's XLA, and its program the StableHLO that run's function lowers to (``_compat/torchax_run.py``
holds torchax's side).

* **Compiled**, as ``torchax.compile`` compiles the model: ``JittableModule.functional_call`` of its
  ``forward`` under ``jax.jit``, its floating-point outputs flattened inside (a ``ModelOutput`` is no
  JAX type). The function is lowered once; that lowering is the program, and JAX compiles and runs
  it (the replays' compile starts beside JAX's, as beside torch_xla's).
* **Eager**, where ``torchax.compile`` fails on the model (transformers' masks read a tensor's value
  with ``.item()``, which a trace cannot; a tensor attribute ``.to("jax")`` does not move): torchax's
  own run without compile, op by op, the way a torchax user runs such a model, and the report says
  why (``XlaRun.how``). Its program is the same forward traced with every value the run read back
  to Python (``.item()``, ``nonzero``) taken from the run, as torch_xla's lazy trace takes a read
  value, replayed with every op's result rounded to its type (each op was its own computation).
* **x64**: with JAX's x64 mode off, the forward on the meta device says which torch calls make
  float64 or int64 tensors (:mod:`..x64`); where some make float64, the program is traced again
  with x64 on, and that wide program, with its arguments in torch's dtypes, is what the replays
  compare the run with (``XlaRun.wide``).
* **Its own rounded replay**: on JAX's CPU under XLA:CPU's rules, the compiled run of a program
  in f32/f64 is the rounded replay (``ProgramRun.rounded_by_run``: the same program, compiled by the
  replays' own XLA:CPU in this process, bit for bit), so the replays compile the unrounded replay
  alone and no capture program is traced. A bf16/f16 program's rounded replay rounds where its
  rules place the roundings, so it is compiled as before.

A model torchax cannot run at all (an op without a lowering, a CPU tensor in its math) is a
:class:`~torch_xla_ext.parity.errors.FrontendRunError` naming the model, the error and the model's
line: it ran on the CPU before.

Module tensors (localize) and the values between repeated blocks come as extra results of the same
forward traced again with the hooks (``capture_proto``), computed by the rounded replay; the eager
run records them itself.

Example:
    >>> import torch
    >>> run = run_torchax(torch.nn.Linear(2, 2), (torch.ones(1, 2),), {}, torch.float32, 0, capture_hlo=True)
    >>> [p for p, _ in run.outputs], run.program.proto.startswith("module @jit"), run.how is None
    ([''], True, True)
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch

from torch_xla_ext import _device
from torch_xla_ext._compat import torchax_run as _tx
from torch_xla_ext._compat.pytree import tree_leaves
from torch_xla_ext.errors import first_line
from torch_xla_ext.parity import capturing, memory
from torch_xla_ext.parity.captures import Capture
from torch_xla_ext.parity.casts import cast_on_cpu, move, prepare, to_numpy
from torch_xla_ext.parity.errors import FrontendRunError, ParityError
from torch_xla_ext.parity.leaves import float_leaves
from torch_xla_ext.parity.pipeline import Stage
from torch_xla_ext.parity.program.replay import LazyArgs, Widening
from torch_xla_ext.parity.program.rewrite import has_narrow_floats
from torch_xla_ext.parity.program.rules import XLA_CPU, resolve
from torch_xla_ext.parity.record import ProgramRun, RunRecord, WideProgram, XlaRun
from torch_xla_ext.parity.user_code import UserFailure, call, site, traceback_frames
from torch_xla_ext.parity.x64 import SixtyFourBit

__all__ = ["DEVICE", "OWN_REPLAY_NOTE", "capture", "origin", "run_torchax", "stage"]

DEVICE = "jax:0"  # the torch device torchax's tensors report


def origin(device: Any = None) -> tuple[dict[str, str], str, str]:
    """(info, device, device type) of a capture made through torchax."""
    return {"torchax": _tx.version()}, DEVICE, _tx.platform()


def _flattener(paths: list[str], extra: Callable[[], list] | None = None) -> Callable[[Any], list]:
    """A model's output -> its floating-point tensors (their pytree paths into ``paths``), then
    ``extra()`` (the recorded module tensors a capture program returns after them)."""

    def flatten(out: Any) -> list:
        leaves = float_leaves(out, "fn")
        paths[:] = [p for p, _ in leaves]
        return [t for _, t in leaves] + (extra() if extra is not None else [])

    return flatten


def _recorded(recorder: Any) -> Callable[..., Any]:
    """``run(model, args, kwargs)`` through a recorder of module calls (its ``__call__``)."""
    return lambda m, a, k: recorder("XLA", m, a, k)


def _plain(m: Any, a: tuple, k: dict) -> Any:
    return m(*a, **k)


class _Lazy:
    """One argument of the wide program made when the replay needs it: the user's tensor cast as
    ``casts.prepare`` casts it for the run, in torch's own dtype."""

    def __init__(self, original: Any, dtype: Any):
        self.original, self.dtype = original, dtype

    def __call__(self) -> Any:
        return to_numpy(cast_on_cpu(self.original, self.dtype))


def _module_paths(model: Any) -> dict[int, str]:
    """{id(submodule): its path} of a module (nothing for a function): how a site names its module."""
    return {id(m): p for p, m in model.named_modules()} if isinstance(model, torch.nn.Module) else {}


def _why(error: BaseException, model: Any) -> str:
    """What torchax raised on the model and where: the error's first line, the module and the
    model's line that was running."""
    modules = _module_paths(model)
    module, source, text = site(traceback_frames(error), modules)
    where = ", ".join(w for w in (f"in {module or '<root>'}" if module is not None else None,
                                  f"at {source}" + (f" `{text}`" if text else "") if source else None) if w)
    return f"{first_line(error, with_type=True)}" + (f" ({where})" if where else "")


def run_torchax(fn: Any, args: tuple, kwargs: dict, dtype: Any, seed: int, capture_hlo: bool,
                on_program: Callable[..., Any] | None = None, *, recorder: Any = None, replayed: Any = None,
                stage: str = "XLA", own_replay: bool = False, share_weights: bool = False) -> XlaRun:
    """The run of ``fn`` through torchax (module docstring). With ``capture_hlo`` its program (and,
    with JAX's x64 mode off, the wide program) comes with it; ``on_program(program)`` gets it before
    JAX compiles it. ``recorder``: records every module call (capturing.Recorder): from the eager
    run's values, or, on the compiled path, as extra results of a capture program the rounded
    replay computes when it is also ``replayed`` (capturing.Recorder, or BlockValues for the
    blocks' boundaries alone). ``own_replay``: a compiled run of a program without narrow floats is
    its own rounded replay (``ProgramRun.rounded_by_run``; the caller knows the rules are XLA:CPU's
    on JAX's CPU), so no capture program is traced for it. ``share_weights``: the exact replay's
    float64 copies of the weights are kept for the fp64 golden of the same model
    (``ProgramRun.widened_parameters``)."""
    torch.manual_seed(seed)
    _tx.seed(seed)
    with torch.no_grad():
        model = prepare(fn, "cpu", dtype)
        a, k = move(args, "cpu", dtype), move(kwargs, "cpu", dtype)
        like = (prepare(fn, "meta", dtype), move(args, "meta", dtype), move(kwargs, "meta", dtype))
        model, a, k = _tx.to_jax(model), _tx.to_jax(a), _tx.to_jax(k)
        paths: list[str] = []
        flatten = _flattener(paths)
        program: ProgramRun | None = None
        how = None
        reads = None  # the values the eager run read back to Python (None: the compiled run)

        widening: Widening | None = None

        def arguments(arrays: list) -> None:
            nonlocal widening
            # The exact replay follows the run of its own rounded replay: its f64 copies of the
            # weights are made beside the trace.
            if memory.fits_ahead(sum(a.size for a in arrays) * 8):
                widening = Widening(arrays, keep=share_weights)

        def lowered(lowering: _tx.Lowering, reads: Any = None, excess_precision: bool = True) -> None:
            nonlocal program, widening
            # The compiled run's program (an eager run rounds every op), in f32/f64: a narrow float's
            # rounded replay rounds where its rules say, which XLA:CPU itself need not.
            own = own_replay and excess_precision and not has_narrow_floats(lowering.text)
            if widening is not None and not own:  # its unrounded replay is not the f64 one of a run's own
                widening.cancel()
                widening = None
            program = ProgramRun(lowering.text, list(lowering.args), excess_precision=excess_precision,
                                 rounded_by_run=own, widening=widening, labels=list(lowering.order) or None)
            widening = None
            if replayed is not None and not own:  # the module tensors (or the blocks' boundaries) as extra results
                hooked = _tx.lower(model, a, k, _flattener([], lambda: replayed.device_values(DEVICE)), reads=reads,
                                   run=_recorded(replayed))
                replayed.release()
                program.capture_proto, program.capture_args = hooked.text, LazyArgs(list(hooked.args))
            if on_program is not None:
                on_program(program)

        eager_run = recorder is not None and replayed is None  # the module tensors from the run itself
        try:
            if eager_run:
                raise _Eager("the module tensors come from torchax's eager run (hooks inside a compiled function "
                             "see no values)")
            outputs, _ = _tx.compiled_forward(model, a, k, flatten,
                                              on_lowered=lowered if capture_hlo else None,
                                              on_arguments=arguments if capture_hlo and own_replay else None)
        except _Eager:
            outputs = None
        except Exception as e:  # noqa: BLE001 - torchax or JAX tracing the user's model: the eager run instead, the reason reported
            if widening is not None:
                widening.cancel()
                widening = None
            outputs, program = None, None
            how = (f"torchax's eager run (op by op): torchax.compile fails on {type(fn).__name__}: "
                   f"{_why(e, model)}")
        if outputs is not None:
            outputs = [(p, _tx.to_cpu(t)) for p, t in zip(paths, outputs)]
        else:
            reads = _tx.Reads()
            try:
                out = _tx.eager(model, a, k, reads,
                                (lambda m, a_, k_: recorder(stage, m, a_, k_)) if recorder is not None
                                else _run_eager(stage))
            except UserFailure as f:
                raise FrontendRunError(f"torchax cannot run {type(fn).__name__} (it ran on the CPU): "
                                       f"{_why(f.error, model)}") from f.error
            outputs = [(p, _tx.to_cpu(t)) for p, t in float_leaves(out, "fn")]
            del out
            if capture_hlo:
                try:
                    lowered(_tx.lower(model, a, k, _flattener([]), reads=reads), reads, excess_precision=False)
                except Exception as e:  # noqa: BLE001 - the trace of the user's model failed: replays unavailable, said
                    program = ProgramRun(None, None, f"torchax's eager run could not be traced as one program: "
                                                     f"{_why(e, model)}")
        wide = _wide(fn, model, a, k, like, (args, kwargs), dtype, reads) if (
            capture_hlo and program is not None and program.proto is not None and not _tx.x64_enabled()) else None
    return XlaRun(outputs, program, None, how, wide)


class _Eager(Exception):
    """The compiled path is not taken (the run must record module tensors eagerly)."""


def _run_eager(stage: str) -> Callable[..., Any]:
    return lambda m, a, k: call(stage, m, a, k)


def _wide(fn: Any, model: Any, a: tuple, k: dict, like: tuple, given: tuple, dtype: Any,
          reads: Any) -> WideProgram | None:
    """The wide program (x64 on) and the tensors the run computed narrower; None when torch makes no
    64-bit tensor (or the trace with x64 on fails). Which torch calls make 64-bit tensors is first
    read from the forward on the meta device (torch's own dtypes, no arithmetic): where none makes a
    float64 tensor there is nothing for a wide program to replay (an int64 computed as int32 is exact
    while its values fit), and the forward is not traced again (at GPT-2 124M the trace costs what
    torchax's own does; its int64 positions are such calls)."""
    watch = _meta_watch(like)
    if watch is not None and not any(n.dtype == "float64" for n in watch.narrowed):
        return WideProgram(None, tuple(watch.narrowed)) if watch.narrowed else None
    modules = _module_paths(model)
    watch = SixtyFourBit(modules)
    try:
        lowering = _tx.lower(model, a, k, _flattener([]), reads=reads, like=like, mode=watch)
    except Exception:  # noqa: BLE001 - a model whose x64 trace fails: no wide program (its narrowing is not checked)
        return None
    if not watch.narrowed and not _wide_arguments(lowering, like):
        return None
    args = LazyArgs([_maker(kind, key, fn, given, dtype) for kind, key in lowering.order])
    return WideProgram(ProgramRun(lowering.text, args), tuple(watch.narrowed))


def _meta_watch(like: tuple) -> SixtyFourBit | None:
    """The 64-bit tensors the forward makes, watched on its copy on the meta device (``like``); None
    when it cannot run there (it reads a value back, it makes CPU tensors of its own)."""
    model, a, k = like
    watch = SixtyFourBit(_module_paths(model))
    try:
        with watch:
            model(*a, **k)
    except Exception:  # noqa: BLE001 - the user's forward on the meta device: the x64 trace watches instead
        return None
    return watch


def _wide_arguments(lowering: Any, like: tuple) -> bool:
    return "xf64>" in lowering.text or "xi64>" in lowering.text.split("{", 2)[1]


def _maker(kind: str, key: Any, fn: Any, given: tuple, dtype: Any) -> Any:
    """The wide program's argument ``(kind, key)`` (``_compat.torchax_run.Lowering.order``) from the
    user's own tensors (``fn``'s weights, ``given``: the user's (args, kwargs)), cast as the run cast
    them."""
    if kind == "parameter":
        return _Lazy(fn.get_parameter(key), dtype)
    if kind == "buffer":
        return _Lazy(fn.get_buffer(key), dtype)
    return _Lazy(_tensor_inputs(given)[key], dtype)


def _tensor_inputs(given: tuple) -> list:
    return [t for t in tree_leaves((tuple(given[0]), dict(given[1]))) if isinstance(t, torch.Tensor)]


def capture(model: Any, inputs: tuple, kwargs: dict, dtype: Any, seed: int, device: Any = None, *,
            program: bool = False) -> Capture:
    """The run of ``model`` through torchax with hooks on every submodule: its capture, every module
    call's tensors from torchax's eager run, copied to the CPU; with ``program``, the program of its
    forward and its arguments too (what a capture file keeps). ``device`` is torchax's own (JAX's
    default device): a torch_xla device is refused by the caller."""
    if device is not None:
        raise ParityError(f"device: the torchax frontend runs on JAX's default device, got {device!r}")
    recorder = capturing.Recorder(origin, _tx.to_cpu)
    run = run_torchax(model, inputs, kwargs, dtype, seed, program, recorder=recorder, stage="XLA capture")
    cap = recorder.capture(run.outputs, dtype)
    cap.info["frontend"] = "torchax"
    if run.how is not None:
        cap.info["run"] = run.how
    capturing.keep_program(cap, run.program)
    del run
    return cap


OWN_REPLAY_NOTE = ("The rounded replay is the XLA run itself: JAX compiled the program with XLA:CPU in this process, "
                   "the replays' own compiler, and XLA:CPU's rules change nothing in it, so it is not compiled a "
                   "second time.")


def _own_rounded_replay(rules: Any, device: str) -> bool:
    """Whether torchax's compiled run on ``device`` is its own rounded replay under ``rules``: on
    JAX's CPU, whose compiler is the replays' (jaxlib's XLA:CPU), with XLA:CPU's own rules."""
    return _device.is_cpu(device) and resolve(rules, None, device).name == XLA_CPU.name


def stage(early: Callable[[RunRecord, ProgramRun, list[int]], None] | None = None, *, program: bool = True) -> Stage:
    """The XLA run through torchax as a stage (the frontend's one seam; as ``xla_run.stage``). With
    ``program`` its program is kept; ``early(record, program, cuts)`` starts the replays' compile
    before JAX compiles it. With localize, every module call is recorded: as extra results of the
    forward's program, computed by the rounded replay, when the replays run; from the eager run
    otherwise."""

    def run(record: RunRecord) -> None:
        r = record.request
        record.device = _tx.platform()  # before the run: the replays' early compile reads it
        recorder = capturing.Recorder(origin, _tx.to_cpu) if r.localize else (
            capturing.BlockValues() if r.emulate else None)
        replayed = recorder if r.emulate else None
        on_program = (lambda p: early(record, p, replayed.cuts if replayed is not None else [])) if (
            early is not None and r.emulate) else None
        own = r.emulate and not r.localize and _own_rounded_replay(r.rules, record.device)
        record.xla = run_torchax(r.fn, r.inputs, r.kwargs, r.dtype, r.seed, program, on_program,
                                 recorder=recorder if r.localize else None, replayed=replayed, own_replay=own,
                                 share_weights=not r.separate_reference and not r.localize)
        if record.xla.how is not None:
            record.notes.append(f"The XLA run is {record.xla.how}.")
        if record.xla.program is not None and record.xla.program.rounded_by_run:
            record.notes.append(OWN_REPLAY_NOTE)
        if r.localize and not r.emulate:  # the eager run recorded the module tensors itself
            record.capture = recorder.capture(record.xla.outputs, r.dtype)
        elif r.localize:
            record.recorder = recorder

    return Stage("XLA", run, reads=("request",), writes=("xla", "device", "recorder", "capture", "notes"),
                 seconds="xla", release="collect")
