"""torch's Python dispatch internals (torch.utils._python_dispatch, ``Tensor._make_wrapper_subclass``),
in one place: a mode that sees every aten op of a region, and a tensor subclass that stands for
another tensor's values without storage of its own."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["TorchDispatchMode", "make_wrapper_subclass"]


def make_wrapper_subclass(cls: type, like: Any, *, dtype: Any) -> Any:
    """A new instance of the tensor subclass ``cls`` with ``like``'s shape, strides, storage offset
    and device but ``dtype``, and no storage of its own (``__torch_dispatch__`` supplies values)."""
    return torch.Tensor._make_wrapper_subclass(cls, like.shape, strides=like.stride(),
                                               storage_offset=like.storage_offset(), dtype=dtype,
                                               device=like.device, requires_grad=False)
