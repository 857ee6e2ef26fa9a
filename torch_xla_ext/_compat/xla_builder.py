"""torch_xla.core.xla_builder and the `_XLAC` entry points under it: turning an HloModuleProto
into a computation, running it on XLA tensors as one IR node, and swapping `call_jax`.

The only module of torch_xla_ext that touches these private APIs (torch_xla 2.9)."""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Callable, ContextManager

import torch
import torch_xla
import torch_xla.core.xla_builder as _xb
import torch_xla.runtime as _xr

# torch_xla's device types -> JAX's lowering platform names.
_PLATFORMS = {"CPU": "cpu", "TPU": "tpu", "CUDA": "cuda", "GPU": "cuda", "ROCM": "rocm", "NEURON": "neuron"}

_stock_call_jax: Callable[..., Any] = _xb.call_jax
_patched: list[tuple[Any, Any]] = []  # (module, previous call_jax) while installed


def init_runtime_before_jax() -> None:
    """torch_xla must own the accelerator before JAX initialises (torch_xla's jax_import_guard)."""
    torch_xla._XLAC._init_computation_client()


def jax_env() -> ContextManager[None]:
    """torch_xla's environment workaround around JAX calls (it hides the MegaScale PJRT client
    from JAX so a multi-slice TPU job does not hang); a no-op context where torch_xla lacks it."""
    try:
        from torch_xla._internal.jax_workarounds import jax_env_context
    except ImportError:
        return contextlib.nullcontext()
    return jax_env_context()


def lowering_platform() -> str:
    """The JAX platform name to lower for: torch_xla's device type, not JAX's default backend."""
    kind = _xr.device_type() or "CPU"
    return _PLATFORMS.get(kind.upper(), kind.lower())


def default_device() -> torch.device:
    return torch_xla.device()


def computation_from_hlo_module_proto(name: str, hlo_module_proto: bytes) -> Any:
    """An `XlaComputation` of torch_xla's client from a serialized HloModuleProto."""
    return torch_xla._XLAC._xla_op_computation_from_module_proto(name, hlo_module_proto)


def user_computation(name: str, inputs: list[torch.Tensor], computation: Any) -> list[torch.Tensor]:
    """Records `computation` applied to `inputs` (one XLA tensor per HLO parameter, in order) as one
    node of the lazy graph; returns one XLA tensor per output. `name` needs an `xla::` prefix."""
    return torch_xla._XLAC._xla_user_computation(name, inputs, computation)


def stock_call_jax() -> Callable[..., Any]:
    """torch_xla's own `xla_builder.call_jax`, whatever is installed now."""
    return _stock_call_jax


def install_call_jax(replacement: Callable[..., Any]) -> int:
    """Routes `torch_xla.core.xla_builder.call_jax`, and every already-imported torch_xla module
    that bound it by name (`from torch_xla.core.xla_builder import call_jax`), to `replacement`.
    Returns how many module attributes were patched; a second install is a no-op."""
    if _patched:
        return 0
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "torch_xla" or name.startswith("torch_xla.")):
            continue
        if getattr(module, "call_jax", None) is _stock_call_jax:
            _patched.append((module, _stock_call_jax))
            setattr(module, "call_jax", replacement)
    return len(_patched)


def uninstall_call_jax() -> int:
    """Restores what install_call_jax replaced; returns how many attributes were restored."""
    n = len(_patched)
    while _patched:
        module, previous = _patched.pop()
        setattr(module, "call_jax", previous)
    return n


def is_installed() -> bool:
    return bool(_patched)
