"""Per-module capture of a run, and its safetensors file (no pickle).

``capture`` runs a model on XLA (a TPU host, or here PJRT CPU) with forward hooks on every
submodule and keeps each call's tensor inputs and outputs, named by the module's path and the
pytree path of each tensor. ``save`` writes them to one safetensors file whose metadata (JSON
text) lists the calls; ``load_capture`` reads it back in another process, where
``localization.compare_capture`` compares it with a CPU run of the reference (:mod:`.localization`).

Example:
    >>> import torch
    >>> from torch_xla_ext import parity
    >>> model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16))
    >>> x = torch.randn(2, 16)
    >>> cap = parity.capture(model, (x,), dtype="bf16")
    >>> cap.save("run.safetensors")
    'run.safetensors'
    >>> # in another process, on the CPU:
    >>> report = parity.compare_capture("run.safetensors", model, (x,))
    >>> report.first_divergent_module is None          # bf16 rounding explains every module
    True
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import weakref
from typing import Any, Callable, Literal, NamedTuple

from torch_xla_ext import _dtypes, _json, _versions
from torch_xla_ext.parity import runners
from torch_xla_ext.parity._checks import check_inputs
from torch_xla_ext.parity.errors import CaptureError, CaptureNotFoundError, ParityError, ParityTypeError

__all__ = ["BlockValues", "Capture", "ModuleCall", "Recorder", "capture", "load_capture", "record_calls",
           "repeated_blocks"]

FORMAT = "torch_xla_ext.parity.capture/1"


@dataclasses.dataclass
class ModuleCall:
    """One call of one submodule: tensors by pytree path. Input paths are into ``(args, kwargs)``
    (``[0][0]`` is the first positional input, ``[1]['attention_mask']`` a keyword input)."""

    path: str
    call: int  # how many earlier calls this path had
    depth: int
    inputs: dict[str, Any]
    outputs: dict[str, Any]


@dataclasses.dataclass
class Capture:
    """A run's module calls in completion order (children before their parents) and its outputs."""

    calls: list[ModuleCall]
    outputs: dict[str, Any]
    dtype: str
    device: str
    info: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def run_dtype(self) -> Any:
        """The torch dtype the run was cast to; None for the inputs' own dtypes."""
        return None if self.dtype == "input dtypes" else runners.torch_dtype(self.dtype, "the capture's dtype")

    def save(self, path: str | os.PathLike) -> str:
        """Writes one safetensors file; returns its path."""
        from safetensors.torch import save_file

        tensors, calls = {}, []
        stored: set[int] = set()

        def entry(t: Any) -> Any:
            # safetensors stores no tensor twice: one shared between calls is written as copies.
            t = t.detach().cpu().contiguous()
            if t.untyped_storage().data_ptr() in stored:
                return t.clone()
            if t.numel():
                stored.add(t.untyped_storage().data_ptr())
            return t

        for i, c in enumerate(self.calls):
            for kind, leaves in (("in", c.inputs), ("out", c.outputs)):
                for leaf, t in leaves.items():
                    tensors[f"{i}/{kind}{leaf}"] = entry(t)
            calls.append({"path": c.path, "call": c.call, "depth": c.depth, "inputs": list(c.inputs),
                          "outputs": list(c.outputs)})
        for leaf, t in self.outputs.items():
            tensors[f"outputs{leaf}"] = entry(t)
        metadata = {"format": FORMAT, "calls": _json.dumps(calls), "outputs": _json.dumps(list(self.outputs)),
                    "dtype": self.dtype, "device": self.device, **{f"info.{k}": v for k, v in self.info.items()}}
        path = os.fspath(path)
        save_file(tensors, path, metadata=metadata)
        return path


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
    What the model raises becomes a ``runners.UserFailure`` at ``stage``."""
    import torch

    from torch_xla_ext.errors import InternalError

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
            return {p: clone_one(t) for p, t in runners.tensor_leaves(tree)}
        except Exception as e:  # our hook, not the user's model
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
            out = runners.call(stage, model, args, kwargs)
    finally:
        for h in handles:
            h.remove()
    return calls, out


class Recorder:
    """What ``runners.run_xla`` calls the prepared model with (its ``run``) to capture that run:
    every module call's inputs and outputs stay as lazy tensors. Either the run's one execution
    computes them with its outputs (:meth:`capture` then copies them to the CPU), or, passed as
    ``run_xla``'s ``replayed``, they go into the rounded replay's program instead, and
    :meth:`replayed` takes their values from its results. Either way there is no second trace,
    compile and execution."""

    def __init__(self) -> None:
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
        import torch

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
                    leaves[p] = _Pending(k) if k is not None else (t.cpu() if t.device.type == "cpu" else None)
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
                on_cpu[id(t)] = (t, t.cpu())
            return on_cpu[id(t)][1]

        for c in self.calls:
            c.inputs = {p: cpu(t) for p, t in c.inputs.items()}
            c.outputs = {p: cpu(t) for p, t in c.outputs.items()}
        del on_cpu
        return self._made(outputs, dtype, device)

    def _made(self, outputs: list[tuple[str, Any]], dtype: Any, device: Any) -> Capture:
        import torch_xla

        calls, self.calls = self.calls, None
        info = {"torch_xla": torch_xla.__version__}
        return Capture(calls, dict(outputs), str(dtype).removeprefix("torch.") if dtype else "input dtypes",
                       str(torch_xla.device() if device is None else device), info)


class BlockValues:
    """What ``runners.run_xla`` calls the prepared model with, as its ``replayed``, when only the
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
        import torch

        if not isinstance(model, torch.nn.Module):
            return runners.call(stage, model, args, kwargs)
        modules = dict(model.named_modules())
        kept: dict[int, Any] = {}
        done: set[str] = set()

        def keep(tree: Any) -> None:
            leaves = runners.tensor_leaves(tree)
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
            return runners.call(stage, model, args, kwargs)
        finally:
            for h in handles:
                h.remove()
            self._values = list(kept.values())

    def device_values(self, device: Any) -> list[Any]:
        """The kept tensors on ``device``: what the replayed program returns after the outputs,
        every one a cut."""
        import torch

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


def capture(model: Any, inputs: Any = (), kwargs: dict | None = None, *, dtype: Any = None, seed: int = 0,
            device: Any = None) -> Capture:
    """Runs ``model`` on XLA (``device``, default ``torch_xla.device()``) in ``dtype`` with hooks
    on every submodule and returns the per-module capture (tensors on the CPU, one sync). What
    the model raises propagates as a ``runners.UserFailure`` naming the stage.

    Example:
        >>> import torch
        >>> from torch_xla_ext import parity
        >>> model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16))
        >>> x = torch.randn(2, 16)
        >>> capture(model, (x,), dtype="bf16").save("xla_run.safetensors")
        'xla_run.safetensors'
    """
    _versions.require("parity.xla")  # before torch_xla is imported here
    import torch
    import torch_xla

    if not isinstance(model, torch.nn.Module):
        raise ParityTypeError(f"model: per-module localisation needs an nn.Module, got {type(model).__name__}")
    inputs, kwargs = check_inputs(inputs, kwargs)
    tdtype = runners.torch_dtype(dtype)
    device = torch_xla.device() if device is None else device
    recorder = Recorder()
    with runners.user_rng_preserved():
        run = runners.run_xla(model, inputs, kwargs, tdtype, seed, False, run=recorder, device=device,
                              stage="XLA capture")
    cap = recorder.capture(run.outputs, tdtype, device)
    cap.info["model"] = type(model).__name__
    del run
    runners.release_freed_memory()  # the device model and buffers, before the caller's next stage
    return cap


def load_capture(path: str | os.PathLike) -> Capture:
    """Reads a file written by :meth:`Capture.save`, checking its metadata and every entry.

    Example:
        >>> import torch
        >>> from torch_xla_ext import parity
        >>> model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16))
        >>> x = torch.randn(2, 16)
        >>> capture(model, (x,), dtype="bf16").save("xla_run.safetensors")
        'xla_run.safetensors'
        >>> cap = load_capture("xla_run.safetensors")
        >>> type(cap).__name__
        'Capture'
    """
    from safetensors import SafetensorError, safe_open

    if not isinstance(path, (str, os.PathLike)):
        raise ParityTypeError(f"path: expected a file path, got {type(path).__name__}")
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise CaptureNotFoundError(f"{path}: no such capture file")
    try:
        with safe_open(path, framework="pt") as f:
            raw = f.metadata() or {}
            keys = set(f.keys())
            meta = _capture_metadata(raw, path)

            def get(key: str) -> Any:
                if key not in keys:
                    raise CaptureError(f"{path}: entry {key!r} is listed in the metadata but not stored")
                return f.get_tensor(key)

            calls = [ModuleCall(c.path, c.call, c.depth, {p: get(f"{i}/in{p}") for p in c.inputs},
                                {p: get(f"{i}/out{p}") for p in c.outputs}) for i, c in enumerate(meta.calls)]
            outputs = {p: get(f"outputs{p}") for p in meta.outputs}
    except SafetensorError as e:
        raise CaptureError(f"{path}: not a readable safetensors file ({e})") from None
    info = {k.removeprefix("info."): v for k, v in raw.items() if k.startswith("info.")}
    return Capture(calls, outputs, meta.dtype, meta.device, info)


@dataclasses.dataclass
class _CallRecord:
    """One entry of the metadata's ``calls`` list (what :meth:`Capture.save` writes)."""

    path: str
    call: int
    depth: int
    inputs: list[str]
    outputs: list[str]


@dataclasses.dataclass
class _CaptureMetadata:
    """The safetensors metadata of a capture: its schema (``calls`` and ``outputs`` are JSON text)."""

    format: Literal[FORMAT]
    calls: list[_CallRecord]
    outputs: list[str]
    dtype: str = "input dtypes"
    device: str = "?"


def _capture_metadata(raw: dict[str, str], path: str) -> _CaptureMetadata:
    """The metadata validated against :class:`_CaptureMetadata` (pydantic); a CaptureError names the field."""
    from torch_xla_ext import _validation

    data: dict[str, Any] = dict(raw)
    for key in ("calls", "outputs"):
        if key in data:
            try:
                data[key] = json.loads(data[key])
            except json.JSONDecodeError as e:
                raise CaptureError(f"{path}: metadata '{key}' is not JSON ({e})") from None
    # Lax: the counts were written as ints, but a hand-made file's "3" is read as 3 (as int() did).
    return _validation.validate(_CaptureMetadata, data, CaptureError, f"{path}: metadata", strict=False)
