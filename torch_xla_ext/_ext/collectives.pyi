from __future__ import annotations
import collections.abc
import typing
__all__: list[str] = ['analyze', 'clear_recorded_all_reduces', 'next_all_reduce_sequence', 'record_all_reduce', 'recorded_all_reduces_since']
def analyze(values: collections.abc.Sequence[tuple[collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], str]], num_args: typing.SupportsInt | typing.SupportsIndex, ops: collections.abc.Sequence[tuple[str, collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], str, collections.abc.Sequence[collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex]], typing.SupportsFloat | typing.SupportsIndex | None]], returned: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], declared: collections.abc.Sequence[tuple[str, typing.SupportsFloat | typing.SupportsIndex | None]]) -> dict:
    """
    Analyses main's graph: values are (shape, element_type); ops are (name, operands, results, reduction, replica_groups, splat_value); declared are (kind, scalar_value). See cc/collectives/analysis.h.
    """
def clear_recorded_all_reduces() -> None:
    ...
def next_all_reduce_sequence() -> int:
    ...
def record_all_reduce(reduce: str, requested_scale: typing.SupportsFloat | typing.SupportsIndex, applied_scale: typing.SupportsFloat | typing.SupportsIndex, replica_groups: collections.abc.Sequence[collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex]], world_size: typing.SupportsInt | typing.SupportsIndex, lowering: str) -> int:
    """
    Records one all-reduce lowering (cc/collectives/hooks.h); returns its sequence number.
    """
def recorded_all_reduces_since(sequence: typing.SupportsInt | typing.SupportsIndex) -> list:
    ...
