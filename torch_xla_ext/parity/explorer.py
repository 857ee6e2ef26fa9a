"""The per-op error of the XLA run's program as Model Explorer node data.

Writes, into one directory, the program as StableHLO text (``program.mlir``, each op's HLO instruction
name as its ``hlo.instruction`` attribute) and ``node_data.json`` in the format of Model Explorer's
``node_data_builder`` (``{graph id: {"name": ..., "results": {node id: {"value": v}},
"thresholds": [...]}}``), plus ``node_names.json`` (node id -> HLO instruction, for reading the
data by hand) and ``module_paths.json`` (node id -> the ``named_modules()`` path of the module
whose forward produced the op, also each op's ``module.path`` attribute and location, i.e. its
Model Explorer namespace; or why there are none: torch_xla writes the op metadata they come from
only with ``XLA_HLO_DEBUG=1`` set before its first lowering, see ``_compat/hlo_debug.py``).
Each value is an op's greatest |rounded - exact| over its result divided by the exact result's
greatest magnitude: how far the program as XLA:CPU rounds it has drifted from its
exact fp64 math at that op. Ops within one unit roundoff of the type the program rounds to
(bf16: 2^-8) stay white; the colour deepens with the error, and the worst tenth of the ops is
red (:func:`thresholds`).

What Model Explorer's built-in MLIR adapter needs, and this module guarantees:

* only dialects it knows: jaxlib's ``hlo_to_stablehlo`` leaves ops that StableHLO lacks in
  ``mhlo`` (``mhlo.erf`` for every exact GELU); :func:`explorer_module_text` rebuilds each as its
  CHLO or StableHLO op with jaxlib's MLIR (same operands, attributes, result types, location),
  and lowers any mhlo op with no such counterpart with jaxlib's ``hlo-legalize-to-stablehlo``
  pass (a ``stablehlo.custom_call``); an op that neither reaches raises ParityError naming it;
* node ids as the adapter makes them (``src/builtin-adapter/translate_helpers.cc``): per
  function a counter over its ops in order, terminators included; a StableHLO op's own regions
  are numbered right after it, one level deep (:func:`node_ids`).

Open both with ``model-explorer program.mlir --node_data_paths=node_data.json``
(:func:`open_command`).

Example:
    >>> import ml_dtypes, numpy as np
    >>> text = '''func.func @main(%x: tensor<2x4xbf16>, %w: tensor<4x4xbf16>, %b: tensor<4xbf16>) -> tensor<2x4xbf16> {
    ...   %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<2x4xbf16>, tensor<4x4xbf16>) -> tensor<2x4xbf16>
    ...   %1 = stablehlo.broadcast_in_dim %b, dims = [1] : (tensor<4xbf16>) -> tensor<2x4xbf16>
    ...   %2 = stablehlo.add %0, %1 : tensor<2x4xbf16>
    ...   return %2 : tensor<2x4xbf16>
    ... }'''
    >>> program = Program(text)
    >>> x, w, b = np.ones((2, 4), ml_dtypes.bfloat16), np.eye(4, dtype=ml_dtypes.bfloat16), np.ones(4, ml_dtypes.bfloat16)
    >>> sorted(write_model_explorer(program, [x, w, b], "explorer/"))   # then: open_command("explorer")
    ['module_paths', 'node_data', 'node_names', 'program']
"""

from __future__ import annotations

import os
import re
import shlex
from typing import Any, Sequence

import numpy as np


from torch_xla_ext import _dtypes, _json
from torch_xla_ext._compat import mhlo as _mhlo
from torch_xla_ext._compat.hlo_debug import NEEDS, NO_MODULE
from torch_xla_ext.parity.errors import ParityError, ParityTypeError, ReplayError
from torch_xla_ext.parity.program.mlir import ir
from torch_xla_ext.parity.program.replay import Replay
from torch_xla_ext.parity.program.stablehlo import Program, functions, location_name, parse

__all__ = ["ADAPTER_DIALECTS", "explorer_module_text", "node_ids", "open_command", "thresholds",
           "write_model_explorer"]

PROGRAM_FILE = "program.mlir"
NODE_DATA_FILE = "node_data.json"
NAMES_FILE = "node_names.json"
INSTRUCTION_ATTR = "hlo.instruction"  # each op's HLO instruction name, shown among its attributes
MODULE_ATTR = "module.path"  # the nn.Module whose forward produced the op (named_modules() path)
MODULES_FILE = "module_paths.json"
# The dialects Model Explorer's built-in MLIR adapter registers (measured on 0.1.34; mhlo is not one).
ADAPTER_DIALECTS = ("arith", "builtin", "chlo", "func", "scf", "sdy", "shape", "stablehlo", "tf", "tfl", "tosa",
                    "vhlo")
# Ours: what a program of torch_xla's may contain once rewritten.
_OUTPUT_DIALECTS = ("builtin", "chlo", "func", "sdy", "stablehlo")
# Unit roundoff (half an ULP at 1) of each float type the program may round to.
UNIT_ROUNDOFF = {_dtypes.by_name(n).mlir: 2.0 ** -(_dtypes.float_format(n)[1] + 1)
                  for n in ("bfloat16", "float16", "float32", "float64")}
# Colours of the threshold bands: within one rounding, up to the 75th percentile, the 90th, beyond.
_BANDS = ("#ffffff", "#fee6ce", "#fdae6b", "#e6550d")
_BEYOND = 1e300  # JSON has no infinity; larger than any relative error


def _dialect(name: str) -> str:
    return name.split(".", 1)[0]


def explorer_module_text(text: str, module_paths: dict[str, str] | None = None) -> str:
    """``text`` (StableHLO as jaxlib's ``hlo_to_stablehlo`` prints it) with every ``mhlo`` op
    replaced by its CHLO/StableHLO form: what Model Explorer's adapter parses. Raises ParityError
    naming an op of a dialect the adapter does not know that remains. With ``module_paths`` (HLO
    instruction -> ``named_modules()`` path), each op carries its path as the ``module.path``
    attribute and as its location, ``/``-separated, which the adapter makes the node's namespace:
    Model Explorer groups the ops into the model's layers.

    Example:
        >>> text = '''func.func @main(%x: tensor<2xbf16>) -> tensor<2xbf16> {
        ...   %0 = stablehlo.multiply %x, %x : tensor<2xbf16>
        ...   return %0 : tensor<2xbf16>
        ... }'''
        >>> "mhlo." in explorer_module_text(text)
        False
    """
    ctx, module = parse(text, "the program")
    with ctx, ir.Location.unknown():
        mhlo_ops: list[Any] = []

        def collect(op: Any) -> None:
            for region in op.regions:
                for block in region.blocks:
                    for inner in block.operations:
                        inner = inner.operation
                        if _dialect(inner.name) == "mhlo":
                            mhlo_ops.append(inner)
                        collect(inner)

        collect(module.operation)
        leftover = False
        for op in mhlo_ops:
            bare = op.name.split(".", 1)[1]
            target = next((f"{d}.{bare}" for d in ("chlo", "stablehlo") if ctx.is_registered_operation(f"{d}.{bare}")),
                          None)
            if target is None or len(op.regions) > 0:
                leftover = True  # no same-named counterpart: the legalization pass below
                continue
            new = ir.Operation.create(
                target, results=[r.type for r in op.results], operands=list(op.operands),
                attributes={a.name: a.attr for a in op.attributes}, loc=op.location, ip=ir.InsertionPoint(op))
            for old, repl in zip(op.results, new.results):
                old.replace_all_uses_with(repl)
            op.erase()
        if leftover:
            try:
                _mhlo.legalize_to_stablehlo(module)
            except ir.MLIRError as e:
                raise ReplayError(f"the program's mhlo ops do not legalize to StableHLO: {e}") from None
        _name_ops(module.operation, module_paths or {})
        if not module.operation.verify():
            raise ReplayError("the program does not verify after its mhlo ops were rewritten")
        foreign = sorted({n for n in _op_names(module.operation) if _dialect(n) not in _OUTPUT_DIALECTS})
        if foreign:
            raise ParityError(f"the program has ops Model Explorer's MLIR adapter cannot read: {', '.join(foreign)}")
        # The adapter makes a namespace of each op's location name: HLO instruction names would
        # be one group per op, so locations are printed only when they are module paths.
        if not module_paths:
            return module.operation.get_asm(enable_debug_info=False, large_elements_limit=None)
        return _module_locations(module.operation.get_asm(enable_debug_info=True, large_elements_limit=None),
                                 module_paths)


_NAME_LOC = re.compile(r'loc\("((?:[^"\\]|\\.)*)"\)')


def _module_locations(text: str, module_paths: dict[str, str]) -> str:
    """Each ``loc("<HLO instruction>")`` (jaxlib's bindings here cannot set an op's location) as
    ``loc("<module path, / for .>")``, or ``loc(unknown)`` without a path: one namespace per module."""
    def repl(m: re.Match) -> str:
        path = module_paths.get(m.group(1))
        return f'loc("{path.replace(".", "/")}")' if path else "loc(unknown)"

    return _NAME_LOC.sub(repl, text)


def _name_ops(op: Any, module_paths: dict[str, str]) -> None:
    """Each op's HLO instruction name (its location) as its ``hlo.instruction`` attribute; with
    ``module_paths``, its module path as ``module.path`` and as its location (unknown without one)."""
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                inner = inner.operation
                name = location_name(inner.location)
                if inner.name not in ("func.func", "func.return"):
                    if name:
                        inner.attributes[INSTRUCTION_ATTR] = ir.StringAttr.get(name)
                    path = module_paths.get(name)
                    if path is not None:
                        inner.attributes[MODULE_ATTR] = ir.StringAttr.get(path)
                _name_ops(inner, module_paths)


def _op_names(op: Any) -> set[str]:
    names = set()
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                names.add(inner.operation.name)
                names |= _op_names(inner.operation)
    return names


def node_ids(text: str) -> dict[str, list[str]]:
    """Per function, the Model Explorer node id of each top-level op (in order), by the rule of
    the adapter's ``FuncOpToSubgraph``: one counter per function over its ops in order
    (terminators too); right after a StableHLO or Shardy op come the ops of its regions, one
    level deep (their own regions are not expanded, except Shardy's).

    Example:
        >>> text = '''func.func @main(%x: tensor<2xbf16>) -> tensor<2xbf16> {
        ...   %0 = stablehlo.multiply %x, %x : tensor<2xbf16>
        ...   return %0 : tensor<2xbf16>
        ... }'''
        >>> node_ids(text)["main"]                  # the multiply, then the return
        ['0', '1']
    """
    ctx, module = parse(text, "the program")
    out: dict[str, list[str]] = {}
    with ctx:
        for f in functions(module):
            counter = [0]
            top: list[str] = []

            def nested(op: Any) -> None:
                for region in op.regions:
                    for block in region.blocks:
                        for inner in block.operations:
                            counter[0] += 1
                            if _dialect(inner.operation.name) == "sdy":
                                nested(inner.operation)

            for op in f.regions[0].blocks[0].operations:
                op = op.operation
                top.append(str(counter[0]))
                counter[0] += 1
                if _dialect(op.name) in ("stablehlo", "sdy"):
                    nested(op)
            out[ir.StringAttr(f.attributes["sym_name"]).value] = top
    return out


def thresholds(element_type: str, values: Sequence[float]) -> list[dict[str, Any]]:
    """Model Explorer's ``thresholds`` (a value at or below a band's ``value`` takes its colour)
    for the relative errors ``values`` of a program that rounds to ``element_type``: white within
    one unit roundoff (one rounding: nothing to see), then pale up to the 75th percentile of the
    values, orange up to the 90th, and red above: the worst tenth of the ops stands out whatever
    the model's error scale (error accumulates, so many ops sit near the worst).

    Example:
        >>> [t["value"] for t in thresholds("bf16", [k / 100 for k in range(1, 11)])]
        [0.00390625, 0.07, 0.09, 1e+300]
    """
    if element_type not in UNIT_ROUNDOFF:
        raise ParityError(f"element_type: expected one of {sorted(UNIT_ROUNDOFF)}, got {element_type!r}")
    u = UNIT_ROUNDOFF[element_type]
    above = np.asarray([v for v in values if v > u], dtype=np.float64)
    out = [{"value": u, "bgColor": _BANDS[0]}]
    if above.size:
        for q, colour in ((75, _BANDS[1]), (90, _BANDS[2])):
            edge = float(np.percentile(above, q, method="lower"))
            if edge > out[-1]["value"]:
                out.append({"value": edge, "bgColor": colour})
    return out + [{"value": _BEYOND, "bgColor": _BANDS[3]}]


def _rounding_type(program: Program) -> str:
    """The narrowest float type the program rounds to (f32 when it rounds to no narrow type)."""
    kinds = {p.element_type for p in program.rounding_points}
    for t in ("bf16", "f16"):
        if t in kinds:
            return t
    return "f32"


def open_command(directory: str) -> str:
    """The shell command that opens ``directory`` (written by :func:`write_model_explorer`) in
    Model Explorer (``pip install ai-edge-model-explorer``).

    Example:
        >>> open_command("/tmp/explorer")
        'model-explorer /tmp/explorer/program.mlir --node_data_paths=/tmp/explorer/node_data.json'
    """
    d = os.path.abspath(directory)
    return (f"model-explorer {shlex.quote(os.path.join(d, PROGRAM_FILE))} "
            f"--node_data_paths={shlex.quote(os.path.join(d, NODE_DATA_FILE))}")


def write_model_explorer(program: Program, graph_args: Sequence[Any], directory: str,
                         module_paths: dict[str, str] | None = None) -> dict[str, str]:
    """Runs the rounded and exact replays of ``program`` with every top-level value of main as an
    output and writes ``program.mlir``, ``node_data.json``, ``node_names.json`` and
    ``module_paths.json`` (node id -> module path, from ``module_paths``: HLO instruction -> path
    as parity's XLA run captured it; None when torch_xla wrote no op metadata, which the file
    says) to ``directory``; returns their paths.

    Example:
        >>> text = '''func.func @main(%x: tensor<2xbf16>) -> tensor<2xbf16> {
        ...   %0 = stablehlo.multiply %x, %x : tensor<2xbf16>
        ...   return %0 : tensor<2xbf16>
        ... }'''
        >>> import ml_dtypes
        >>> x = np.array([1.0078125, 3.0], ml_dtypes.bfloat16)
        >>> paths = write_model_explorer(Program(text), [x], "explorer")
        >>> paths["program"], paths["node_data"]
        ('explorer/program.mlir', 'explorer/node_data.json')
    """
    if not isinstance(program, Program):
        raise ParityTypeError(f"program: expected a parity Program, got {type(program).__name__}")
    if not isinstance(directory, str) or not directory:
        raise ParityError(f"directory: expected a directory path, got {directory!r}")
    if module_paths is not None and not isinstance(module_paths, dict):
        raise ParityTypeError(f"module_paths: expected a dict or None, got {type(module_paths).__name__}")
    text = explorer_module_text(program.text, module_paths)
    rounded = Replay(program, rounded=True, intermediates=True)
    exact = Replay(program, rounded=False, intermediates=True)
    r_out, e_out = rounded(graph_args), exact(graph_args)
    first = rounded.num_results
    # The rewrite replaces ops one for one in place, so main's top-level op indices are the same.
    ids = node_ids(text)["main"]
    results, names = {}, {}
    for k, (name, index) in enumerate(rounded.intermediates):
        r = np.asarray(r_out[first + k], dtype=np.float64)
        e = np.asarray(e_out[first + k], dtype=np.float64)
        finite = np.isfinite(e) & np.isfinite(r)
        if not finite.any():
            continue
        scale = float(np.abs(e[finite]).max())
        drift = float(np.abs(r[finite] - e[finite]).max()) / scale if scale > 0 else 0.0
        results[ids[index]] = {"value": drift}
        names[ids[index]] = name
    kind = _rounding_type(program)
    os.makedirs(directory, exist_ok=True)
    program_path = os.path.join(directory, PROGRAM_FILE)
    with open(program_path, "w") as f:
        f.write(text)
    data_path = os.path.join(directory, NODE_DATA_FILE)
    graph = {"name": f"relative error vs exact fp64 ({kind} roundings)", "results": results,
             "thresholds": thresholds(kind, [v["value"] for v in results.values()])}
    with open(data_path, "w") as f:
        _json.dump({"main": graph}, f, indent=1)
    names_path = os.path.join(directory, NAMES_FILE)
    with open(names_path, "w") as f:
        _json.dump(names, f, indent=1)
    modules_path = os.path.join(directory, MODULES_FILE)
    with open(modules_path, "w") as f:
        _json.dump(_module_table(text, module_paths), f, indent=1)
    return {"program": program_path, "node_data": data_path, "node_names": names_path, "module_paths": modules_path}


def _module_table(text: str, module_paths: dict[str, str] | None) -> dict[str, Any]:
    """``module_paths.json``: node id -> module path of main's top-level ops that have one, or why
    there are none."""
    if module_paths is None:
        return {"available": False, "note": NEEDS, "paths": {}}
    if not module_paths:
        return {"available": False, "note": NO_MODULE, "paths": {}}
    ctx, module = parse(text, "the program")
    paths = {}
    with ctx:
        (main,) = [f for f in functions(module) if ir.StringAttr(f.attributes["sym_name"]).value == "main"]
        for node_id, op in zip(node_ids(text)["main"], main.regions[0].blocks[0].operations):
            if MODULE_ATTR in op.operation.attributes:
                paths[node_id] = ir.StringAttr(op.operation.attributes[MODULE_ATTR]).value
    return {"available": True, "note": None, "paths": paths}
