"""Recording a run's module calls: forward hooks on every submodule keep each call's tensor
inputs and outputs, named by the module's path and the pytree path of each tensor
(:func:`record_calls`). On XLA they stay lazy tensors (:class:`Recorder`): either the run's one
execution computes them, or they become extra results of the rounded replay's program, which
computes them instead (torch_xla then compiles the outputs' program alone). :class:`BlockValues`
keeps only the values between a model's repeated blocks, where the rounded replay is cut.

Example:
    >>> import torch
    >>> model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    >>> calls, out = record_calls(model, (torch.ones(1, 4),), {})
    >>> [(c.path, c.depth) for c in calls]
    [('0', 1), ('1', 1), ('', 0)]
"""

from __future__ import annotations

import math
import weakref
from typing import Any, Callable, NamedTuple

import torch

from torch_xla_ext import _device, _dtypes
from torch_xla_ext.errors import InternalError
from torch_xla_ext.parity.captures import Capture, ModuleCall
from torch_xla_ext.parity.errors import ParityError, ParityTypeError
from torch_xla_ext.parity.leaves import tensor_leaves
from torch_xla_ext.parity.user_code import call

__all__ = ["BlockValues", "Recorder", "keep_program", "record_calls", "repeated_blocks"]


def _module_path_depth(path: str) -> int:
    return 0 if not path else path.count(".") + 1


def record_calls(model: Any, args: tuple, kwargs: dict, *, stage: str = "XLA capture",
                 on_call: Callable[..., None] | None = None, keep: bool = True) -> tuple[list[ModuleCall], Any]:
    """Runs ``model(*args, **kwargs)`` with hooks on every submodule; returns its calls (inputs
    cloned before the call runs, outputs when it returns) and the output. ``on_call(module, path,
    call, args, kwargs, output, inputs)`` runs when a call returns, with recording switched off
    (for shadow runs); ``inputs`` are the tensors it received, by path. With ``keep=False`` the
    calls come back without tensors (path, call, depth only): each call's clones are dropped once
    ``on_call`` has read them, so a run compared as it goes never holds every module's activations.
    What the model raises becomes a ``UserFailure`` at ``stage``."""
    if not isinstance(model, torch.nn.Module):
        raise ParityTypeError(f"model: per-module localisation needs an nn.Module, got {type(model).__name__}")
    calls: list[ModuleCall] = []
    counts: dict[str, int] = {}
    state = {"recording": True}
    pending: dict[str, list[dict[str, Any]]] = {}  # inputs taken before each running call, per path
    handles = []

    # One clone per tensor value: a module's output is usually the next module's input, and on
    # XLA every clone is one more output of the run's program (more to compile). A tensor is the
    # same value while it is the same object (a weak reference, so nothing is kept alive) with
    # the same version counter (which every in-place op bumps, on views through their base).
    clones: dict[int, tuple[Any, int, Any]] = {}

    def clone_one(t: Any) -> Any:
        known = clones.get(id(t))
        if known is not None and known[0]() is t and known[1] == t._version:
            return known[2]
        c = t.detach().clone()
        clones[id(t)] = (weakref.ref(t), t._version, c)
        return c

    def clone_leaves(tree: Any, path: str) -> dict[str, Any]:
        try:
            return {p: clone_one(t) for p, t in tensor_leaves(tree)}
        except Exception as e:  # noqa: BLE001 - inside the user's forward any error of ours would read as theirs
            raise InternalError(f"parity's capture hook on {path or '<root>'} failed: {type(e).__name__}: {e}") from e

    def hooks_for(path: str):
        # Inputs are taken before the call runs: an in-place module (torchvision's
        # Hardswish(inplace=True)) overwrites them with its output.
        def pre_hook(module: Any, a: tuple, k: dict) -> None:
            if state["recording"]:
                pending.setdefault(path, []).append(clone_leaves((a, k), path))

        def hook(module: Any, a: tuple, k: dict, out: Any) -> None:
            if not state["recording"]:
                return
            inputs = pending[path].pop()
            n = counts.get(path, 0)
            counts[path] = n + 1
            calls.append(ModuleCall(path, n, _module_path_depth(path), inputs if keep else {},
                                    clone_leaves(out, path) if keep else {}))
            if on_call is not None:
                state["recording"] = False
                try:
                    on_call(module, path, n, a, k, out, inputs)
                finally:
                    state["recording"] = True
        return pre_hook, hook

    for path, module in model.named_modules():
        pre_hook, hook = hooks_for(path)
        handles.append(module.register_forward_pre_hook(pre_hook, with_kwargs=True))
        handles.append(module.register_forward_hook(hook, with_kwargs=True))
    try:
        with torch.no_grad():
            out = call(stage, model, args, kwargs)
    finally:
        for h in handles:
            h.remove()
    return calls, out


class Recorder:
    """What ``xla_run.run_xla`` calls the prepared model with (its ``run``) to capture that run:
    every module call's inputs and outputs stay as lazy tensors. Either the run's one execution
    computes them with its outputs (:meth:`capture` then copies them to the CPU), or, passed as
    ``run_xla``'s ``replayed``, they go into the rounded replay's program instead, and
    :meth:`replayed` takes their values from its results. Either way there is no second trace,
    compile and execution."""

    def __init__(self, origin: Callable[[Any], tuple[dict[str, str], str, str]] | None = None,
                 to_cpu: Callable[[Any], Any] | None = None) -> None:
        # origin(device): (info, device, device type) a capture records (torch_xla's by default);
        # to_cpu(tensor): a recorded tensor copied to the CPU (``tensor.cpu()`` by default).
        self._origin = origin or torch_xla_origin
        self._to_cpu = to_cpu or (lambda t: t.cpu())
        self.calls: list[ModuleCall] | None = None
        self._on_device: list[Any] = []  # device_values(): the tensors a replayed capture computes
        self._pending: list[tuple[Any, tuple[int, ...]]] | None = None  # release(): their dtypes and shapes
        self.cuts: list[int] = []  # device_values(): where the replay may cut its program (_segment_cuts)

    def __call__(self, stage: str, model: Any, args: tuple, kwargs: dict) -> Any:
        self.calls, out = record_calls(model, args, kwargs, stage=stage)
        return out

    def device_values(self, device: Any) -> list[Any]:
        """The distinct tensors of the recorded calls on ``device``, in order of first appearance:
        what the replayed program returns after the outputs."""
        if self.calls is None:
            raise ParityError("Recorder.device_values: the recorder has not run a model")
        device = torch.device(device)
        seen: dict[int, Any] = {}
        for c in self.calls:
            for leaves in (c.inputs, c.outputs):
                for t in leaves.values():
                    if t.device == device:
                        seen.setdefault(id(t), t)
        self._on_device = list(seen.values())
        self.cuts = self._segment_cuts()
        return list(self._on_device)

    def _segment_cuts(self) -> list[int]:
        """Indices into :meth:`device_values` of the values between repeated blocks
        (:func:`repeated_blocks`): the first input of the first block and each block's first
        output. The rounded replay cuts its program there, so that blocks of one structure
        compile once (segments.py); any cut is exact, these only make it pay."""
        index = {id(t): k for k, t in enumerate(self._on_device)}
        first_calls = {c.path: c for c in self.calls if c.call == 0}
        cuts: set[int] = set()
        for blocks in repeated_blocks(first_calls):
            calls = [first_calls[p] for p in blocks]
            firsts = [next(iter(calls[0].inputs.values()), None)] + [next(iter(c.outputs.values()), None)
                                                                      for c in calls]
            cuts.update(index[id(t)] for t in firsts if t is not None and id(t) in index)
        return sorted(cuts)

    def release(self) -> None:
        """Lets go of the device tensors before the run executes, so its program is the outputs'
        alone: each of :meth:`device_values` becomes its index among them (its value comes from
        :meth:`replayed`); any other tensor (on the CPU, or when the replayed program could not
        be made) is copied or dropped now."""
        if self.calls is None:
            raise ParityError("Recorder.release: the recorder has not run a model")
        index = {id(t): k for k, t in enumerate(self._on_device)}
        self._pending = [(t.dtype, tuple(t.shape)) for t in self._on_device]
        self._on_device = []
        for c in self.calls:
            for leaves in (c.inputs, c.outputs):
                for p, t in list(leaves.items()):
                    k = index.get(id(t))
                    leaves[p] = _Pending(k) if k is not None else (t if t.device.type == "cpu" else None)
        del index

    def replayed(self, values: list[Any] | None, outputs: list[tuple[str, Any]], dtype: Any,
                 device: Any = None) -> Capture | None:
        """The run's capture from the replayed program's results after the outputs (``values``,
        numpy, in :meth:`device_values`'s order, computed in the replay's types), or None when
        they are missing or do not fit what was recorded."""
        if self._pending is None:
            raise ParityError("Recorder.replayed: release() has not run")
        pending, self._pending = self._pending, None
        if values is None or len(values) != len(pending):
            return None
        tensors = []
        for v, (want, shape) in zip(values, pending):
            t = _dtypes.tensor_from_numpy(v)
            if t.numel() != math.prod(shape) or t.is_floating_point() != want.is_floating_point:
                return None
            # Exact: a narrow float comes back in float32 holding the values it rounded to.
            tensors.append(t.reshape(shape).to(want))
        for c in self.calls:
            for leaves in (c.inputs, c.outputs):
                for p, t in leaves.items():
                    if t is None:
                        return None
                    if isinstance(t, _Pending):
                        leaves[p] = tensors[t.index]
        return self._made(outputs, dtype, device)

    def capture(self, outputs: list[tuple[str, Any]], dtype: Any, device: Any = None) -> Capture:
        """The run's capture (tensors on the CPU) from its float ``outputs`` (already on the CPU)
        on ``device`` (default ``torch_xla.device()``); the recorder lets go of the device tensors."""
        if self.calls is None:
            raise ParityError("Recorder.capture: the recorder has not run a model")
        on_cpu: dict[int, Any] = {}  # a tensor the recorder shared between calls is copied once

        def cpu(t: Any) -> Any:
            if id(t) not in on_cpu:
                on_cpu[id(t)] = (t, self._to_cpu(t))
            return on_cpu[id(t)][1]

        for c in self.calls:
            c.inputs = {p: cpu(t) for p, t in c.inputs.items()}
            c.outputs = {p: cpu(t) for p, t in c.outputs.items()}
        del on_cpu
        return self._made(outputs, dtype, device)

    def _made(self, outputs: list[tuple[str, Any]], dtype: Any, device: Any) -> Capture:
        calls, self.calls = self.calls, None
        info, name, device_type = self._origin(device)
        return Capture(calls, dict(outputs), str(dtype).removeprefix("torch.") if dtype else "input dtypes",
                       name, info, device_type=device_type)


def keep_program(cap: Capture, program: Any) -> None:
    """The program a run's device ran (a ``ProgramRun`` or None) into ``cap``: its proto and
    arguments, or, where it could not be kept, why (``cap.info["program"]``)."""
    if program is None:
        return
    if program.proto is not None:
        cap.program, cap.program_args = program.proto, list(program.args)
    else:
        cap.info["program"] = program.error


def torch_xla_origin(device: Any) -> tuple[dict[str, str], str, str]:
    """(info, device, device type) of a capture made on torch_xla's ``device`` (default
    ``torch_xla.device()``)."""
    import torch_xla  # deferred: recording on the CPU (a reference's calls) never imports torch_xla

    return {"torch_xla": torch_xla.__version__}, str(torch_xla.device() if device is None else device), _device.current()


class BlockValues:
    """What ``xla_run.run_xla`` calls the prepared model with, as its ``replayed``, when only the
    values between a model's repeated blocks are wanted (verify without localisation): the
    first block's first tensor input and each block's first tensor output, kept as lazy tensors
    (not copies: any value of the program is an exact cut). They become extra results of the
    rounded replay's program, which is cut there (segments.py) and compiles each distinct
    block once; their values are not used. A model without repeated blocks, or a function,
    runs as it is, with nothing kept."""

    def __init__(self) -> None:
        self._values: list[Any] = []
        self.cuts: list[int] = []

    def __call__(self, stage: str, model: Any, args: tuple, kwargs: dict) -> Any:
        if not isinstance(model, torch.nn.Module):
            return call(stage, model, args, kwargs)
        modules = dict(model.named_modules())
        kept: dict[int, Any] = {}
        done: set[str] = set()

        def keep(tree: Any) -> None:
            leaves = tensor_leaves(tree)
            if leaves:
                kept.setdefault(id(leaves[0][1]), leaves[0][1])

        def before(path: str):
            def hook(_module: Any, a: tuple, k: dict) -> None:
                if path not in done:
                    keep((a, k))
            return hook

        def after(path: str):
            def hook(_module: Any, _a: tuple, _k: dict, out: Any) -> None:
                if path not in done:
                    done.add(path)
                    keep(out)
            return hook

        handles = []
        for blocks in repeated_blocks(modules):
            handles.append(modules[blocks[0]].register_forward_pre_hook(before(blocks[0]), with_kwargs=True))
            handles += [modules[p].register_forward_hook(after(p), with_kwargs=True) for p in blocks]
        try:
            return call(stage, model, args, kwargs)
        finally:
            for h in handles:
                h.remove()
            self._values = list(kept.values())

    def device_values(self, device: Any) -> list[Any]:
        """The kept tensors on ``device``: what the replayed program returns after the outputs,
        every one a cut."""
        device = torch.device(device)
        on_device = [t for t in self._values if t.device == device]
        self.cuts = list(range(len(on_device)))
        return on_device

    def release(self) -> None:
        """Lets go of the kept tensors before the run executes (its program is the outputs')."""
        self._values = []


def repeated_blocks(paths: Any) -> list[list[str]]:
    """The numbered children (``layers.0``, ``layers.1``, ...) of every module with at least two,
    in the order of ``paths`` (module paths), outermost such modules first; one inside another's
    blocks is left out (Mixtral's experts inside its layers: a layer is one block)."""
    children: dict[str, list[str]] = {}
    for p in paths:
        parent, _, last = p.rpartition(".")
        if last.isdigit():
            children.setdefault(parent, []).append(p)
    found, taken = [], []
    for parent in sorted(children, key=_module_path_depth):
        if len(children[parent]) < 2 or any(t == "" or parent.startswith(t + ".") for t in taken):
            continue
        taken.append(parent)
        found.append(children[parent])
    return found


class _Pending(NamedTuple):
    """A recorded tensor whose value comes from the replayed program (its index among its values)."""

    index: int


