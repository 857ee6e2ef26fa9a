"""torch_xla's collective entry points and the runtime's replica world (torch_xla.core.xla_model,
torch_xla.runtime, ``_XLAC._xla_all_reduce``), for torch_xla 2.9: the only code that knows them
(their one caller is torch_xla_ext/collectives.py)."""

from __future__ import annotations

from typing import Any

import torch
import torch_xla
from torch_xla import runtime

# xm.REDUCE_* values: the reduce types torch_xla's all-reduce lowering takes (no "xor": it raises
# "Unknown AllReduce type: xor").
REDUCE_TYPES = ("sum", "mul", "and", "or", "min", "max")


def world_size() -> int:
    return int(runtime.world_size())


def device_type() -> str:
    """The PJRT device type of this process ("CPU", "TPU", "CUDA", ...)."""
    return str(runtime.device_type())


def c10d_all_reduce(tensor: Any, reduce_type: str) -> Any:
    """The traceable all-reduce over all replicas that xm.all_reduce uses for scale == 1.0 and
    no groups: torch.ops._c10d_functional.all_reduce with the default group ("")."""
    return torch.ops._c10d_functional.all_reduce(tensor, reduce_type, "")


def xla_all_reduce(reduce_type: str, tensor: Any, scale: float, groups: list[list[int]]) -> Any:
    """torch_xla's own lowering with scale and replica groups (not traceable by torch.export)."""
    return torch_xla._XLAC._xla_all_reduce(reduce_type, tensor, scale, groups, True)
