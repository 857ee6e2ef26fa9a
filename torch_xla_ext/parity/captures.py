"""A capture: one run's module calls (each call's tensor inputs and outputs, by module path and
pytree path), its outputs, and the program the device ran with its arguments; and its file, one
safetensors file (tensors, and the call list and program description as JSON metadata: nothing
pickled), read back in another process (``compare_capture``, on a CPU host).

The program is the run's HloModuleProto as the device compiled it, with each dot's
``precision_config`` (``torch_xla.backends.set_mat_mul_precision`` is recorded there), so a CPU
host can replay it under the device's rules (``compare_capture(..., rules="auto")``).

Example:
    >>> import torch
    >>> from torch_xla_ext import parity
    >>> model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16))
    >>> cap = parity.capture(model, (torch.randn(2, 16),), dtype="bf16")
    >>> back = load_capture(cap.save("run.safetensors"))
    >>> [c.path for c in back.calls], back.program is not None, back.device_type
    (['0', '1', '2', ''], True, 'CPU')
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Literal

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from torch_xla_ext import _dtypes, _json, _validation
from torch_xla_ext.parity.casts import to_numpy, torch_dtype
from torch_xla_ext.parity.errors import CaptureError, CaptureNotFoundError, ParityTypeError

__all__ = ["FORMAT", "Capture", "ModuleCall", "load_capture"]

FORMAT = "torch_xla_ext.parity.capture/2"
FORMAT_WITHOUT_PROGRAM = "torch_xla_ext.parity.capture/1"  # still read: replays unavailable


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
    """A run's module calls in completion order (children before their parents) and its outputs;
    ``device`` (``xla:0``) and ``device_type`` (``TPU``, ``CPU``: what ``rules="auto"`` reads) of
    the run; ``program`` (a serialized HloModuleProto of the outputs, or a JAX lowering's StableHLO
    text: torchax's) and ``program_args`` (its arguments, numpy) when kept."""

    calls: list[ModuleCall]
    outputs: dict[str, Any]
    dtype: str
    device: str
    info: dict[str, str] = dataclasses.field(default_factory=dict)
    program: bytes | str | None = None
    program_args: list[Any] = dataclasses.field(default_factory=list)
    device_type: str = "unknown"

    @property
    def run_dtype(self) -> Any:
        """The torch dtype the run was cast to; None for the inputs' own dtypes."""
        return None if self.dtype == "input dtypes" else torch_dtype(self.dtype, "the capture's dtype")

    def save(self, path: str | os.PathLike) -> str:
        """Writes one safetensors file; returns its path."""
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
        program = None
        if self.program is not None:
            text = isinstance(self.program, str)  # a JAX lowering's StableHLO (torchax), else an HloModuleProto
            raw = self.program.encode("utf-8") if text else self.program
            tensors["program/hlo"] = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
            for k, a in enumerate(self.program_args):
                tensors[f"program/args/{k}"] = entry(_dtypes.tensor_from_numpy(np.asarray(a)))
            program = {"format": "stablehlo_text" if text else "hlo_proto", "arguments": len(self.program_args)}
        metadata = {"format": FORMAT, "calls": _json.dumps(calls), "outputs": _json.dumps(list(self.outputs)),
                    "program": _json.dumps(program), "dtype": self.dtype, "device": self.device,
                    "device_type": self.device_type, **{f"info.{k}": v for k, v in self.info.items()}}
        path = os.fspath(path)
        save_file(tensors, path, metadata=metadata)
        return path


def load_capture(path: str | os.PathLike) -> Capture:
    """Reads a file written by :meth:`Capture.save`, checking its metadata and every entry.

    Example:
        >>> import torch
        >>> from torch_xla_ext import parity
        >>> model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16))
        >>> x = torch.randn(2, 16)
        >>> parity.capture(model, (x,), dtype="bf16").save("xla_run.safetensors")
        'xla_run.safetensors'
        >>> cap = load_capture("xla_run.safetensors")
        >>> type(cap).__name__
        'Capture'
    """
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
            program, args = None, []
            if meta.program is not None:
                hlo = get("program/hlo")
                if hlo.dtype != torch.uint8 or hlo.dim() != 1:
                    raise CaptureError(f"{path}: entry 'program/hlo' must be a 1-D uint8 tensor (a serialized "
                                       f"HloModuleProto), got {hlo.dtype} of shape {list(hlo.shape)}")
                program = hlo.numpy().tobytes()
                if meta.program.format == "stablehlo_text":
                    program = program.decode("utf-8")
                args = [to_numpy(get(f"program/args/{k}")) for k in range(meta.program.arguments)]
    except SafetensorError as e:
        raise CaptureError(f"{path}: not a readable safetensors file ({e})") from None
    info = {k.removeprefix("info."): v for k, v in raw.items() if k.startswith("info.")}
    return Capture(calls, outputs, meta.dtype, meta.device, info, program, args, meta.device_type)


@dataclasses.dataclass
class _CallRecord:
    """One entry of the metadata's ``calls`` list (what :meth:`Capture.save` writes)."""

    path: str
    call: int
    depth: int
    inputs: list[str]
    outputs: list[str]


@dataclasses.dataclass
class _ProgramRecord:
    """The metadata's ``program``: the format of ``program/hlo`` and how many ``program/args/<k>``."""

    format: Literal["hlo_proto", "stablehlo_text"]
    arguments: int


@dataclasses.dataclass
class _CaptureMetadata:
    """The safetensors metadata of a capture: its schema (``calls``, ``outputs`` and ``program``
    are JSON text)."""

    format: Literal[FORMAT, FORMAT_WITHOUT_PROGRAM]
    calls: list[_CallRecord]
    outputs: list[str]
    dtype: str = "input dtypes"
    device: str = "?"
    device_type: str = "unknown"
    program: _ProgramRecord | None = None


def _capture_metadata(raw: dict[str, str], path: str) -> _CaptureMetadata:
    """The metadata validated against :class:`_CaptureMetadata` (pydantic); a CaptureError names the field."""
    data: dict[str, Any] = dict(raw)
    for key in ("calls", "outputs", "program"):
        if key in data:
            try:
                data[key] = json.loads(data[key])
            except json.JSONDecodeError as e:
                raise CaptureError(f"{path}: metadata '{key}' is not JSON ({e})") from None
    # Lax: the counts were written as ints, but a hand-made file's "3" is read as 3 (as int() did).
    return _validation.validate(_CaptureMetadata, data, CaptureError, f"{path}: metadata", strict=False)
