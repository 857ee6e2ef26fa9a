"""`export`: torch.export + torch_xla's StableHLO exporter, then the manifest: input kinds from
torch.export's graph signature and the C++ analysis, user inputs named by argument (keyword
inputs by their keyword), outputs named by their pytree path in the model's return value.

Example:
    >>> import torch
    >>> class Masked(torch.nn.Module):
    ...     def forward(self, input_ids, attention_mask=None):
    ...         return input_ids * attention_mask
    >>> ids, mask = torch.ones(2, 3), torch.ones(2, 3)
    >>> b = export(Masked(), (ids,), {"attention_mask": mask})
    >>> [i.name for i in b.manifest.inputs if i.kind == "user_input"]   # in main's argument order
    ['attention_mask', 'input_ids']
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import operator
from typing import Any, Sequence

from torch_xla_ext import _versions
from torch_xla_ext._compat import stablehlo as _shlo
from torch_xla_ext._ext import collectives as _core
from torch_xla_ext.errors import ArgumentTypeError, InvalidArgumentError, TorchXlaExtError, UnimplementedError, first_line
from torch_xla_ext.export import lazy
from torch_xla_ext.export.bundle import Bundle, from_torch_xla
from torch_xla_ext.export.errors import ExportLoweringError
from torch_xla_ext.export.leaves import leaf_paths, user_leaves

VIEW_REWRITE = "aten.view->aten.reshape"
EMPTY_DIMS_REWRITE = "aten reductions dim=[]->all dims"


@dataclasses.dataclass
class ExportOptions:
    """Options of :func:`export`. `strict` is torch.export's; `custom_ops_allowed_in_graph`
    (op namespaces lowered to stablehlo.custom_call) and `export_node_metadata` (torch's node
    metadata as MLIR locations) are torch_xla's StableHLOExportOptions fields. `tracer`: "auto"
    (torch.export, and torch_xla's lazy trace of one forward pass when torch.export or torch_xla's
    exporter cannot trace the model), "torch.export" (no fallback: an ExportLoweringError naming
    where it failed) or "lazy" (torch_xla's lazy trace only: exactly what torch_xla runs)."""

    strict: bool = False
    custom_ops_allowed_in_graph: tuple[str, ...] = ()
    export_node_metadata: bool = False
    tracer: str = "auto"


TRACER_CHOICES = ("auto", "torch.export", "lazy")


def export(model: Any, args: Sequence[Any] | None = None, kwargs: dict[str, Any] | None = None, *,
           options: ExportOptions | None = None) -> Bundle:
    """torch.export + torch_xla's StableHLO exporter, plus a typed manifest of `main`.

    `model` is an nn.Module (or callable) run as ``model(*args, **kwargs)``, or a
    ``torch.export.ExportedProgram`` (exported with its own example inputs: pass no args). User
    inputs are the leaves of ``(args, kwargs)`` in torch.utils._pytree order; `run` takes them in
    that order.

    Example:
        >>> import torch
        >>> b = export(torch.nn.Linear(4, 4), (torch.randn(2, 4),))
        >>> [i.kind for i in b.manifest.inputs]
        ['parameter', 'parameter', 'user_input']
    """
    _versions.require("export.export")
    import torch

    options = options or ExportOptions()
    if options.tracer not in TRACER_CHOICES:
        raise InvalidArgumentError(f"options.tracer: {options.tracer!r} is not one of {', '.join(TRACER_CHOICES)}")
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
        if options.tracer == "lazy":
            return lazy.export_lazy(model, args, kwargs, names, start, why=None, stage="ExportOptions(tracer='lazy')")
        if kwargs:
            # torch_xla's exporter takes no kwargs: export a module taking (args, kwargs) flattened
            # positionally, the order `run` takes user inputs in.
            target, flat_args = _Positional(model, len(args), list(kwargs)), tuple(args) + tuple(kwargs.values())
            prefix = "inner."
        try:
            ep = torch.export.export(target, flat_args, strict=options.strict)
        except TorchXlaExtError:
            raise
        except Exception as e:  # noqa: BLE001 - every failure of torch.export is a reason to fall back
            return _fallback(model, args, kwargs, names, start, e, "torch.export", options)
    calls = _core.recorded_all_reduces_since(start)
    if names is not None and options.tracer == "auto":
        site = lazy.data_dependent_node(ep)
        if site is not None:
            # torch_xla's exporter would run the op on the host, then refuse the program (after
            # minutes on a real model): go to the lazy trace, which says where and why.
            why = UnimplementedError(f"the program has a data-dependent value ({site['op']}), which torch_xla's "
                                     f"exporter cannot lower")
            return lazy.export_lazy(model, args, kwargs, names, start, why=why, stage="torch.export", guard=site)
    try:
        tx, transforms = _to_torch_xla(ep, options)
    except TorchXlaExtError:
        raise
    except Exception as e:  # noqa: BLE001 - torch_xla's exporter failed on a program torch.export made
        if names is None:  # an ExportedProgram: there is no module to trace lazily
            raise
        return _fallback(model, args, kwargs, names, start, e, "torch_xla's exporter", options)
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
    check_output_shapes(ep, tx, out_names)
    bundle = from_torch_xla(tx, kinds_by_target, leaves, calls, output_names=out_names)
    bundle.manifest.transforms.extend(transforms)
    bundle.torch_xla_export = tx
    return bundle


def _fallback(model, args, kwargs, names, start, error, stage, options):
    """torch_xla's lazy trace of the model (export/lazy.py), or, with lazy_fallback off, the
    typed error naming where `stage` failed in the model's code."""
    if options.tracer == "torch.export":
        site = lazy.guard_site(error, model)
        raise ExportLoweringError(f"{stage} failed on the model [{lazy.where(site) or 'model'}]: {first_line(error, with_type=True)} "
                                  f"(ExportOptions(tracer='auto') exports torch_xla's lazy trace instead)",
                                  module_path=site["module_path"], source=site["source"],
                                  source_line=site["source_line"]) from error
    return lazy.export_lazy(model, args, kwargs, names, start, why=error, stage=stage)


def check_output_shapes(ep, tx, out_names: list[str] | None) -> None:
    """Every output of torch_xla's program has the shape torch.export's program gives it; a
    lowering that changes one computes something else, and is refused rather than saved."""
    import torch
    from torch.export.graph_signature import OutputKind

    out_node = next(n for n in reversed(ep.graph.nodes) if n.op == "output")
    specs = ep.graph_signature.output_specs
    values = [v for v, spec in zip(out_node.args[0], specs) if spec.kind == OutputKind.USER_OUTPUT]
    expected = [v.meta.get("val") for v in values if isinstance(v, torch.fx.Node)]
    if len(expected) != len(tx.output_signature):
        return  # non-tensor leaves in the return value: no reliable pairing
    for k, (val, (shape, _)) in enumerate(zip(expected, tx.output_signature)):
        if not isinstance(val, torch.Tensor) or not all(isinstance(d, int) for d in val.shape):
            continue
        if list(val.shape) != list(shape):
            name = out_names[k] if out_names else f"output {k}"
            raise ExportLoweringError(
                f"{name}: torch_xla's lowering gives shape {list(shape)} where torch.export's program has "
                f"{list(val.shape)}; the exported program would compute something else, so it is not saved "
                f"(an op of this output that torch_xla 2.9 lowers wrongly)")


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
    """torch_xla's export of `ep` and the manifest's record of what was rewritten: reductions over
    `dim=[]` get explicit dimensions after decompositions (see reductions_over_all_dims); when
    torch.export's decompositions (run by torch_xla) make a view inexpressible, again with the
    program's views as reshapes (see views_as_reshapes)."""
    def run(program, transforms):
        reductions: list[str] = []
        tx = _shlo.export_program(program, custom_ops_allowed_in_graph=tuple(options.custom_ops_allowed_in_graph),
                                  export_node_metadata=options.export_node_metadata,
                                  after_decompositions=lambda gm: reductions.extend(reductions_over_all_dims(gm)))
        if reductions:
            transforms.append(f"{EMPTY_DIMS_REWRITE}({len(reductions)} reductions, after decompositions)")
        return tx, transforms

    try:
        return run(ep, [])
    except (RuntimeError, ValueError) as e:
        if not _shlo.is_unviewable_view_error(e):
            raise
        fixed = copy.deepcopy(ep)  # the caller's program (or ours) stays as it was
        rewritten = views_as_reshapes(fixed.graph_module)
        if not rewritten:
            raise
        return run(fixed, [f"{VIEW_REWRITE}({len(rewritten)} views, before decompositions)"])


# Reductions whose `dim=[]` means every dimension in PyTorch (sum(x, []) is x.sum()) but no
# dimension in torch_xla 2.9's lowering, which returns x unchanged: measured op by op against CPU
# eager in tests/export/reductions_test.py. torch.export's decompositions emit some of them
# (nll_loss -> sum(x, []), so every cross_entropy loss with reduction="mean").
ALL_DIMS_WHEN_EMPTY = ("sum.dim_IntList", "mean.dim", "amax.default", "amin.default", "var.correction",
                        "std.correction", "var_mean.correction", "std_mean.correction",
                        "linalg_vector_norm.default")


def reductions_over_all_dims(graph_module) -> list[str]:
    """Gives every reduction whose `dim` is empty (explicitly or by its schema's default) the
    explicit list of all its input's dimensions; returns the rewritten nodes' names.

    Sound because PyTorch defines the empty list as all dimensions for exactly these ops (the
    rewritten program computes what torch.export's program computes, and its output shapes are
    torch.export's); it stops torch_xla 2.9 from lowering them as no reduction at all."""
    import torch

    targets = set()
    for name in ALL_DIMS_WHEN_EMPTY:
        packet, overload = name.split(".")
        op = getattr(getattr(torch.ops.aten, packet, None), overload, None)
        if op is not None:
            targets.add(op)
    rewritten = []
    for node in graph_module.graph.nodes:
        if node.op != "call_function" or node.target not in targets:
            continue
        val = getattr(node.args[0], "meta", {}).get("val") if node.args else None
        if not isinstance(val, torch.Tensor) or val.dim() == 0:
            continue  # a 0-d input: no dimension to name
        schema = node.target._schema
        index = next(i for i, a in enumerate(schema.arguments) if a.name == "dim")
        if "dim" in node.kwargs:
            dim = node.kwargs["dim"]
        elif len(node.args) > index:
            dim = node.args[index]
        else:
            dim = schema.arguments[index].default_value if schema.arguments[index].has_default_value() else None
        if not isinstance(dim, (list, tuple)) or len(dim) != 0:
            continue
        every = list(range(val.dim()))
        if "dim" in node.kwargs:
            node.kwargs = {**node.kwargs, "dim": every}
        else:
            args = list(node.args) + [schema.arguments[i].default_value for i in range(len(node.args), index)]
            args = args[:index] + [every] + args[index + 1:]
            node.args = tuple(args)
        rewritten.append(node.name)
    if rewritten:
        graph_module.recompile()
    return rewritten


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
