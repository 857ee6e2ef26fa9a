"""The tensors of any output by pytree path (``.logits``, ``[0]``, ``['k']``): torch's pytree
registry first, then the containers transformers and users return without keys (HF ModelOutputs,
dataclasses, mappings, sequences, objects holding tensors as attributes such as HF caches).

Example:
    >>> import torch
    >>> [p for p, _ in tensor_leaves({"a": torch.ones(1), "b": [torch.zeros(2)]})]
    ["['a']", "['b'][0]"]
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator

import torch

from torch_xla_ext._compat import pytree
from torch_xla_ext.parity.errors import ParityError

__all__ = ["float_leaves", "tensor_leaves"]


def _key_entries(node: Any) -> list[tuple[str, Any]] | None:
    """(path piece, child) pairs of a container, or None for a leaf."""
    if isinstance(node, torch.Tensor) or node is None or isinstance(node, (bool, int, float, str, bytes)):
        return None
    entry = pytree.SUPPORTED_NODES.get(type(node))
    if entry is not None and entry.flatten_with_keys_fn is not None:
        children, _ = entry.flatten_with_keys_fn(node)
        return [(pytree.keystr((k,)), v) for k, v in children]
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        return [(f".{f.name}", getattr(node, f.name)) for f in dataclasses.fields(node)]
    if isinstance(node, dict):
        return [(f"[{k!r}]", v) for k, v in node.items()]
    if isinstance(node, tuple) and hasattr(node, "_fields"):
        return [(f".{f}", getattr(node, f)) for f in node._fields]
    if isinstance(node, (list, tuple)):
        return [(f"[{i}]", v) for i, v in enumerate(node)]
    attrs = getattr(node, "__dict__", None)
    if isinstance(attrs, dict):
        return [(f".{k}", v) for k, v in attrs.items() if not k.startswith("_")]
    return None


def _leaves(node: Any, path: str, seen: set[int], depth: int) -> Iterator[tuple[str, Any]]:
    if isinstance(node, torch.Tensor):
        yield path, node
        return
    if id(node) in seen or depth > 16:
        return
    entries = _key_entries(node)
    if entries is None:
        return
    seen.add(id(node))
    for piece, child in entries:
        yield from _leaves(child, path + piece, seen, depth + 1)


def tensor_leaves(out: Any) -> list[tuple[str, Any]]:
    """Every tensor in ``out`` with its pytree path."""
    return list(_leaves(out, "", set(), 0))


def float_leaves(out: Any, what: str) -> list[tuple[str, Any]]:
    """Floating-point tensors of ``out`` by pytree path; ParityError naming ``what`` when there are none."""
    leaves = [(p, t) for p, t in tensor_leaves(out) if t.is_floating_point()]
    if not leaves:
        raise ParityError(f"{what} returned no floating-point tensor (got {type(out).__name__})")
    return leaves
