"""The export fallback: when torch.export (or torch_xla's exporter) cannot trace a model, export
what torch_xla itself compiles for it -- the lazy trace of one forward pass, its HLO converted to
StableHLO by jaxlib -- with the same manifest and bundle format.

Every HLO parameter is matched to what it is by identity (torch_xla's tensor id of the device
data behind it): a user input, a parameter or buffer by its state-dict name, or a constant
torch_xla created during the trace (a Python scalar, a `torch.zeros`). Nothing is matched by shape
or value. That is sound only if the trace is one program: if the forward pass executed a graph or
copied device data to the host (`nonzero`, `.item()`, `if tensor:`), what torch_xla compiles last
takes the results of earlier graphs as device data and is specialised on this input's values. Such
a trace is never exported: an ExportLoweringError names the nn.Module path and source line of
torch.export's data-dependent guard and every place torch_xla's trace was cut.

Example:
    >>> import torch
    >>> from torch_xla_ext.export import export
    >>> class Note:                             # not a pytree type: torch.export refuses to return it
    ...     pass
    >>> class WithNote(torch.nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.lin = torch.nn.Linear(4, 4)
    ...     def forward(self, x):
    ...         return self.lin(x), Note()
    >>> b = export(WithNote(), (torch.randn(2, 4),))   # torch.export fails on it; torch_xla traces it whole
    >>> b.manifest.traced_by
    'torch_xla lazy trace'
"""

from __future__ import annotations

import copy
import sys
from typing import Any, Sequence

from torch_xla_ext import _dtypes, _mlir_text
from torch_xla_ext._compat.stablehlo import InputLocation, TorchXlaExport
from torch_xla_ext._ext import collectives as _core
from torch_xla_ext.errors import TorchXlaExtError, first_line
from torch_xla_ext.export.bundle import Bundle, from_torch_xla
from torch_xla_ext.export.errors import ExportLoweringError
from torch_xla_ext.export.leaves import leaf_paths, user_leaves
from torch_xla_ext.export.sites import chain, guard_site, module_paths, node_site, site_fields, site_of, where

LAZY_TRACE = "torch_xla lazy trace"


def is_data_dependent(error: BaseException) -> bool:
    """Whether torch.export failed on a guard over a data-dependent value (an unbacked symbol
    such as the length of `nonzero`'s result)."""
    from torch.fx.experimental import symbolic_shapes

    kinds = tuple(k for k in (getattr(symbolic_shapes, "GuardOnDataDependentSymNode", None),
                              getattr(symbolic_shapes, "PendingUnbackedSymbolNotFound", None)) if k is not None)
    return any(isinstance(e, kinds) for e in chain(error))


def data_dependent_node(ep: Any) -> dict[str, str | None] | None:
    """Where a torch.export program has a value whose shape or value depends on the inputs' values
    (a free unbacked symbol: `nonzero`'s length, an `.item()`), from torch.export's own node
    metadata (`nn_module_stack`, `stack_trace`); None if it has none. torch_xla's exporter would
    run such an op on the host and then refuse the program."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    for node in ep.graph.nodes:
        val = node.meta.get("val")
        try:
            unbacked = bool(free_unbacked_symbols(val)) if val is not None else False
        except (TypeError, AttributeError):  # a value kind free_unbacked_symbols does not walk
            unbacked = False
        if unbacked:
            return node_site(node)
    return None


# --- the fallback ----------------------------------------------------------------------------------


class LazyProgram:
    """torch_xla's own execution of the exported lazy graph: the device copy of the model called
    on the user inputs (flattened leaves, as `run` takes them); returns the output tensors in the
    manifest's order. It is what `run` is compared against (``bundle.torch_xla_export.graph_module``)."""

    def __init__(self, xmodel: Any, in_spec: Any, device: Any):
        self.xmodel, self.in_spec, self.device = xmodel, in_spec, device

    def __call__(self, *leaves: Any) -> list:
        import torch  # the torch side: the JAX-only install imports export without torch

        from torch_xla_ext._compat import pytree  # imports torch, as above

        moved = [x.to(self.device) if isinstance(x, torch.Tensor) else x for x in leaves]
        args, kwargs = pytree.tree_unflatten(moved, self.in_spec)
        with torch.no_grad():
            out = self.xmodel(*args, **kwargs)
        return [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


def export_lazy(model: Any, args: Sequence[Any], kwargs: dict[str, Any], names: list[str], calls_start: int, *,
                why: BaseException | None, stage: str, guard: dict[str, str | None] | None = None) -> Bundle:
    """The bundle of torch_xla's lazy trace of ``model(*args, **kwargs)``, or an
    ExportLoweringError saying why there is none. `why` is the error of `stage` ("torch.export" or
    "torch_xla's exporter") that made export fall back, None when the lazy trace was asked for;
    the manifest keeps it. `guard`: where the data dependence is, when known without `why`."""
    import torch  # the torch side: the JAX-only install imports export without torch
    import torch_xla

    from torch_xla_ext._compat import hlo, pytree  # import torch and torch_xla, as above

    if guard is None:
        guard = guard_site(why, model) if why is not None else {}
    reason = f"{stage}: {first_line(why, with_type=True)}" if why is not None else stage
    if where(guard):
        reason += f" [{where(guard)}]"
    if not isinstance(model, torch.nn.Module):
        raise ExportLoweringError(f"model: {reason}; the fallback to torch_xla's lazy trace needs an nn.Module "
                                  f"(its parameters are matched by identity), got {type(model).__name__}",
                                  **site_fields(guard)) from why
    device = torch_xla.device()
    try:
        xmodel = copy.deepcopy(model).to(device)  # the caller's model stays where it is
        leaves, in_spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
        # A buffer of its own per leaf, so each has its own tensor id (a leaf already on the
        # device, or passed twice, would otherwise share one with the caller's tensor).
        xleaves = [(x.detach().clone() if x.device == device else x.detach().to(device))
                   if isinstance(x, torch.Tensor) else x for x in leaves]
        xargs, xkwargs = pytree.tree_unflatten(xleaves, in_spec)
        torch_xla.sync()  # weights and inputs become device data, the graph's parameters
        counts = _HostSyncCounts()
        counts.wait()
        finder = _cut_finder(module_paths(xmodel), guard, counts)
        before = counts()
        try:
            with torch.no_grad(), finder:
                out = xmodel(*xargs, **xkwargs)
        except _Stop:
            out = None
        synced = [b - a for a, b in zip(before, counts())]
    except TorchXlaExtError:
        raise
    except Exception as e:  # noqa: BLE001 - the model does not run on torch_xla either: say both
        raise ExportLoweringError(f"model: {reason}; and torch_xla's lazy trace of the forward pass failed too "
                                  f"({first_line(e, with_type=True)})", **site_fields(guard)) from e
    if finder.cuts or any(synced):
        data_dependent = guard.get("op") is not None or why is not None and is_data_dependent(why)
        raise _specialised_error(reason, guard, synced, finder, data_dependent)

    out_leaves, out_spec = pytree.tree_flatten(out)
    paths = leaf_paths(out_spec)
    outputs = [(("output" + p), t) for p, t in zip(paths, out_leaves) if isinstance(t, torch.Tensor)]
    # Leaves pytree cannot see into (an unregistered class such as transformers' DynamicCache) are
    # not outputs of the program; the manifest says which.
    dropped = [f"output{p} ({type(t).__name__})" for p, t in zip(paths, out_leaves)
               if t is not None and not isinstance(t, (torch.Tensor, bool, int, float, str))]
    if dropped:
        reason += f"; not exported (not tensors to torch.utils._pytree): {', '.join(dropped)}"
    if not outputs:
        raise ExportLoweringError(f"model: {reason}; and the model's return value holds no tensor to export "
                                  f"({type(out).__name__})", **site_fields(guard))
    tensors = [t for _, t in outputs]
    # HLO parameter i is the i-th device-data tensor of the same walk of torch_xla's IR graph.
    ids, values, proto = hlo.graph_input_ids(tensors), hlo.graph_inputs(tensors), hlo.lowered_hlo_proto(tensors)

    # What each device buffer is, by torch_xla's tensor id (a tied weight is its first name).
    owner: dict[int, tuple[str, Any]] = {}
    for pos, x in enumerate(xleaves):
        if isinstance(x, torch.Tensor):
            owner.setdefault(hlo.tensor_id(x), ("input_arg", pos))
    kinds: dict[str, str] = {}
    for kind, named in (("parameter", xmodel.named_parameters(remove_duplicate=False)),
                        ("buffer", xmodel.named_buffers(remove_duplicate=False))):
        for name, t in named:
            if hlo.tensor_id(t) not in owner:
                owner[hlo.tensor_id(t)] = ("parameter", name)
                kinds[name] = kind
    locations, signature, state, constants = [], [], {}, []
    for tid, value in zip(ids, values):
        what, key = owner.get(tid, ("constant", None))
        if what == "input_arg":
            locations.append(InputLocation("input_arg", key, ""))
        elif what == "parameter":
            locations.append(InputLocation("parameter", -1, key))
            state[key] = _dtypes.numpy_from_tensor(value)
        else:  # made by torch_xla during the trace from no device data: a Python scalar, a factory op
            locations.append(InputLocation("constant", len(constants), ""))
            constants.append(_dtypes.numpy_from_tensor(value))
        signature.append((list(value.shape), str(value.dtype).replace("torch.", "")))
    try:
        text = _mlir_text.hlo_to_stablehlo_text(proto, "torch_xla's HLO", error=ValueError, debug_info=False)
    except ValueError as e:  # jaxlib's importer refused torch_xla's HLO
        raise ExportLoweringError(f"model: {reason}; and jaxlib cannot convert the HLO of torch_xla's lazy trace "
                                  f"to StableHLO ({first_line(e)})", **site_fields(guard)) from e
    tx = TorchXlaExport(
        text=text, input_locations=locations, input_signature=signature,
        output_signature=[(list(t.shape), str(t.dtype).replace("torch.", "")) for t in tensors],
        unused_inputs=[], state_dict=state, additional_constants=constants)
    tx.graph_module = LazyProgram(xmodel, in_spec, device)
    calls = _core.recorded_all_reduces_since(calls_start)
    bundle = from_torch_xla(tx, kinds, user_leaves(args, kwargs, names), calls,
                            output_names=[n for n, _ in outputs])
    bundle.manifest.traced_by = LAZY_TRACE
    bundle.manifest.fallback_reason = reason
    bundle.torch_xla_export = tx
    return bundle


class _Stop(Exception):
    """Ends a lazy trace that is already known to be cut (each further cut compiles a graph)."""


MAX_CUTS = 4  # each cut compiles and runs a graph: the trace stops after this many


class _HostSyncCounts:
    """(graphs executed, device-to-host transfers) so far in this process, from torch_xla's metrics
    (``ExecuteTime``, ``TransferFromDeviceTime``): a forward pass that moves either was cut into
    several graphs by the host. ``wait()`` lets every execution finish first, so the counts then
    move no more until something new runs."""

    NAMES = ("ExecuteTime", "TransferFromDeviceTime")

    def __init__(self) -> None:
        from torch_xla_ext._compat import metrics  # imports torch_xla: the torch side only

        self._metrics = metrics

    def wait(self) -> None:
        self._metrics.wait_device_ops()

    def __call__(self) -> tuple[int, int]:
        found = self._metrics.metrics(self.NAMES)
        return tuple(found[n].count if n in found else 0 for n in self.NAMES)


def _cut_finder(paths: dict[int, str], guard: dict[str, Any], counts: _HostSyncCounts):
    """A dispatch mode over the forward pass that notes every op after which torch_xla had executed
    a graph or copied device data to the host (``counts``, read around each op), with its module
    path and source line (`.cuts`). It stops the trace (raises _Stop) at the cut that matches
    torch.export's guard (same module or line), or after MAX_CUTS cuts."""
    from torch_xla_ext._compat.dispatch import TorchDispatchMode  # imports torch: the torch side only

    class CutFinder(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.found: dict[tuple, dict[str, Any]] = {}
            self.stopped = False

        @property
        def cuts(self) -> list[dict[str, Any]]:
            return list(self.found.values())

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            before = counts()
            out = func(*args, **(kwargs or {}))
            if counts() != before:
                self._note(str(func), sys._getframe(1))
            return out

        def _note(self, op: str, frame: Any) -> None:
            frames = []
            while frame is not None:
                frames.append((frame, frame.f_lineno))
                frame = frame.f_back
            site = site_of(frames, paths)
            key = (op, site["module_path"], site["source"])
            if key in self.found:
                self.found[key]["count"] += 1
            else:
                self.found[key] = {"op": op, **site, "count": 1}
            at_guard = (guard.get("source") is not None and site["source"] == guard["source"]) or \
                (guard.get("module_path") is not None and site["module_path"] == guard["module_path"])
            if at_guard or sum(c["count"] for c in self.found.values()) >= MAX_CUTS:
                self.stopped = True
                raise _Stop()

    return CutFinder()


def _specialised_error(reason: str, guard: dict, synced: list[int], finder: Any, data_dependent: bool):
    executed, transfers = synced
    cuts = finder.cuts
    listed = "; ".join(f"{c['op']} x{c['count']} in {where(c)}" for c in cuts)
    stopped = " (traced no further)" if finder.stopped else ""
    head = where(guard) or "model"
    if data_dependent:
        head += ": the model's shapes or control flow depend on its inputs' values"
    msg = (f"{head}: no one program to export. {reason.split(' [')[0]}. torch_xla's lazy trace of the same forward pass is "
           f"not one program either: it executed {executed} graph(s) and copied device data to the host "
           f"{transfers} time(s) midway, at {listed or 'ops not located'}{stopped}; each later graph takes "
           f"those results as device data, so what torch_xla compiles is specialised on this input's values "
           f"and is not exported. To export, make the shapes static (for a mixture of experts: "
           f"every expert on every token, weighted by the routing weights with zeros for unselected experts) "
           f"or move the data-dependent part out of the exported forward.")
    first = cuts[0] if cuts else {}
    module_path = guard.get("module_path") if guard.get("module_path") is not None else first.get("module_path")
    return ExportLoweringError(msg, module_path=module_path,
                               source=guard.get("source") or first.get("source"),
                               source_line=guard.get("source_line") or first.get("source_line"),
                               cuts=[{k: c[k] for k in ("op", "module_path", "source", "count")} for c in cuts])


__all__ = ["LAZY_TRACE", "LazyProgram", "export_lazy", "guard_site", "is_data_dependent", "site_of"]
