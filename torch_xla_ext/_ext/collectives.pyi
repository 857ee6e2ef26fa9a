from __future__ import annotations
import collections.abc
import torch_xla_ext._ext.graph
import typing
__all__: list[str] = ['AllReduceCall', 'Analysis', 'Collective', 'DeclaredInput', 'analyze', 'clear_recorded_all_reduces', 'next_all_reduce_sequence', 'record_all_reduce', 'recorded_all_reduces_since', 'reduce_names']
class DeclaredInput:
    """
    What the exporter says one argument of main is.
    """
    def __init__(self, kind: str, scalar_value: typing.SupportsFloat | typing.SupportsIndex | None = None) -> None:
        """
        kind: user_input, parameter, buffer, constant or collective_token; scalar_value: a scalar constant's value (a scale may come from an argument).
        """
    @property
    def kind(self) -> str:
        ...
    @property
    def scalar_value(self) -> float | None:
        ...
class Collective:
    """
    One collective op of main, in program order.
    """
    def __repr__(self) -> str:
        ...
    @property
    def op(self) -> str:
        """
        'all_reduce', 'all_gather', 'reduce_scatter', ...
        """
    @property
    def op_index(self) -> int:
        """
        Index into the graph's ops.
        """
    @property
    def operand_inputs(self) -> list[int]:
        """
        Arguments of main the data operands depend on, ascending.
        """
    @property
    def reduce(self) -> str | None:
        """
        'sum', 'max', 'min', 'mul', 'and', 'or', 'xor'; None when the op has no reduction.
        """
    @property
    def replica_groups(self) -> list[list[int]]:
        ...
    @property
    def scale(self) -> float:
        ...
    @property
    def scale_op_index(self) -> int | None:
        """
        The multiply (or divide) that applies the scale.
        """
    @property
    def token_input(self) -> int | None:
        """
        The argument of main the token comes from.
        """
    @property
    def token_mixed_into_operand(self) -> bool:
        ...
    @property
    def token_operands(self) -> list[int]:
        """
        Operand positions holding a token.
        """
class Analysis:
    """
    Argument kinds and collectives of main (cc/collectives/analysis.h).
    """
    @property
    def collectives(self) -> list[Collective]:
        """
        In program order.
        """
    @property
    def input_kinds(self) -> list[str]:
        """
        One per argument of main: user_input, parameter, buffer, constant or collective_token.
        """
    @property
    def input_used(self) -> list[bool]:
        """
        Whether main uses each argument at all.
        """
    @property
    def token_inputs(self) -> list[int]:
        """
        Arguments that are tokens, ascending.
        """
class AllReduceCall:
    """
    One recorded all-reduce lowering (cc/collectives/hooks.h).
    """
    def __repr__(self) -> str:
        ...
    @property
    def applied_scale(self) -> float:
        """
        What the lowering applied.
        """
    @property
    def lowering(self) -> str:
        """
        What the lowering says it emitted.
        """
    @property
    def reduce(self) -> str:
        ...
    @property
    def replica_groups(self) -> list[list[int]]:
        ...
    @property
    def requested_scale(self) -> float:
        """
        What the caller asked for.
        """
    @property
    def sequence(self) -> int:
        ...
    @property
    def world_size(self) -> int:
        ...
def analyze(graph: torch_xla_ext._ext.graph.Graph, declared: collections.abc.Sequence[DeclaredInput]) -> Analysis:
    """
    Analyses main's graph; `declared` has one entry per argument. See cc/collectives/analysis.h.
    """
def clear_recorded_all_reduces() -> None:
    ...
def next_all_reduce_sequence() -> int:
    ...
def record_all_reduce(reduce: str, requested_scale: typing.SupportsFloat | typing.SupportsIndex, applied_scale: typing.SupportsFloat | typing.SupportsIndex, replica_groups: collections.abc.Sequence[collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex]], world_size: typing.SupportsInt | typing.SupportsIndex, lowering: str) -> int:
    """
    Records one all-reduce lowering (cc/collectives/hooks.h); returns its sequence number.
    """
def recorded_all_reduces_since(sequence: typing.SupportsInt | typing.SupportsIndex) -> list[AllReduceCall]:
    """
    Recorded all-reduce calls with sequence >= `sequence`, oldest first.
    """
def reduce_names() -> list[str]:
    """
    Every reduce name the analysis reports for a reduction body ('sum', ..., 'xor'), in order.
    """
