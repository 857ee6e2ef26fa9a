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
# torch_xla counts its call_jax cache as the sum of len(v._cache) over the values of the dict
# xla_builder._JAX_TO_XLA_COMPUTATION_CACHE (_jax_to_xla_computation_cache_elements, which its tests
# read and clear). While installed, that dict is a _SharedCache holding one more value: ours.
_CACHE_KEY = "torch_xla_ext.jax_call"
_stock_cache: list[dict] = []  # torch_xla's dict, while ours stands in for it


class _Sized:
    def __init__(self, count: Callable[[], int]):
        self._count = count

    def __len__(self) -> int:
        return self._count()


class _CacheView:
    """One value of torch_xla's cache dict: ``len(view._cache)`` is our cached signatures."""

    def __init__(self, count: Callable[[], int]):
        self._cache = _Sized(count)


class _SharedCache(dict):
    """torch_xla's cache dict with our cache as one entry; clear() clears both and keeps ours listed."""

    def __init__(self, items: dict, count: Callable[[], int], clear: Callable[[], None]):
        super().__init__(items)
        self._view, self._clear_ours = _CacheView(count), clear
        self[_CACHE_KEY] = self._view

    def clear(self) -> None:
        super().clear()
        self._clear_ours()
        self[_CACHE_KEY] = self._view


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


def install_call_jax(replacement: Callable[..., Any], cache_entries: Callable[[], int] | None = None,
                     clear_cache: Callable[[], None] | None = None) -> int:
    """Routes `torch_xla.core.xla_builder.call_jax`, and every already-imported torch_xla module
    that bound it by name (`from torch_xla.core.xla_builder import call_jax`), to `replacement`.
    With `cache_entries` and `clear_cache`, torch_xla's cache counter
    (`_jax_to_xla_computation_cache_elements`) counts our entries too, and clearing torch_xla's
    cache dict clears ours. Returns how many module attributes were patched; a second install
    is a no-op."""
    if _patched:
        return 0
    cache = getattr(_xb, "_JAX_TO_XLA_COMPUTATION_CACHE", None)
    if cache_entries is not None and clear_cache is not None and isinstance(cache, dict):
        _stock_cache.append(cache)
        _xb._JAX_TO_XLA_COMPUTATION_CACHE = _SharedCache(cache, cache_entries, clear_cache)
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
    if _stock_cache:  # torch_xla's own dict again, with what it gained meanwhile
        stock, shared = _stock_cache.pop(), _xb._JAX_TO_XLA_COMPUTATION_CACHE
        stock.clear()
        stock.update({k: v for k, v in shared.items() if k != _CACHE_KEY})
        _xb._JAX_TO_XLA_COMPUTATION_CACHE = stock
    while _patched:
        module, previous = _patched.pop()
        setattr(module, "call_jax", previous)
    return n


def is_installed() -> bool:
    return bool(_patched)


def stock_cache_entries() -> int | None:
    """torch_xla's own call_jax cache counter (ours included while installed), or None where this
    torch_xla has none."""
    counter = getattr(_xb, "_jax_to_xla_computation_cache_elements", None)
    return None if counter is None else int(counter())
