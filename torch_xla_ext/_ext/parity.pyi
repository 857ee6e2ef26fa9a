from __future__ import annotations
import collections.abc
import typing
__all__: list[str] = ['find_rounding_points', 'is_narrow_float', 'op_class']
def find_rounding_points(values: collections.abc.Sequence[tuple[collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], str]], num_args: typing.SupportsInt | typing.SupportsIndex, ops: collections.abc.Sequence[tuple[str, collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], typing.SupportsInt | typing.SupportsIndex, collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], collections.abc.Sequence[tuple[str, str]]]], returned: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], excess_precision: bool = True) -> dict:
    """
    Rounding points of one function's graph: values are (shape, element_type); ops are (name, operands, results, parent, region_args, attributes) in pre-order. See cc/parity/rounding.h.
    """
def is_narrow_float(element_type: str) -> bool:
    """
    Whether XLA:CPU computes this element type in f32 and rounds back (bf16, f16).
    """
def op_class(name: str) -> str:
    """
    What an op does to its values: moves_data, exact, opaque or computes.
    """
