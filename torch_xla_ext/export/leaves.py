"""The user inputs and outputs of an export named by their pytree path: every leaf of the example
``(args, kwargs)`` in torch's pytree order (the order `run` takes them in), and the key path of
every leaf of a pytree spec, as torch writes it (``['logits']``, ``[0]``, ``.field``).

Example:
    >>> import torch
    >>> [leaf["name"] for leaf in user_leaves((torch.ones(2),), {"mask": [torch.ones(1), 3]}, ["x", "mask"])]
    ['x', 'mask[0]', 'mask[1]']
"""

from __future__ import annotations

from typing import Any, Sequence

from torch_xla_ext.export.manifest import PYTHON_PREFIX, torch_dtype_name

__all__ = ["leaf_paths", "user_leaves"]


def user_leaves(args: Sequence[Any], kwargs: dict[str, Any], names: list[str] | None) -> list[dict[str, Any]]:
    """Every leaf of (args, kwargs) in torch.utils._pytree order: {"name", "shape", "dtype"} for a
    tensor; a Python constant's dtype is "python:<type>" with its "value" when JSON can hold it."""
    import torch  # the torch side: the JAX-only install imports export without torch

    from torch_xla_ext._compat import pytree  # imports torch, as above

    tops = list(args) + list(kwargs.values())
    names = names or [f"args[{i}]" for i in range(len(args))] + list(kwargs)
    out = []
    for name, top in zip(names, tops):
        leaves, spec = pytree.tree_flatten(top)
        for path, leaf in zip(leaf_paths(spec), leaves):
            entry: dict[str, Any] = {"name": name + path}
            if isinstance(leaf, torch.Tensor):
                entry.update(shape=list(leaf.shape), dtype=torch_dtype_name(str(leaf.dtype)))
            else:
                entry.update(shape=[], dtype=PYTHON_PREFIX + type(leaf).__name__)
                if leaf is None or isinstance(leaf, (bool, int, float, str)):
                    entry["value"] = leaf
            out.append(entry)
    return out


def leaf_paths(spec) -> list[str]:
    """The key path of every leaf of a pytree spec, as torch.utils._pytree.keystr writes it
    ("['logits']", "[0]", ".field"). Works for node types registered without key functions
    (transformers' ModelOutput): their context's keys name their children."""
    if spec.is_leaf():
        return [""]
    children = spec.children_specs
    ctx = spec.context
    if hasattr(spec.type, "_fields"):  # namedtuple
        keys = [f".{f}" for f in spec.type._fields]
    elif isinstance(ctx, (list, tuple)) and len(ctx) == len(children) and \
            all(isinstance(k, (str, int)) for k in ctx):  # dict, OrderedDict, ModelOutput: keys
        keys = [f"[{k!r}]" for k in ctx]
    else:
        keys = [f"[{i}]" for i in range(len(children))]
    return [key + rest for key, child in zip(keys, children) for rest in leaf_paths(child)]
