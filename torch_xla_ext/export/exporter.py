"""`export`: torch.export + torch_xla's StableHLO exporter, then the manifest: input kinds from
torch.export's graph signature and the C++ analysis, user inputs named by argument (keyword
inputs by their keyword), outputs named by their pytree path in the model's return value.

Example:
    >>> b = export(model, (input_ids,), {"attention_mask": mask})
    >>> [i.name for i in b.manifest.inputs if i.kind == "user_input"]
    ['input_ids', 'attention_mask']
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import operator
from typing import Any, Sequence

from torch_xla_ext._ext import collectives as _core
from torch_xla_ext.errors import ArgumentTypeError, UnimplementedError
from torch_xla_ext.export.bundle import Bundle, from_torch_xla
from torch_xla_ext.export.manifest import PYTHON_PREFIX, torch_dtype_name

VIEW_REWRITE = "aten.view->aten.reshape"


@dataclasses.dataclass
class ExportOptions:
    """Options of :func:`export`. `strict` is torch.export's; `custom_ops_allowed_in_graph`
    (op namespaces lowered to stablehlo.custom_call) and `export_node_metadata` (torch's node
    metadata as MLIR locations) are torch_xla's StableHLOExportOptions fields."""

    strict: bool = False
    custom_ops_allowed_in_graph: tuple[str, ...] = ()
    export_node_metadata: bool = False


def export(model: Any, args: Sequence[Any] | None = None, kwargs: dict[str, Any] | None = None, *,
           options: ExportOptions | None = None) -> Bundle:
    """torch.export + torch_xla's StableHLO exporter, plus a typed manifest of `main`.

    `model` is an nn.Module (or callable) run as ``model(*args, **kwargs)``, or a
    ``torch.export.ExportedProgram`` (exported with its own example inputs: pass no args). User
    inputs are the leaves of ``(args, kwargs)`` in torch.utils._pytree order; `run` takes them in
    that order.

    Example:
        >>> b = export(torch.nn.Linear(4, 4), (torch.randn(2, 4),))
        >>> [i.kind for i in b.manifest.inputs]
        ['parameter', 'parameter', 'user_input']
    """
    import torch

    options = options or ExportOptions()
    start = _core.next_all_reduce_sequence()
    if isinstance(model, torch.export.ExportedProgram):
        ep, args, kwargs = _given_program(model, args, kwargs)
        prefix, names = "", None
    else:
        if not isinstance(args, (tuple, list)):
            raise ArgumentTypeError(f"args: expected a tuple of example inputs, got {type(args).__name__}")
        if kwargs is not None and not isinstance(kwargs, dict):
            raise ArgumentTypeError(f"kwargs: expected a dict of keyword inputs, got {type(kwargs).__name__}")
        kwargs = dict(kwargs or {})
        names = _argument_names(model, len(args), list(kwargs))
        prefix, flat_args, target = "", tuple(args), model
        if kwargs:
            # torch_xla's exporter takes no kwargs: export a module taking (args, kwargs) flattened
            # positionally, the order `run` takes user inputs in.
            target, flat_args = _Positional(model, len(args), list(kwargs)), tuple(args) + tuple(kwargs.values())
            prefix = "inner."
        ep = torch.export.export(target, flat_args, strict=options.strict)
    calls = _core.recorded_all_reduces_since(start)
    tx, rewritten = _to_torch_xla(ep, options)
    if prefix:
        _strip_prefix(tx, prefix)

    sig = ep.graph_signature
    kinds_by_target: dict[str, str] = {}
    for targets, kind in ((sig.inputs_to_parameters, "parameter"), (sig.inputs_to_buffers, "buffer"),
                          (sig.inputs_to_lifted_tensor_constants, "constant")):
        for t in targets.values():
            kinds_by_target[t[len(prefix):] if prefix and t.startswith(prefix) else t] = kind
    leaves = user_leaves(args, kwargs, names)
    out_names = ["output" + p for p in leaf_paths(ep.call_spec.out_spec)] if ep.call_spec.out_spec else None
    if out_names is not None and len(out_names) != len(tx.output_signature):
        out_names = None  # non-tensor leaves in the return value: no reliable pairing
    bundle = from_torch_xla(tx, kinds_by_target, leaves, calls, output_names=out_names)
    if rewritten:
        bundle.manifest.transforms.append(f"{VIEW_REWRITE}({len(rewritten)} views, before decompositions)")
    bundle.torch_xla_export = tx
    return bundle


def _given_program(ep, args, kwargs):
    # torch_xla's exporter traces the program with its own example inputs: others would not match.
    if args is not None or kwargs is not None:
        raise ArgumentTypeError("args, kwargs: an ExportedProgram is exported with its own example inputs; "
                                "pass none")
    if ep.example_inputs is None:
        raise ArgumentTypeError("model: an ExportedProgram without example inputs (torch_xla's exporter needs them)")
    args, kwargs = tuple(ep.example_inputs[0]), dict(ep.example_inputs[1])
    if kwargs:
        raise UnimplementedError(f"model: an ExportedProgram with keyword inputs ({', '.join(kwargs)}); "
                                 f"torch_xla's exporter takes positional inputs only (pass the nn.Module "
                                 f"and kwargs instead)")
    return ep, args, kwargs


def _to_torch_xla(ep, options: ExportOptions):
    """torch_xla's export of `ep`; when torch.export's decompositions (run by torch_xla) make a view
    inexpressible, again with the program's views as reshapes (see views_as_reshapes)."""
    from torch_xla_ext._compat import stablehlo as _shlo

    def run(program):
        return _shlo.export_program(program, custom_ops_allowed_in_graph=tuple(options.custom_ops_allowed_in_graph),
                                    export_node_metadata=options.export_node_metadata)

    try:
        return run(ep), []
    except (RuntimeError, ValueError) as e:
        if not _shlo.is_unviewable_view_error(e):
            raise
        fixed = copy.deepcopy(ep)  # the caller's program (or ours) stays as it was
        rewritten = views_as_reshapes(fixed.graph_module)
        if not rewritten:
            raise
        return run(fixed), rewritten


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


def _positional_module():
    import torch

    class Positional(torch.nn.Module):
        """`inner(*args, **kwargs)` called with (args, kwargs) flattened positionally."""

        def __init__(self, inner, num_args: int, kwarg_names: list[str]):
            super().__init__()
            self.inner = inner
            self.num_args = num_args
            self.kwarg_names = kwarg_names

        def forward(self, *flat):
            n = self.num_args
            return self.inner(*flat[:n], **dict(zip(self.kwarg_names, flat[n:])))

    return Positional


def _Positional(inner, num_args, kwarg_names):  # noqa: N802 - a class made lazily (torch import)
    return _positional_module()(inner, num_args, kwarg_names)


def _strip_prefix(tx, prefix: str) -> None:
    tx.state_dict = {(k[len(prefix):] if k.startswith(prefix) else k): v for k, v in tx.state_dict.items()}
    for loc in tx.input_locations:
        if loc.name.startswith(prefix):
            loc.name = loc.name[len(prefix):]


# --- names -------------------------------------------------------------------------------------


def _argument_names(model: Any, num_args: int, kwarg_names: list[str]) -> list[str]:
    """The name of each positional argument (the forward signature's, else "args[i]"), then the
    keywords."""
    try:
        fn = model.forward if hasattr(model, "forward") else model
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):  # builtins and C callables have no signature
        params = []
    names = [params[i].name if i < len(params) else f"args[{i}]" for i in range(num_args)]
    return names + list(kwarg_names)


def user_leaves(args: Sequence[Any], kwargs: dict[str, Any], names: list[str] | None) -> list[dict[str, Any]]:
    """Every leaf of (args, kwargs) in torch.utils._pytree order: {"name", "shape", "dtype"} for a
    tensor; a Python constant's dtype is "python:<type>" with its "value" when JSON can hold it."""
    import torch
    import torch.utils._pytree as pytree

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
