from __future__ import annotations
import collections.abc
import typing
__all__: list[str] = ['Graph', 'Op', 'TensorType']
class TensorType:
    """
    A value's type: its shape and MLIR element type ('' for a non-tensor).
    """
    def __init__(self, shape: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], element_type: str) -> None:
        ...
    def __repr__(self) -> str:
        ...
    @property
    def element_type(self) -> str:
        """
        MLIR's spelling: 'f32', 'bf16', 'i64'.
        """
    @property
    def shape(self) -> list[int]:
        """
        -1 for a dynamic dimension; empty for a scalar.
        """
class Op:
    """
    One op of a function, in pre-order (see cc/graph/graph.h).
    """
    def __init__(self, name: str, operands: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], results: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], *, parent: typing.SupportsInt | typing.SupportsIndex = -1, region_args: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex] = [], reduction: str = '', replica_groups: collections.abc.Sequence[collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex]] = [], splat_value: typing.SupportsFloat | typing.SupportsIndex | None = None, attributes: collections.abc.Sequence[tuple[str, str]] = []) -> None:
        ...
    def __repr__(self) -> str:
        ...
    @property
    def attributes(self) -> list[tuple[str, str]]:
        """
        Attributes an analysis reads, as (key, text) pairs.
        """
    @property
    def name(self) -> str:
        ...
    @property
    def operands(self) -> list[int]:
        """
        Value ids.
        """
    @property
    def parent(self) -> int:
        """
        The op whose region holds this one; -1 at the function's top level.
        """
    @property
    def reduction(self) -> str:
        """
        The one op of a single-op reduction body, or ''.
        """
    @property
    def region_args(self) -> list[int]:
        """
        Block arguments of this op's regions (value ids).
        """
    @property
    def replica_groups(self) -> list[list[int]]:
        ...
    @property
    def results(self) -> list[int]:
        """
        Value ids.
        """
    @property
    def splat_value(self) -> float | None:
        """
        A splat constant's element value.
        """
class Graph:
    """
    A function's value graph: values by id (the arguments first), ops in pre-order, the returned value ids. Checked when built (ids in range, each value defined once and before its use): InvalidArgumentError naming the op otherwise.
    """
    def __init__(self, values: collections.abc.Sequence[TensorType], num_args: typing.SupportsInt | typing.SupportsIndex, ops: collections.abc.Sequence[Op], returned: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex]) -> None:
        ...
    def __repr__(self) -> str:
        ...
    @property
    def num_args(self) -> int:
        ...
    @property
    def ops(self) -> list[Op]:
        ...
    @property
    def returned(self) -> list[int]:
        ...
    @property
    def values(self) -> list[TensorType]:
        ...
