"""The XLA run's program as StableHLO, and its value graph for cc/parity's rounding analysis.

torch_xla gives the HLO of a pending computation as an HloModuleProto; jaxlib's public
``hlo_to_stablehlo`` turns it into a StableHLO module, parsed with JAX's MLIR bindings. Each
function becomes one value graph (cc/graph/graph.h: ops in pre-order, regions nested under their
op), which ``FindRoundingPoints`` (cc/parity/rounding.h) reads.

Example:
    >>> program = Program.from_hlo_proto(proto)      # doctest: +SKIP
    >>> [(p.after_opcode, p.opcode) for p in program.rounding_points if p.after]  # doctest: +SKIP
    [('dot', 'add')]
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator

from torch_xla_ext._ext import parity as _core
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


def _element_type(t: Any) -> tuple[list[int], str]:
    from jax.extend.mlir import ir

    if ir.RankedTensorType.isinstance(t):
        rt = ir.RankedTensorType(t)
        return [int(d) if d >= 0 else -1 for d in rt.shape], str(rt.element_type)
    return [], ""


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


def _walk(block: Any, parent: int, out: list[tuple[Any, int, Any]]) -> None:
    ops = list(block.operations)
    for i, op in enumerate(ops):
        op = op.operation
        out.append((op, parent, ops[i + 1].operation if i + 1 < len(ops) else None))
        me = len(out) - 1
        for region in op.regions:
            for inner in region.blocks:
                _walk(inner, me, out)


def build_graph(func: Any, excess_precision: bool = True) -> FunctionGraph:
    """The value graph of one ``func.func`` and cc/parity's rounding points over it."""
    from jax.extend.mlir import ir

    name = ir.StringAttr(func.attributes["sym_name"]).value
    body = func.regions[0].blocks[0]
    value_ids: dict[Any, int] = {}
    values: list[Any] = []
    types: list[tuple[list[int], str]] = []
    mlir_types: list[Any] = []

    def define(v: Any) -> int:
        value_ids[v] = len(values)
        values.append(v)
        mlir_types.append(v.type)
        types.append(_element_type(v.type))
        return len(values) - 1

    for a in body.arguments:
        define(a)
    num_args = len(values)
    walked: list[tuple[Any, int, Any]] = []
    _walk(body, -1, walked)
    ops, next_op, op_tuples, returned, operand_ids = [], [], [], [], []
    for w, (op, parent, nxt) in enumerate(walked):
        if op.name == "func.return" and parent == -1:
            if w != len(walked) - 1:
                raise ReplayError(f"{name}: func.return is not the function's last op")
            returned = [value_ids[v] for v in op.operands]
            continue
        region_args = [define(a) for region in op.regions for blk in region.blocks for a in blk.arguments]
        try:
            operands = [value_ids[v] for v in op.operands]
        except KeyError:
            raise ReplayError(f"{name}: {op.name} reads a value defined outside the function") from None
        results = [define(r) for r in op.results]
        attrs = []
        if op.name == "stablehlo.dot_general":
            dims = ir.Attribute(op.attributes["dot_dimension_numbers"])
            attrs.append(("batching_dims", str(len(_dot_batching_dims(dims)))))
        op_tuples.append([op.name, operands, results, parent, region_args, attrs])
        operand_ids.append(operands)
        ops.append(op)
        next_op.append(nxt)
    # The walk's indices are the graph's: the function's return, left out, is its last op.
    analysis = _core.find_rounding_points(types, num_args, [tuple(t) for t in op_tuples], returned,
                                          excess_precision)
    return FunctionGraph(name, func, ops, values, types, num_args, returned, analysis, next_op, operand_ids,
                         mlir_types)


def _dot_batching_dims(dims: Any) -> list[int]:
    """lhs batching dimensions of a ``#stablehlo.dot<...>`` attribute."""
    text = str(dims)
    key = "lhs_batching_dimensions = ["
    start = text.find(key)
    if start < 0:
        return []
    end = text.find("]", start)
    inner = text[start + len(key):end].strip()
    return [int(x) for x in inner.split(",") if x.strip()]


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
        import jax
        from jax.extend.mlir import hlo_to_stablehlo, ir

        from torch_xla_ext._compat import jax_mlir

        if not isinstance(proto, (bytes, bytearray)):
            raise ParityTypeError(f"proto: expected a serialized HloModuleProto (bytes), got {type(proto).__name__}")
        try:
            mlir = hlo_to_stablehlo(bytes(proto))
        except jax.errors.JaxRuntimeError as e:
            raise ReplayError(f"proto: jaxlib's hlo_to_stablehlo cannot convert it ({first_line(e)})") from None
        ctx = jax_mlir.make_context()
        with ctx:
            try:
                module = ir.Module.parse(mlir)
            except ir.MLIRError as e:
                raise ReplayError(f"hlo_to_stablehlo's output does not parse: {first_line(e)}") from None
            text = module.operation.get_asm(enable_debug_info=True, large_elements_limit=None)
        return cls(text, **kwargs)

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


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return " ".join(line.strip() for line in text.splitlines()[:3]) or type(e).__name__


def parse(text: str, what: str) -> tuple[Any, Any]:
    """(context, module) of StableHLO text; ReplayError naming ``what`` when MLIR rejects it."""
    from jax.extend.mlir import ir

    from torch_xla_ext._compat import jax_mlir

    ctx = jax_mlir.make_context()
    with ctx:
        try:
            module = ir.Module.parse(text)
        except ir.MLIRError as e:
            raise ParityError(f"{what} is not a parsable StableHLO module: {first_line(e)}") from None
    return ctx, module


def functions(module: Any) -> list[Any]:
    """The module's ``func.func`` ops, in order."""
    return [op.operation for op in module.body.operations if op.operation.name == "func.func"]
