"""The torchax frontend's exporter: torch.export, then torchax's lowering of the program to JAX
(``_compat/torchax.py``: what ``torchax.export.exported_program_to_stablehlo`` does, with the state
bound by the program's own order and x64 on), then the same bundle as torch_xla's route: the
manifest's roles by name from torch.export's graph signature and the C++ analysis, the weights, and
a `main` that ``run``, ``to_jax`` and ``load_jax`` take without torch.

torchax's c10d collectives (``_c10d_functional.all_reduce`` with sum, avg, min or max) reduce over
the "torch_dist" axis: the lowering binds it with ``ExportOptions.num_replicas`` along it, and the
module becomes a replica program (the shard_map body inlined, every all-reduce over all replicas),
which ``run(..., num_replicas=N)`` runs across N CPU devices. An average divides by the axis size
it was traced with, so a bundle with one says so (``manifest.num_replicas``) and runs with that
many replicas only. Each all-reduce is recorded as a lowering records it (``collectives``' hook
log: ``lowering`` "psum", "pmax", "pmin", "pmean ..."), which the manifest's collectives carry.

Refused with an ``ExportLoweringError`` naming the aten op, the nn.Module and the model's source
line: an op torchax has no lowering of, or whose lowering fails; another c10d collective
(all_gather, broadcast: their results depend on the replica count or index). In-place writes
torchax drops (a BatchNorm's running statistics in training mode) are listed in
``manifest.dropped_mutations``.

Example:
    >>> import torch
    >>> from torch_xla_ext.export import torch_program
    >>> model, args, kwargs, names = torch_program.arguments(torch.nn.Linear(4, 3), (torch.randn(2, 4),), None)
    >>> b = export(model, args, kwargs, names, ExportOptions())
    >>> b.manifest.frontend, [(i.kind, i.name) for i in b.manifest.inputs]
    ('torchax', [('parameter', 'weight'), ('parameter', 'bias'), ('user_input', 'input')])
"""

from __future__ import annotations

from typing import Any

from torch_xla_ext._compat import stablehlo as _shlo
from torch_xla_ext._compat import torchax as _tx
from torch_xla_ext._ext import collectives as _core
from torch_xla_ext.errors import InvalidArgumentError, TorchXlaExtError, first_line
from torch_xla_ext.export import graph, sites, torch_program
from torch_xla_ext.export.bundle import Bundle, from_torch_xla
from torch_xla_ext.export.errors import ExportLoweringError
from torch_xla_ext.export.leaves import user_leaves
from torch_xla_ext.export.manifest import dtype_name
from torch_xla_ext.export.options import ExportOptions
from torch_xla_ext.export.view_rewrite import with_views_as_reshapes

__all__ = ["FEATURE", "FRONTEND", "export"]

FEATURE = "export.torchax"  # the gate's feature (_versions.FEATURES)
FRONTEND = "torchax"
_WHERE = "torchax's module"


def export(model: Any, args: tuple | None, kwargs: dict | None, names: list[str] | None,
           options: ExportOptions) -> Bundle:
    """torch.export + torchax's lowering, plus the manifest. ``names`` are the user inputs'
    argument names (None for a given ExportedProgram, ``model`` then)."""
    import torch

    if options.tracer == "lazy":
        raise InvalidArgumentError("options.tracer: 'lazy' is torch_xla's lazy trace; the torchax frontend exports "
                                   "torch.export's program only (tracer='auto' or 'torch.export')")
    traced = _core.next_all_reduce_sequence()  # what the user's code asks of our all_reduce while torch.export traces
    if isinstance(model, torch.export.ExportedProgram):
        ep, args, kwargs = torch_program.given_program(model, args, kwargs)
        prefix = ""
    else:
        try:
            ep, prefix = torch_program.trace(model, args, kwargs, strict=options.strict)
        except TorchXlaExtError:
            raise
        except Exception as e:  # noqa: BLE001 - torch.export's failure on the user's model, named with where
            site = sites.guard_site(e, model)
            raise ExportLoweringError(
                f"torch.export failed on the model [{sites.where(site) or 'model'}]: {first_line(e, with_type=True)} "
                f"(the torchax frontend lowers torch.export's program; frontend='torch_xla' falls back to "
                f"torch_xla's lazy trace)", **sites.site_fields(site)) from e
    program, transforms = _decomposed(ep)
    reduces = _all_reduces(program)
    try:
        lowered = _tx.lower(program, num_replicas=options.num_replicas, collectives=bool(reduces))
    except _tx.NodeFailure as failure:
        site = sites.node_site(failure.node)
        cause = f": {first_line(failure.cause, with_type=True)}" if failure.cause is not None else ""
        raise ExportLoweringError(f"{failure.why} [{sites.where(site) or 'model'}]{cause}",
                                  **sites.site_fields(site)) from failure.cause
    text, num_all_reduces = _replica_program(lowered.text, debug_info=options.export_node_metadata)

    tx = _plain_export(lowered, text, prefix)
    leaves = user_leaves(args, kwargs, names)
    if len(leaves) != len(lowered.user_avals):
        raise ExportLoweringError(f"model: torch.export's program takes {len(lowered.user_avals)} user inputs, but "
                                  f"(args, kwargs) has {len(leaves)} leaves")
    out_names = torch_program.output_names(ep)
    if out_names is not None and len(out_names) != len(tx.output_signature):
        out_names = None  # non-tensor leaves in the return value: no reliable pairing
    try:
        torch_program.check_outputs(ep, tx.output_signature, out_names, "torchax's")
    except ExportLoweringError as e:
        if not lowered.diverged:
            raise
        node, what = lowered.diverged[0]  # the first op whose value torchax computes otherwise
        site = sites.node_site(node)
        raise ExportLoweringError(f"{e}; the first op whose result differs from torch's is {site['op']} "
                                  f"[{sites.where(site) or 'model'}]: {what}", **sites.site_fields(site)) from None
    asked = _requested_scales(_core.recorded_all_reduces_since(traced), reduces)
    start = _core.next_all_reduce_sequence()
    for reduce, requested in zip(reduces, asked):
        _record(reduce, options.num_replicas, requested)
    calls = _core.recorded_all_reduces_since(start) if len(reduces) == num_all_reduces else []
    bundle = from_torch_xla(tx, torch_program.state_kinds(ep, prefix), leaves, calls, output_names=out_names)
    m = bundle.manifest
    m.frontend = FRONTEND
    m.transforms.extend(transforms)
    m.dropped_mutations = [{"kind": kind, "name": torch_program.strip_prefix(name, prefix)}
                           for kind, name in lowered.mutations]
    if "avg" in reduces:
        m.num_replicas = options.num_replicas  # the average divides by it
    return bundle


def _decomposed(ep: Any) -> tuple[Any, list[str]]:
    """torchax's decompositions of the program, and the manifest's record of a rewrite: when
    torch.export's decompositions make a view inexpressible, again with the views as reshapes
    (export/view_rewrite.py), as for torch_xla's exporter."""
    return with_views_as_reshapes(lambda program, transforms: (_tx.decompose(program), transforms), ep)


def _all_reduces(program: Any) -> list[str]:
    """The reduce of every c10d all-reduce of the program, in program order; an
    ExportLoweringError naming the op and the line for any other c10d collective or reduce."""
    found = []
    for node in program.graph.nodes:
        op = _tx.c10d_op(node.target) if node.op == "call_function" else None
        if op is None or op == "wait_tensor":
            continue
        site = sites.node_site(node)
        if op != "all_reduce":
            raise ExportLoweringError(
                f"{site['op']} [{sites.where(site) or 'model'}]: torchax lowers this c10d collective over the "
                f"'{_tx.AXIS}' axis with a result that depends on the replica count or index; a bundle's collectives "
                f"are all-reduces ({', '.join(_tx.C10D_REDUCES)})", **sites.site_fields(site))
        reduce = node.args[1] if len(node.args) > 1 else node.kwargs.get("reduceOp")
        if reduce not in _tx.C10D_REDUCES:
            raise ExportLoweringError(
                f"{site['op']} [{sites.where(site) or 'model'}]: reduce {reduce!r} has no torchax lowering (it takes "
                f"{', '.join(_tx.C10D_REDUCES)})", **sites.site_fields(site))
        found.append(reduce)
    return found


def _requested_scales(calls: list[Any], reduces: list[str]) -> list[float | None]:
    """The scale the user's code asked of each of the program's all-reduces (in program order),
    where every one of them went through our ``collectives.all_reduce``, which records its call
    while torch.export traces (once per trace: the newest trace's); None each where they did not
    (a bare c10d call records nothing, so the calls cannot be paired with the program's)."""
    n = len(reduces)
    if not n or not calls or len(calls) % n:
        return [None] * n
    newest = calls[-n:]
    if [c.reduce for c in newest] != list(reduces):
        return [None] * n
    return [c.requested_scale for c in newest]


def _record(reduce: str, num_replicas: int, requested: float | None = None) -> None:
    """One all-reduce in the hook log, as a lowering records it: torchax's JAX collective, and for
    an average the division by the axis size JAX bakes in (a scale of 1/num_replicas); the scale
    the user asked (``requested``, our all_reduce's multiply after it) where known, else that one."""
    jax_op = _tx.C10D_REDUCES[reduce]
    if reduce == "avg":
        scale = 1.0 / num_replicas
        lowering = f"{jax_op} (psum, then divide by {num_replicas}: the replica count it was exported for)"
    else:
        scale, lowering = 1.0, jax_op
    _core.record_all_reduce(reduce, scale if requested is None else requested, scale, [], num_replicas, lowering)


def _replica_program(text: str, *, debug_info: bool) -> tuple[str, int]:
    """(text, number of all-reduces) of torchax's module as a replica program: the shard_map
    body (``sdy.manual_computation``) inlined, the mesh dropped, and every all-reduce over all
    replicas (``replica_groups = dense<>``, no channel: as torch_xla's), so one module runs on any
    number of replicas. Built with jaxlib's MLIR bindings; locations kept with ``debug_info``."""
    from jax.extend.mlir import ir

    ctx, module = graph.parse(text, _WHERE)
    count = 0
    with ctx:
        for op in list(module.body.operations):
            if op.operation.name == "sdy.mesh":
                op.operation.erase()
        main = graph.main_func(module, _WHERE)
        for op in list(main.regions[0].blocks[0].operations):
            if op.operation.name == "sdy.manual_computation":
                _inline(op)
        every_replica = ir.Attribute.parse("dense<> : tensor<0x0xi64>")
        for op in _ops(main):
            name = op.operation.name
            if name.startswith("sdy."):
                raise ExportLoweringError(f"{_WHERE}: {name} is left after inlining the collective axis; not a "
                                          f"replica program")
            if name == "stablehlo.all_reduce":
                attributes = op.operation.attributes
                attributes["replica_groups"] = every_replica
                for key in ("channel_handle", "use_global_device_ids"):
                    if key in attributes:
                        del attributes[key]
                count += 1
        if not module.operation.verify():
            raise ExportLoweringError(f"{_WHERE}: the replica program does not verify")
        text = module.operation.get_asm(enable_debug_info=debug_info)
    return text, count


def _inline(manual: Any) -> None:
    """Replaces a ``sdy.manual_computation`` whose arguments and results are replicated by its body."""
    body = manual.regions[0].blocks[0]
    for arg, operand in zip(body.arguments, manual.operation.operands):
        arg.replace_all_uses_with(operand)
    returned = None
    for inner in list(body.operations):
        if inner.operation.name == "sdy.return":
            returned = inner
            continue
        inner.operation.move_before(manual.operation)
    for result, value in zip(manual.operation.results, returned.operation.operands):
        result.replace_all_uses_with(value)
    manual.operation.erase()


def _ops(op: Any):
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                yield inner
                yield from _ops(inner.operation)


def _plain_export(lowered: Any, text: str, prefix: str) -> _shlo.TorchXlaExport:
    """The lowering as the plain data every exporter hands to the bundle (what torch_xla's
    exporter gives: main's arguments described by input_locations, the state by name)."""
    num_states = len(lowered.states)
    locations, signature, state = [], [], {}
    for k in lowered.kept:
        if k < num_states:
            s = lowered.states[k]
            name = torch_program.strip_prefix(s.name, prefix)
            locations.append(_shlo.InputLocation("parameter", k, name))
            signature.append((list(s.value.shape), dtype_name(s.value.dtype)))
            state[name] = s.value
        else:
            shape, dtype = lowered.user_avals[k - num_states]
            locations.append(_shlo.InputLocation("input_arg", k - num_states, ""))
            signature.append((shape, dtype))
    return _shlo.TorchXlaExport(text=text, input_locations=locations, input_signature=signature,
                                output_signature=lowered.outputs, unused_inputs=[], state_dict=state,
                                additional_constants=[])
