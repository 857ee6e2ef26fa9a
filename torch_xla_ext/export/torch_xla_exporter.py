"""The torch_xla frontend's exporter: torch.export, then torch_xla's StableHLO exporter
(``_compat/stablehlo.py``), and torch_xla's lazy trace of one forward pass (``lazy.py``) when
torch.export or torch_xla's exporter cannot trace the model. Its rewrites of torch.export's
program before torch_xla lowers it: reductions over ``dim=[]`` given every dimension (torch_xla 2.9
lowers them as no reduction), and views as reshapes when torch.export's decompositions make a view
inexpressible (``view_rewrite.py``).

Example:
    >>> import torch
    >>> from torch_xla_ext.export import torch_program
    >>> model, args, kwargs, names = torch_program.arguments(torch.nn.Linear(4, 4), (torch.randn(2, 4),), None)
    >>> b = export(model, args, kwargs, names, ExportOptions())
    >>> [i.kind for i in b.manifest.inputs]
    ['parameter', 'parameter', 'user_input']
"""

from __future__ import annotations

from typing import Any

from torch_xla_ext._compat import stablehlo as _shlo
from torch_xla_ext._ext import collectives as _core
from torch_xla_ext.errors import InvalidArgumentError, TorchXlaExtError, UnimplementedError, first_line
from torch_xla_ext.export import lazy, sites, torch_program
from torch_xla_ext.export.bundle import Bundle, from_torch_xla
from torch_xla_ext.export.errors import ExportLoweringError
from torch_xla_ext.export.leaves import user_leaves
from torch_xla_ext.export.options import ExportOptions
from torch_xla_ext.export.view_rewrite import with_views_as_reshapes

__all__ = ["EMPTY_DIMS_REWRITE", "FEATURE", "FRONTEND", "export", "reductions_over_all_dims"]

FEATURE = "export.export"  # the gate's feature (_versions.FEATURES)
FRONTEND = "torch_xla"
EMPTY_DIMS_REWRITE = "aten reductions dim=[]->all dims"


def export(model: Any, args: tuple | None, kwargs: dict | None, names: list[str] | None,
           options: ExportOptions) -> Bundle:
    """torch.export + torch_xla's StableHLO exporter (or torch_xla's lazy trace), plus the
    manifest. ``names`` are the user inputs' argument names (None for a given ExportedProgram,
    ``model`` then; its own example inputs are used)."""
    import torch

    if options.num_replicas != 1:
        raise InvalidArgumentError(f"options.num_replicas: {options.num_replicas} is the size of torchax's collective "
                                   f"axis; torch_xla's all-reduces reduce over the replicas `run` is given (leave it "
                                   f"1, or use frontend='torchax')")
    start = _core.next_all_reduce_sequence()
    if isinstance(model, torch.export.ExportedProgram):
        ep, args, kwargs = torch_program.given_program(model, args, kwargs)
        prefix = ""
    else:
        if options.tracer == "lazy":
            return lazy.export_lazy(model, args, kwargs, names, start, why=None, stage="ExportOptions(tracer='lazy')")
        try:
            ep, prefix = torch_program.trace(model, args, kwargs, strict=options.strict)
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

    kinds_by_target = torch_program.state_kinds(ep, prefix)
    leaves = user_leaves(args, kwargs, names)
    out_names = torch_program.output_names(ep)
    if out_names is not None and len(out_names) != len(tx.output_signature):
        out_names = None  # non-tensor leaves in the return value: no reliable pairing
    torch_program.check_outputs(ep, tx.output_signature, out_names, "torch_xla's")
    bundle = from_torch_xla(tx, kinds_by_target, leaves, calls, output_names=out_names)
    bundle.manifest.transforms.extend(transforms)
    # torch_xla's exporter returns the user outputs only (like torchax's): in-place writes are dropped.
    bundle.manifest.dropped_mutations = [{"kind": "buffer", "name": torch_program.strip_prefix(t, prefix)}
                                         for t in tx.mutated_buffers or []]
    bundle.torch_xla_export = tx
    return bundle


def _fallback(model, args, kwargs, names, start, error, stage, options):
    """torch_xla's lazy trace of the model (export/lazy.py), or, with lazy_fallback off, the
    typed error naming where `stage` failed in the model's code."""
    if options.tracer == "torch.export":
        site = sites.guard_site(error, model)
        raise ExportLoweringError(f"{stage} failed on the model [{sites.where(site) or 'model'}]: {first_line(error, with_type=True)} "
                                  f"(ExportOptions(tracer='auto') exports torch_xla's lazy trace instead)",
                                  module_path=site["module_path"], source=site["source"],
                                  source_line=site["source_line"]) from error
    return lazy.export_lazy(model, args, kwargs, names, start, why=error, stage=stage)


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

    return with_views_as_reshapes(run, ep)


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


def _strip_prefix(tx, prefix: str) -> None:
    tx.state_dict = {(k[len(prefix):] if k.startswith(prefix) else k): v for k, v in tx.state_dict.items()}
    for loc in tx.input_locations:
        if loc.name.startswith(prefix):
            loc.name = loc.name[len(prefix):]


