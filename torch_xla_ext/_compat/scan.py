"""torch_xla.experimental.scan / scan_layers, in one place.

``scan_layers`` returns only the final carry; ``scan_layers_with_intermediates`` runs the same
computation (the first layer as a template called with each layer's stacked parameters through
``torch.func.functional_call``, as scan_layers does) but also emits every layer's output as the
scan's ``ys``, so a caller can see where a scanned stack diverges.
"""

from __future__ import annotations

import copy
from typing import Sequence

import torch


def scan_layers(layers: Sequence[torch.nn.Module], x):
    from torch_xla.experimental.scan_layers import scan_layers as _scan_layers

    return _scan_layers(layers, x)


def scan_layers_with_intermediates(layers: Sequence[torch.nn.Module], x):
    """(final carry, per-layer outputs: the carry's pytree with each leaf stacked as
    [len(layers), *leaf.shape]). A tuple carry is the layer's positional arguments, any other
    carry (a tensor, a dict, a list) its one argument, as in scan_layers (functional_call)."""
    from torch.utils._pytree import tree_map
    from torch_xla.experimental.scan import scan

    template = copy.deepcopy(layers[0])
    params = [dict(m.named_parameters()) for m in layers]
    buffers = [dict(m.named_buffers()) for m in layers]
    stacked = (
        tree_map(lambda *ts: torch.stack(ts, 0), *params),
        tree_map(lambda *ts: torch.stack(ts, 0), *buffers),
    )

    def one_layer(carry, params_buffers):
        p, b = params_buffers
        out = torch.func.functional_call(template, (p, b), carry, strict=True)
        return out, tree_map(torch.clone, out)

    return scan(one_layer, x, stacked)
