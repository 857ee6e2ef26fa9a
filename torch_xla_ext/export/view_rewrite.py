"""torch 2.9's export decompositions change the strides under some views (pytorch/pytorch#141107:
``scaled_dot_product_attention``'s decomposition, then ``x.view(-1, n)`` as in transformers'
Conv1D), so decomposing GPT-2 at batch > 1 fails with "Cannot view a tensor with shape ...". Both
exporters decompose (torch_xla's and torchax's); when that error stops them, they retry with the
program's views retargeted to reshapes here, which computes the same values.

Example:
    >>> import torch
    >>> class Flat(torch.nn.Module):
    ...     def forward(self, x):
    ...         return x.view(-1)
    >>> ep = torch.export.export(Flat(), (torch.ones(2, 3),))
    >>> views_as_reshapes(ep.graph_module)
    ['view']
"""

from __future__ import annotations

import copy
import operator
from typing import Any, Callable, TypeVar

from torch_xla_ext._compat import stablehlo as _shlo

__all__ = ["VIEW_REWRITE", "views_as_reshapes", "with_views_as_reshapes"]

_T = TypeVar("_T")

VIEW_REWRITE = "aten.view->aten.reshape"


def views_as_reshapes(graph_module) -> list[str]:
    """Retargets every `aten.view` of the graph that no in-place op can observe to `aten.reshape`;
    returns the rewritten nodes' names.

    Why it is sound: `reshape` is `view` whenever the input's strides can express the new shape
    (it then traces to the very same `aten.view`) and a contiguous copy only where they cannot,
    so values are unchanged everywhere; what a copy would change is aliasing, which matters only
    if an in-place op writes to the view or its base, and such views are left alone. It fixes
    torch.export's decompositions changing strides under a view (pytorch/pytorch#141107:
    `scaled_dot_product_attention`'s decomposition, then `x.view(-1, n)` as in transformers'
    Conv1D) without special-casing any model."""
    import torch

    view, reshape = torch.ops.aten.view.default, torch.ops.aten.reshape.default
    observed = _nodes_aliasing_a_write(graph_module.graph)
    rewritten = []
    for node in graph_module.graph.nodes:
        if node.op == "call_function" and node.target is view and node not in observed:
            node.target = reshape
            rewritten.append(node.name)
    if rewritten:
        graph_module.recompile()
    return rewritten


def _nodes_aliasing_a_write(graph) -> set:
    """Nodes that may share storage with a tensor an in-place op writes (alias sets from the op
    schemas: `Tensor(a)` results alias their `Tensor(a)` arguments; `Tensor(a!)` is written)."""
    import torch

    parent: dict[Any, Any] = {}

    def find(n):
        while parent.get(n, n) is not n:
            n = parent[n]
        return n

    def union(a, b):
        parent[find(a)] = find(b)

    written = []
    for n in graph.nodes:
        if n.op != "call_function":
            continue
        if n.target is operator.getitem and isinstance(n.args[0], torch.fx.Node):
            union(n, n.args[0])  # an element of a multi-output op aliases what the op's result does
            continue
        schema = getattr(n.target, "_schema", None)
        if schema is None:
            continue
        returns_alias = any(r.alias_info is not None for r in schema.returns)
        bound = list(zip(schema.arguments, n.args)) + [(a, n.kwargs[a.name]) for a in schema.arguments
                                                        if a.name in n.kwargs]
        for arg_schema, value in bound:
            if arg_schema.alias_info is None or not isinstance(value, torch.fx.Node):
                continue
            if returns_alias:
                union(n, value)
            if arg_schema.alias_info.is_write:
                written.append(value)
    roots = {find(w) for w in written}
    return {n for n in graph.nodes if find(n) in roots}


def with_views_as_reshapes(lower: Callable[[Any, list[str]], _T], ep: Any) -> _T:
    """``lower(ep, [])``; when torch.export's decompositions (run inside ``lower``) make a view
    inexpressible, ``lower`` again on a copy of ``ep`` whose views are reshapes, its list holding
    the manifest's record of the rewrite. The caller's program stays as it was."""
    try:
        return lower(ep, [])
    except (RuntimeError, ValueError) as e:
        if not _shlo.is_unviewable_view_error(e):
            raise
        fixed = copy.deepcopy(ep)
        rewritten = views_as_reshapes(fixed.graph_module)
        if not rewritten:
            raise
        return lower(fixed, [f"{VIEW_REWRITE}({len(rewritten)} views, before decompositions)"])
