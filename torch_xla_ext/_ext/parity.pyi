from __future__ import annotations
import torch_xla_ext._ext.graph
import typing
__all__: list[str] = ['OpClass', 'RoundingAnalysis', 'RoundingPoint', 'find_rounding_points', 'is_narrow_float', 'op_class']
class OpClass:
    """
    What an op does to the values it produces (cc/parity/rounding.h).
    
    Members:
    
      MOVES_DATA
    
      EXACT
    
      OPAQUE
    
      COMPUTES
    """
    COMPUTES: typing.ClassVar[OpClass]
    EXACT: typing.ClassVar[OpClass]
    MOVES_DATA: typing.ClassVar[OpClass]
    OPAQUE: typing.ClassVar[OpClass]
    __members__: typing.ClassVar[dict[str, OpClass]]
    @typing.overload
    def __eq__(self, other: OpClass) -> bool:
        ...
    @typing.overload
    def __eq__(self, other: typing.Any) -> bool:
        ...
    def __getstate__(self) -> int:
        ...
    def __hash__(self) -> int:
        ...
    def __index__(self) -> int:
        ...
    def __init__(self, value: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __int__(self) -> int:
        ...
    @typing.overload
    def __ne__(self, other: OpClass) -> bool:
        ...
    @typing.overload
    def __ne__(self, other: typing.Any) -> bool:
        ...
    def __repr__(self) -> str:
        ...
    def __setstate__(self, state: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __str__(self) -> str:
        ...
    @property
    def name(self) -> str:
        ...
    @property
    def value(self) -> int:
        ...
class RoundingPoint:
    """
    An op result the program rounds to a narrow float.
    """
    @property
    def after(self) -> int:
        """
        the rounding point whose rounded value this op reads through data movement, or -1
        """
    @property
    def element_type(self) -> str:
        ...
    @property
    def op(self) -> int:
        """
        index into the graph's ops
        """
    @property
    def result(self) -> int:
        """
        which result of the op
        """
    @property
    def unrounded_uses(self) -> list[tuple[int, int]]:
        """
        (op, operand) of each use that reads the value before rounding (excess precision)
        """
    @property
    def value(self) -> int:
        """
        its value id
        """
class RoundingAnalysis:
    """
    The rounding points of one function.
    """
    @property
    def kept_unrounded(self) -> list[int]:
        """
        ops computing a narrow value that every use reads unrounded
        """
    @property
    def points(self) -> list[RoundingPoint]:
        """
        in op order, then result order
        """
def find_rounding_points(graph: torch_xla_ext._ext.graph.Graph, excess_precision: bool = True) -> RoundingAnalysis:
    """
    Rounding points of one function's graph (a graph.Graph). See cc/parity/rounding.h.
    """
def is_narrow_float(element_type: str) -> bool:
    """
    Whether XLA:CPU computes this element type in f32 and rounds back (bf16, f16).
    """
def op_class(name: str) -> OpClass:
    """
    What an op does to its values (OpClass).
    """
