"""The XLA run's program as StableHLO, and its value graph for cc/parity's rounding analysis.

torch_xla gives the HLO of a pending computation as an HloModuleProto; jaxlib's public
``hlo_to_stablehlo`` turns it into a StableHLO module, parsed with JAX's MLIR bindings. Each
function becomes one value graph (cc/graph/graph.h: ops in pre-order, regions nested under their
op), which ``FindRoundingPoints`` (cc/parity/rounding.h) reads.

Example:
    >>> import ml_dtypes, numpy as np
    >>> text = '''func.func @main(%x: tensor<2x4xbf16>, %w: tensor<4x4xbf16>, %b: tensor<4xbf16>) -> tensor<2x4xbf16> {
    ...   %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<2x4xbf16>, tensor<4x4xbf16>) -> tensor<2x4xbf16>
    ...   %1 = stablehlo.broadcast_in_dim %b, dims = [1] : (tensor<4xbf16>) -> tensor<2x4xbf16>
    ...   %2 = stablehlo.add %0, %1 : tensor<2x4xbf16>
    ...   return %2 : tensor<2x4xbf16>
    ... }'''
    >>> program = Program(text)                   # or Program.from_hlo_proto(proto) of an XLA run
    >>> [(p.after_opcode, p.opcode) for p in program.rounding_points if p.after]   # the dot rounds, then the add
    [('dot_general', 'add')]
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator

from torch_xla_ext import _mlir_graph, _mlir_text
from torch_xla_ext._ext import parity as _core
from torch_xla_ext.errors import first_line  # noqa: F401 - replays.py reads it from here
from torch_xla_ext.parity.errors import ParityError, ParityTypeError, ReplayError

__all__ = ["FLOAT_TYPES", "FunctionGraph", "Program", "RoundingPoint"]

FLOAT_TYPES = ("bf16", "f16", "f32", "f64")


@dataclasses.dataclass(frozen=True)
class RoundingPoint:
    """An op whose result XLA stores in a narrow float type, i.e. a place where it rounds.

    ``instruction`` is the HLO instruction's name (the op's location, e.g. ``dot.5``),
    ``opcode`` the StableHLO op without its dialect (``dot``, ``add``). ``after`` names the
    narrow-float rounding point feeding this one through data movement, when there is one: that
    pair rounds twice in a row, where an eager kernel fusing both steps rounds once.
    ``unrounded_uses`` counts the users that read the value before rounding (XLA's excess
    precision: a convert to f32 of an elementwise op, a dot or a convolution).
    """

    computation: str
    instruction: str
    opcode: str
    element_type: str
    after: str | None = None
    after_opcode: str | None = None
    unrounded_uses: int = 0


@dataclasses.dataclass
class FunctionGraph:
    """One function of the module: its MLIR ops in pre-order (aligned with the graph's ops), the
    values by id, and the rounding analysis of cc/parity."""

    name: str
    func: Any
    ops: list[Any]
    values: list[Any]
    value_types: list[tuple[list[int], str]]
    num_args: int
    returned: list[int]
    analysis: dict[str, Any]
    next_op: list[Any]  # each op's next sibling in its block (None for a terminator)
    operand_ids: list[list[int]]  # per op, its operands' value ids
    mlir_types: list[Any]  # per value id, its MLIR type before any rewrite


def location_name(loc: Any) -> str:
    """``loc("dot.5")`` -> ``dot.5``; the first name of a fused location; "" when unknown."""
    text = str(loc)
    start = text.find('"')
    if start < 0:
        return ""
    end = text.find('"', start + 1)
    if end < 0 or text[end + 1:end + 2] == ":":  # a file:line:col location, not a name
        return ""
    return text[start + 1:end]


def build_graph(func: Any, excess_precision: bool = True) -> FunctionGraph:
    """The value graph of one ``func.func`` (the one MLIR walker, torch_xla_ext/_mlir_graph.py) and
    cc/parity's rounding points over it."""
    g = _mlir_graph.walk(func, error=ReplayError)
    # The walk's indices are the graph's: the function's return, left out, is its last op.
    analysis = _core.find_rounding_points(_mlir_graph.core_graph(g), excess_precision)
    return FunctionGraph(g.name, func, g.ops, g.values, g.value_types, g.num_args, g.returned, analysis, g.next_op,
                         [o.operands for o in g.graph_ops], g.mlir_types)


class Program:
    """A StableHLO module (the XLA run's program) with its functions' graphs and rounding points.

    ``text`` is the module as jaxlib's hlo_to_stablehlo printed it (with the HLO instruction
    names as locations); each replay parses it afresh, so the analysis here is never mutated.
    """

    def __init__(self, text: str, *, excess_precision: bool = True):
        if not isinstance(text, str):
            raise ParityTypeError(f"text: expected StableHLO text (str), got {type(text).__name__}")
        self.text = text
        self.excess_precision = excess_precision
        ctx, module = parse(text, "the StableHLO module")
        self._ctx = ctx
        with ctx:
            self.functions = [build_graph(f, excess_precision) for f in functions(module)]
        self.op_names = sorted({op.name for f in self.functions for op in f.ops})
        self.rounding_points = tuple(self._points())
        self.num_arguments = self.main.num_args

    @classmethod
    def from_hlo_proto(cls, proto: bytes, **kwargs: Any) -> "Program":
        """From a serialized HloModuleProto (torch_xla's ``_get_xla_tensors_hlo_proto``)."""
        if not isinstance(proto, (bytes, bytearray)):
            raise ParityTypeError(f"proto: expected a serialized HloModuleProto (bytes), got {type(proto).__name__}")
        return cls(_mlir_text.hlo_to_stablehlo_text(proto, "proto", error=ReplayError, debug_info=True), **kwargs)

    @property
    def main(self) -> FunctionGraph:
        for f in self.functions:
            if f.name == "main":
                return f
        raise ReplayError("the module has no function 'main'")

    def _points(self) -> Iterator[RoundingPoint]:
        for f in self.functions:
            for p in f.analysis["points"]:
                op = f.ops[p["op"]]
                after = f.ops[p["after"]] if p["after"] >= 0 else None
                yield RoundingPoint(
                    f.name, location_name(op.location) or f"%{p['op']}", _bare(op.name), p["element_type"],
                    (location_name(after.location) or f"%{p['after']}") if after is not None else None,
                    _bare(after.name) if after is not None else None,
                    len(p["unrounded_uses"]),
                )


def _bare(name: str) -> str:
    for prefix in ("stablehlo.", "chlo.", "mhlo."):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def parse(text: str, what: str) -> tuple[Any, Any]:
    """(context, module) of StableHLO text; ParityError naming ``what`` when MLIR rejects it."""
    return _mlir_text.parse(text, what, error=ParityError)


def functions(module: Any) -> list[Any]:
    """The module's ``func.func`` ops, in order."""
    return [op.operation for op in module.body.operations if op.operation.name == "func.func"]
