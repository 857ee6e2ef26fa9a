"""torch.utils._pytree (torch's private pytree module, which torch.export, Dynamo and
torch_xla's exporter flatten with), in one place: the order and key paths torch_xla_ext names user
inputs and outputs by are torch's own.

Example:
    >>> from torch_xla_ext._compat import pytree
    >>> leaves, spec = pytree.tree_flatten(({"b": 1, "a": 2}, [3]))
    >>> leaves, [pytree.keystr(p) for p, _ in pytree.tree_flatten_with_path([{"x": 0}])[0]]
    ([1, 2, 3], ["[0]['x']"])
"""

from __future__ import annotations

from torch.utils._pytree import (SUPPORTED_NODES, TreeSpec, keystr, tree_flatten, tree_flatten_with_path, tree_leaves,
                                 tree_map, tree_unflatten)

__all__ = ["SUPPORTED_NODES", "TreeSpec", "keystr", "tree_flatten", "tree_flatten_with_path", "tree_leaves", "tree_map",
           "tree_unflatten"]
