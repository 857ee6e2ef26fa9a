"""`main`'s value graph for the C++ analysis (cc/collectives/analysis.h): the module parsed with
JAX's MLIR bindings, checked (depth, dialects, static shapes), walked into (values, ops), analysed
into input kinds and collectives.

Example:
    >>> import torch
    >>> from torch_xla_ext import export
    >>> x = torch.randn(2, 4)
    >>> bundle = export.export(torch.nn.Linear(4, 4), (x,))
    >>> text = bundle.module_text
    >>> ctx, module = parse(text, "module.mlir")
    >>> argument_types(module, "module.mlir")
    [([4], 'float32'), ([4, 4], 'float32'), ([2, 4], 'float32')]
    >>> analyze_into(text, bundle.manifest, [], "module.mlir")   # fills kinds and collectives
    >>> [i.kind for i in bundle.manifest.inputs], bundle.manifest.collectives
    (['parameter', 'parameter', 'user_input'], [])
"""

from __future__ import annotations

from typing import Callable

from torch_xla_ext import _mlir_graph, _mlir_text
from torch_xla_ext._compat import jax_mlir
from torch_xla_ext._ext import collectives as _core
from torch_xla_ext.export.errors import BundleError, ModuleTextError, UnknownDialectError
from torch_xla_ext.export.manifest import ELEMENT_TYPES, MANIFEST_FILE, Collective, Manifest

def parse(text: str, where: str):
    """(context, module) of StableHLO text (the one parser, torch_xla_ext/_mlir_text.py): a
    BundleError naming `where` for text nested too deeply, a ModuleTextError for text MLIR
    rejects, an UnknownDialectError naming the dialect MLIR does not know."""
    return _mlir_text.parse(text, where, error=BundleError, syntax_error=ModuleTextError,
                            dialect_error=UnknownDialectError)


def main_func(module, where: str):
    from jax.extend.mlir import ir

    for op in module.body.operations:
        if "sym_name" in op.attributes and ir.StringAttr(op.attributes["sym_name"]).value == "main":
            return op
    raise BundleError(f"{where}: module has no function 'main'")


def tensor_type(t, where: str = "value") -> tuple[list[int], str]:
    """(shape, dtype name) of a statically shaped tensor type; a BundleError naming `where` for a
    dynamic dimension, an unranked tensor or a non-tensor."""
    from jax.extend.mlir import ir

    if not jax_mlir.isa(t, ir.RankedTensorType):
        raise BundleError(f"{where}: type {t} is not a ranked tensor")
    rt = ir.RankedTensorType(t)
    if not rt.has_static_shape:
        dims = [k for k in range(rt.rank) if rt.is_dynamic_dim(k)]
        raise BundleError(f"{where}: type {t} has dynamic dimension(s) {dims}; only static shapes can be "
                          f"loaded and run (export with static example inputs)")
    et = str(rt.element_type)
    return list(rt.shape), ELEMENT_TYPES.get(et, et)


def argument_types(module, where: str, describe: Callable[[int], str] | None = None) -> list[tuple[list[int], str]]:
    """(shape, dtype) of every argument of main; errors name the argument (and what it is)."""
    main = main_func(module, where)
    out = []
    for k, a in enumerate(main.regions[0].blocks[0].arguments):
        what = f" ({describe(k)})" if describe else ""
        out.append(tensor_type(a.type, f"{where}: main's argument {k}{what}"))
    return out


def build_graph(ctx, module, where: str):
    """main's top level as the value graph the C++ analysis takes (``_ext.graph.Graph``), from the
    one MLIR walker and its one converter (torch_xla_ext/_mlir_graph.py)."""
    with ctx:
        g = _mlir_graph.walk(main_func(module, where), nested=False, error=BundleError)
    return _mlir_graph.core_graph(g)


COLLECTIVE_OPS = _mlir_graph.COLLECTIVE_OPS


def nested_collectives(ctx, module, where: str) -> list[dict[str, str]]:
    """Collectives inside regions of main's ops (while/case bodies): the analysis sees main's top
    level only, so these are listed in the manifest rather than described."""
    found: list[dict[str, str]] = []
    with ctx:
        walked = _mlir_graph.pre_order(main_func(module, where).regions[0].blocks[0])
        top: list[int] = []  # per op, its top-level ancestor (itself at the top level)
        for w, (op, parent, _) in enumerate(walked):
            top.append(w if parent < 0 else top[parent])
            outer = walked[top[w]][0].name
            # a top-level collective's region is its reduction body, not a nested collective
            if parent >= 0 and op.name in COLLECTIVE_OPS and outer not in COLLECTIVE_OPS:
                found.append({"op": op.name[len("stablehlo."):], "inside": outer})
    return found


def describe_input(manifest: Manifest) -> Callable[[int], str]:
    """What main's argument k is, for error messages ("user input 0 'x'", "parameter 'fc.weight'")."""
    def describe(k: int) -> str:
        if k >= len(manifest.inputs):
            return "not in the manifest"
        i = manifest.inputs[k]
        if i.kind == "user_input":
            return f"user input at position {i.position}" + (f" '{i.name}'" if i.name else "")
        return i.kind + (f" '{i.name}'" if i.name else "")
    return describe


def analyze_into(text: str, manifest: Manifest, calls: list[_core.AllReduceCall], where: str, parsed=None) -> None:
    """Fills `manifest`'s input kinds, collectives and nested collectives from main's graph."""
    ctx, module = parsed or parse(text, where)
    with ctx:
        arg_types = argument_types(module, where, describe_input(manifest))
    g = build_graph(ctx, module, where)
    manifest.nested_collectives = nested_collectives(ctx, module, where)
    check_signature(arg_types, manifest, where)
    declared = [_core.DeclaredInput(i.kind if i.kind != "collective_token" else "constant", i.value)
                for i in manifest.inputs]
    a = _core.analyze(g, declared)
    for inp, kind in zip(manifest.inputs, a.input_kinds):
        inp.kind = kind
    # Match recorded all-reduce calls to the module's all-reduces in program order; a model
    # traced more than once records each call once per trace, so take the newest trace.
    all_reduces = [c for c in a.collectives if c.op == "all_reduce"]
    recorded = calls[-len(all_reduces):] if all_reduces and len(calls) % len(all_reduces) == 0 and calls else []
    it = iter(recorded)
    for c in a.collectives:
        call = next(it) if (recorded and c.op == "all_reduce") else None
        manifest.collectives.append(Collective(
            op=c.op, reduce=c.reduce, replica_groups=c.replica_groups,
            token_input=c.token_input, token_mixed_into_operand=c.token_mixed_into_operand,
            operand_inputs=c.operand_inputs, scale=c.scale,
            requested_scale=None if call is None else call.requested_scale,
            lowering=None if call is None else call.lowering))


def check_signature(arg_types: list[tuple[list[int], str]], manifest: Manifest, where: str) -> None:
    if len(arg_types) != len(manifest.inputs):
        raise BundleError(f"{where}: main has {len(arg_types)} arguments but {MANIFEST_FILE} field "
                          f"'inputs' has {len(manifest.inputs)} entries")
    for i, ((shape, dtype), inp) in enumerate(zip(arg_types, manifest.inputs)):
        if list(shape) != list(inp.shape):
            raise BundleError(f"{MANIFEST_FILE}: field 'inputs[{i}].shape' is {inp.shape} but main's "
                              f"argument {i} in {where} has shape {shape}")
        if dtype != inp.dtype:
            raise BundleError(f"{MANIFEST_FILE}: field 'inputs[{i}].dtype' is {inp.dtype} but main's "
                              f"argument {i} in {where} has dtype {dtype}")
