"""torch_xla's HLO dump subsystem (private `_XLAC` entry points), in one place.

The lowered HLO of pending XLA tensors and the device data that feeds it: the entry
computation's `parameter(i)` is the i-th tensor of `graph_inputs` (both come from the same
post-order walk of the IR graph in torch_xla's C++).
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch_xla


def lowered_hlo_text(tensors: Sequence[torch.Tensor]) -> str:
    """HLO text of the computation that would produce ``tensors`` (nothing is executed)."""
    return torch_xla._XLAC._get_xla_tensors_hlo(list(tensors))


def lowered_hlo_proto(tensors: Sequence[torch.Tensor]) -> bytes:
    """The same computation as a serialized HloModuleProto."""
    return torch_xla._XLAC._get_xla_tensors_hlo_proto(list(tensors))


def graph_inputs(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The device-data tensors the pending graph of ``tensors`` reads, in parameter order."""
    _ids, values = torch_xla._XLAC._get_tensors_xla_device_data_node(list(tensors))
    return list(values)


def ir_text(tensors: Sequence[torch.Tensor]) -> str:
    """torch_xla's IR (aten-level nodes) for ``tensors``, useful next to the HLO."""
    return torch_xla._XLAC._get_xla_tensors_text(list(tensors))


def graph_input_ids(tensors: Sequence[torch.Tensor]) -> list[int]:
    """For each tensor of ``graph_inputs``, the id (:func:`tensor_id`) of the XLA tensor whose
    device data it is."""
    ids, _values = torch_xla._XLAC._get_tensors_xla_device_data_node(list(tensors))
    return [int(i) for i in ids]


def tensor_id(tensor: torch.Tensor) -> int:
    """torch_xla's id of an XLA tensor (shared by an nn.Parameter made from it)."""
    return int(torch_xla._XLAC._xla_get_tensor_id(tensor))
