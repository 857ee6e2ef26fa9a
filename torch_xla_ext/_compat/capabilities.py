"""Which torch, torch_xla and JAX APIs each part of ``_compat`` relies on, by dotted name, and the
probe that resolves them: what :mod:`torch_xla_ext._versions` decides by instead of version strings.

A :class:`Group` is the set of upstream names one subsystem wrapper calls, reads or wraps
(``torch_xla._XLAC._get_ir_debug``, ``torch._dynamo.convert_frame._compile``, ...): every private
name, and the public entry points without which the wrapper means nothing. The canaries
(``tests/graph_breaks/compat_canary_test.py`` and the others) exercise the same names for what
they do; a name a wrapper uses only where it is present (``getattr(..., None)``) is in
``OPTIONAL`` instead, and ``tests/packaging/capabilities_test.py`` checks that every private name
used in ``_compat`` is listed in one or the other.

Probing imports the longest importable module of each name and looks up the rest as attributes:
nothing is called, and each name is resolved once per process. A top-level package that does not
load (a torch_xla whose ``_XLAC`` links another torch) is reported with its own error.

Example:
    >>> from torch_xla_ext._compat import capabilities
    >>> capabilities.missing("jax.export")
    []
    >>> capabilities.resolve("jax.export.no_such_function")
    'jax.export has no attribute no_such_function'
"""

from __future__ import annotations

import dataclasses
import importlib
import threading

from torch_xla_ext._compat import torchax_import
from torch_xla_ext.errors import first_line

__all__ = ["GROUPS", "MOVED", "OPTIONAL", "Group", "distribution_of", "missing", "resolve"]


@dataclasses.dataclass(frozen=True)
class Group:
    """The upstream names one wrapper in ``_compat`` (``modules``) relies on."""

    key: str
    title: str
    modules: tuple[str, ...]
    apis: tuple[str, ...]

    @property
    def distributions(self) -> tuple[str, ...]:
        """The distributions the names come from, in the gate's order ('torch', 'torch_xla', 'jax',
        'jaxlib', 'torchax')."""
        found = {distribution_of(a) for a in self.apis}
        return tuple(d for d in _TOP.values() if d in found)


_TOP = {"torch": "torch", "torch_xla": "torch_xla", "jax": "jax", "jaxlib": "jaxlib", "torchax": "torchax"}


def distribution_of(name: str) -> str:
    """'torch_xla' for 'torch_xla._XLAC._get_ir_debug': the distribution a dotted name comes from."""
    return _TOP[name.split(".", 1)[0]]


GROUPS: dict[str, Group] = {g.key: g for g in (
    # ---- torch_xla ---------------------------------------------------------------------------
    Group("torch_xla.runtime", "torch_xla's device, runtime and tensor ids",
          ("_compat/stablehlo.py", "_compat/xla_builder.py", "_compat/hlo.py", "_compat/collectives.py"), (
              "torch_xla.device", "torch_xla.runtime.device_type", "torch_xla.runtime.world_size",
              "torch_xla._XLAC._xla_get_tensor_id",
          )),
    Group("torch_xla.collectives", "torch_xla's all-reduce lowerings", ("_compat/collectives.py",), (
        "torch.ops._c10d_functional.all_reduce", "torch_xla._XLAC._xla_all_reduce",
    )),
    Group("torch_xla.stablehlo", "torch_xla's StableHLO exporter", ("_compat/stablehlo.py",), (
        "torch_xla.stablehlo.exported_program_to_stablehlo", "torch_xla.stablehlo.StableHLOExportOptions",
        "torch_xla.stablehlo.StableHLOGraphModule", "torch_xla.stablehlo._run_decompositions",
        "torch_xla._XLAC._run_stablehlo",
    )),
    Group("torch_xla.lazy_hlo", "torch_xla's HLO of pending lazy tensors", ("_compat/hlo.py",), (
        "torch_xla._XLAC._get_xla_tensors_hlo", "torch_xla._XLAC._get_xla_tensors_hlo_proto",
        "torch_xla._XLAC._get_xla_tensors_text", "torch_xla._XLAC._get_tensors_xla_device_data_node",
    )),
    Group("torch_xla.ir_debug", "torch_xla's IR debug switch (each IR node's Python frames)", ("_compat/hlo_debug.py",), (
        "torch_xla._XLAC._get_ir_debug", "torch_xla._XLAC._set_ir_debug",
    )),
    Group("torch_xla.op_metadata", "torch_xla's HLO op metadata (module paths; with the IR debug switch)",
          ("_compat/hlo_debug.py",), (
        "torch_xla._XLAC._set_xla_custom_op_name_prefix",
        "torch.utils._python_dispatch.TorchDispatchMode", "torch.utils._pytree.tree_leaves",
        "jax._src.lib._jax.HloModule", "jax._src.lib._jax.HloPrintOptions", "jax._src.lib._jax.hlo_module_from_text",
    )),
    Group("torch_xla.scan", "torch_xla's scan and scan_layers", ("_compat/scan.py",), (
        "torch_xla.experimental.scan.scan", "torch_xla.experimental.scan_layers.scan_layers",
        "torch.utils._pytree.tree_map",
    )),
    Group("torch_xla.call_jax", "torch_xla's call_jax and user computations", ("_compat/xla_builder.py",), (
        "torch_xla.core.xla_builder.call_jax", "torch_xla._XLAC._init_computation_client",
        "torch_xla._XLAC._xla_op_computation_from_module_proto", "torch_xla._XLAC._xla_user_computation",
    )),
    Group("torch_xla.dynamo_bridge", "torch_xla's openxla Dynamo bridge", ("_compat/openxla.py",), (
        "torch._dynamo.backends.torchxla.xla_backend_helper", "torch._functorch.aot_autograd.get_graph_being_compiled",
        "torch_xla.core.dynamo_bridge.extract_compiled_graph",
        "torch_xla._dynamo.dynamo_bridge.extract_internal",
        "torch_xla._dynamo.dynamo_bridge.UnsupportedNodesCollector.get_unsupported_nodes",
        "torch_xla._dynamo.dynamo_bridge.UnsupportedNodesCollector.run_node",
        "torch_xla._XLAC._get_graph_hash", "torch_xla._XLAC._xla_warm_up_cache", "torch_xla._XLAC._run_cached_graph",
    )),
    Group("torch_xla.lazy", "torch_xla's lazy-tensor runtime: the step marker, devices, ordinal and pending graph",
          ("_compat/lazy.py",), (
              "torch_xla._XLAC._xla_step_marker",
              "torch_xla._XLAC._xla_get_default_device", "torch_xla._XLAC._xla_get_device_ordinal",
              "torch_xla._XLAC._xla_runtime_is_initialized", "torch_xla.runtime.process_index",
              "torch_xla._XLAC._get_stablehlo",
          )),
    Group("torch_xla.metrics", "torch_xla's counters and metrics (CompileTime among them)", ("_compat/metrics.py",), (
        "torch_xla.debug.metrics.metric_data", "torch_xla.debug.metrics.metric_names",
        "torch_xla._XLAC._xla_counter_names", "torch_xla._XLAC._xla_counter_value",
        "torch_xla._XLAC._clear_xla_counters", "torch_xla._XLAC._xla_wait_device_ops",
    )),
    # ---- torchax -----------------------------------------------------------------------------
    Group("torchax", "torchax's lowering of a torch.export program to JAX, and its c10d collectives' axis",
          ("_compat/torchax.py",), (
              "torchax.default_env", "torchax.export.JaxInterpreter", "torchax.export.extract_avals",
              "torchax.decompositions.DECOMPOSITIONS", "torchax.ops.ops_registry.all_aten_ops",
              "torch._ops.OpOverload", "torch._ops.OpOverloadPacket",
              "jax.export.export", "jax.sharding.AbstractMesh",
          )),
    Group("torchax.interop", "torchax's jit and dispatch seams, which the script trace records through",
          ("_compat/torchax_interop.py",), (
              "torchax.interop.wrap_jax_jit", "torchax.interop.jax_jit", "torchax.interop.call_jax",
              "torchax.interop.jax_view", "torchax.interop.JittableModule",
              "torchax.interop.JittableModule.functional_call", "torchax.tensor.Environment.dispatch",
          )),
    Group("torchax.run", "torchax running a model for parity: torchax.compile's forward under jax.jit, its eager "
          "run, its op registry (an Environment's _ops entries, overridden and restored: the values an eager run "
          "reads back) and a module's forward with its weights as arguments",
          ("_compat/torchax_run.py",), (
              "torchax.default_env", "torchax.compile", "torchax.interop.jax_view", "torchax.interop.torch_view",
              "torchax.tensor.Environment._get_op_or_decomp", "torchax.tensor.Environment.override_op_definition",
              "torchax.tensor.Environment.manual_seed", "torchax.tensor.Environment.to_xla",
              "torchax.tensor.Environment.t2j_iso", "torchax.tensor.Environment.j2t_iso",
              "torchax.tensor.Tensor", "torchax.tensor.View",
              "torch.nn.utils.stateless._reparametrize_module", "jax.jit",
          )),
    Group("torchax.dispatch", "torchax's dispatch op by op, for parity's op audit: each op an eager run lowers, the "
          "lowering its table holds for it, and the same op by torch on the CPU outside torchax's modes",
          ("_compat/torchax_dispatch.py",), (
              "torchax.tensor.Environment.dispatch", "torchax.tensor.Environment._get_op_or_decomp",
              "torchax.tensor.OperatorNotFound", "torchax.tensor.TENSOR_CONSTRUCTORS", "torchax.tensor.Tensor",
              "torchax.tensor.View", "torch.ops.aten._to_copy", "torch.ops.aten.lift_fresh",
              "torch.utils._mode_utils.no_dispatch", "torch._C.DisableTorchFunction", "jax.default_device",
          )),
    # ---- torch -------------------------------------------------------------------------------
    Group("torch.pytree", "torch's pytree (the order and key paths of inputs and outputs) and Python dispatch",
          ("_compat/pytree.py", "_compat/dispatch.py"), (
              "torch.utils._pytree.tree_flatten", "torch.utils._pytree.tree_flatten_with_path",
              "torch.utils._pytree.tree_unflatten", "torch.utils._pytree.tree_leaves", "torch.utils._pytree.tree_map",
              "torch.utils._pytree.keystr", "torch.utils._pytree.TreeSpec", "torch.utils._pytree.SUPPORTED_NODES",
              "torch.utils._python_dispatch.TorchDispatchMode", "torch.Tensor._make_wrapper_subclass",
          )),
    Group("torch.dynamo", "Dynamo's frame compiles, graph breaks and recompiles", ("_compat/dynamo.py",), (
        "torch._dynamo.reset", "torch._dynamo.convert_frame._compile",
        "torch._dynamo.convert_frame.get_and_maybe_log_recompilation_reasons",
        "torch._dynamo.symbolic_convert.log_graph_break",
        "torch._dynamo.output_graph.GraphCompileReason", "torch._dynamo.output_graph.OutputGraph.call_user_compiler",
        "torch._dynamo.exc.Unsupported.add_to_stats", "torch._dynamo.exc.TorchDynamoException",
        "torch._guards.CompileContext",
        "torch._ops.OpOverload", "torch._ops.OpOverloadPacket",
    )),
    Group("torch.trace", "torch's structured trace (TORCH_TRACE, tlparse)", ("_compat/trace_log.py",), (
        "torch._logging.trace_structured", "torch._logging._internal.trace_log",
        "torch._logging._internal.LazyTraceHandler", "torch._guards.CompileId.from_string",
    )),
    # ---- JAX ---------------------------------------------------------------------------------
    Group("jax.mlir", "JAX's MLIR bindings, StableHLO versions and a PJRT CPU client of our own",
          ("_compat/jax_mlir.py",), (
              "jax.extend.mlir.ir.Module", "jax.extend.mlir.hlo_to_stablehlo",
              "jax.extend.mlir.serialize_portable_artifact", "jax.extend.mlir.deserialize_portable_artifact",
              "jax._src.interpreters.mlir.make_ir_context", "jax._src.interpreters.mlir.module_to_bytecode",
              "jax._src.lib.mlir.dialects.hlo.get_current_version", "jax._src.lib.mlir.dialects.hlo.get_api_version",
              "jax._src.lib.mlir.dialects.hlo.get_minimum_version", "jax._src.lib.xla_client.make_cpu_client",
              "jax._src.lib.xla_client.CompileOptions", "jax._src.lib.xla_client.DeviceAssignment",
              "jax._src.lib.xla_client.DeviceList", "jax._src.lib.xla_client.XlaRuntimeError",
              "jax.make_array_from_single_device_arrays",
          )),
    Group("jax.export", "jax.export's Exported, its serialization and calling conventions", ("_compat/jax_export.py",), (
        "jax.export.Exported", "jax.export.deserialize", "jax.export.minimum_supported_calling_convention_version",
        "jax.export.maximum_supported_calling_convention_version",
    )),
    Group("jax.monitoring", "JAX's compile events and their listeners, the process index, a call's cache key "
          "(pytree paths and abstract values), the concretization errors, the jitted-call boundary",
          ("_compat/jax_monitoring.py", "_compat/jax_cache_key.py"), (
              "jax.monitoring.register_scalar_listener", "jax.monitoring.register_event_duration_secs_listener",
              "jax._src.dispatch.BACKEND_COMPILE_EVENT", "jax._src.dispatch.JAXPR_TRACE_EVENT",
              "jax._src.dispatch.JAXPR_TO_MLIR_MODULE_EVENT", "jax._src.traceback_util.api_boundary",
              "jax.process_index", "jax.process_count", "jax.typeof", "jax.tree_util.tree_flatten_with_path",
              "jax.tree_util.keystr", "jax.errors.ConcretizationTypeError", "jax.errors.TracerBoolConversionError",
              "jax.errors.TracerIntegerConversionError", "jax.errors.TracerArrayConversionError",
              "jax.errors.NonConcreteBooleanIndexError",
          )),
    Group("jax.trace", "JAX's lowering configuration (call_jax's cache key, GSPMD)", ("_compat/jax_trace.py",), (
        "jax._src.config.trace_context", "jax._src.config.use_shardy_partitioner",
    )),
    Group("jaxlib.mhlo", "jaxlib's mhlo passes", ("_compat/mhlo.py",), (
        "jaxlib.mlir._mlir_libs._mlirHlo.register_mhlo_passes", "jax.extend.mlir.passmanager.PassManager",
    )),
)}

# Private names a wrapper uses only where they exist, with its fallback (so they decide nothing):
OPTIONAL = (
    "torch._C._storage_Use_Count",  # storage.sole_holder: False where missing
    "torch._dynamo.exc._load_gb_type_to_gb_id_map",  # dynamo: no GB ids where missing
    "torch._dynamo.exc.get_gbid_documentation_link",  # dynamo: no GB documentation link
    "torch_xla._internal.jax_workarounds.jax_env_context",  # xla_builder.jax_env: a no-op context
    "torch_xla.core.xla_builder._JAX_TO_XLA_COMPUTATION_CACHE",  # xla_builder: not shared where missing
    "torch_xla.core.xla_builder._jax_to_xla_computation_cache_elements",  # xla_builder: None where missing
    "jax._src.lib.mlir.dialects.hlo.get_version_from_compatibility_requirement",  # jax_mlir: StableHLO API >= 9
    "jax._src.lib.mlir.dialects.hlo.StablehloCompatibilityRequirement",  # jax_mlir: StableHLO API >= 9
    "jax._src.lib.xla_client.batched_device_put",  # jax_mlir._place: jaxlib without buffer_from_pyval
    "jax._src.core.ShapedArray",  # jax_mlir._place: jaxlib without buffer_from_pyval
    "jax._src.interpreters.mlir._create_ir_context",  # jax_mlir.make_context: where make_ir_context reuses contexts
)

# Names a newer upstream moved, the pinned stack's name -> where the wrapper finds it there. A
# group lists the pinned name; it counts as present where either resolves.
MOVED = {
    # torch >= 2.11: a method of the instruction translator, (self, code_options, reason, exc).
    "torch._dynamo.symbolic_convert.log_graph_break":
        "torch._dynamo.symbolic_convert.InstructionTranslatorBase.log_graph_break",
}

_resolved: dict[str, str | None] = {}
# Re-entrant: resolving a name imports modules whose import hooks (the script trace's)
# resolve names too.
_lock = threading.RLock()


def resolve(name: str) -> str | None:
    """None when the dotted ``name`` resolves in this process, else why not (one line): the
    module that is missing, the attribute a module lacks, or the error its import raised."""
    with _lock:
        if name not in _resolved:
            _resolved[name] = _resolve(name)
        return _resolved[name]


def _resolve(name: str) -> str | None:
    parts = name.split(".")
    if parts[0] == "torchax":
        torchax_import.install()  # torchax 0.0.13 on a torch that removed ops its tables name
    obj, k = None, len(parts)
    while k > 0:
        module = ".".join(parts[:k])
        try:
            obj = importlib.import_module(module)
            break
        except ModuleNotFoundError as e:
            # Not a module (an attribute of its parent, or absent): try the parent. A module that
            # exists but imports something missing says so instead.
            if e.name != module and not module.startswith(f"{e.name}."):
                return f"importing {module} failed: {first_line(e, with_type=True)}"
            k -= 1
        except Exception as e:  # noqa: BLE001 - a package that does not load says why in its error
            return f"importing {module} failed: {first_line(e, with_type=True)}"
    if obj is None:
        return f"no module {parts[0]}"
    where = ".".join(parts[:k])
    for part in parts[k:]:
        try:
            obj = getattr(obj, part)
        except Exception:  # noqa: BLE001 - a lazy attribute may raise anything; it is missing either way
            return f"{where} has no attribute {part}"
        where += "." + part
    return None


def missing(*groups: str) -> list[tuple[str, str, str]]:
    """(group key, name, why) for every name of ``groups`` that does not resolve, in table order;
    [] when all do. Each name is resolved once per process."""
    out = []
    for key in groups:
        for name in GROUPS[key].apis:
            why = resolve(name)
            if why is not None and name in MOVED and resolve(MOVED[name]) is None:
                why = None  # found where the newer upstream moved it
            if why is not None:
                out.append((key, name, why))
    return out
