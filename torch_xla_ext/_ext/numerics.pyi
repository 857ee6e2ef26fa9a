from __future__ import annotations
import collections.abc
import typing
__all__: list[str] = ['CompareResult', 'DType', 'compare', 'ulp_bucket_labels']
class DType:
    """
    Members:
    
      float64
    
      float32
    
      bfloat16
    
      float16
    """
    __members__: typing.ClassVar[dict[str, DType]]
    bfloat16: typing.ClassVar[DType]
    float16: typing.ClassVar[DType]
    float32: typing.ClassVar[DType]
    float64: typing.ClassVar[DType]
    @typing.overload
    def __eq__(self, other: DType) -> bool:
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
    def __ne__(self, other: DType) -> bool:
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
class CompareResult:
    @property
    def max_abs_diff(self) -> float:
        ...
    @property
    def max_abs_diff_all(self) -> float:
        ...
    @property
    def max_abs_index(self) -> int:
        ...
    @property
    def max_abs_index_all(self) -> int:
        ...
    @property
    def max_rel_diff(self) -> float:
        ...
    @property
    def max_rel_diff_all(self) -> float:
        ...
    @property
    def max_rel_index(self) -> int:
        ...
    @property
    def max_rel_index_all(self) -> int:
        ...
    @property
    def max_ulp(self) -> int:
        ...
    @property
    def max_ulp_index(self) -> int:
        ...
    @property
    def mismatched(self) -> int:
        ...
    @property
    def num_threads(self) -> int:
        ...
    @property
    def total(self) -> int:
        ...
    @property
    def ulp_dtype(self) -> DType:
        ...
    @property
    def ulp_histogram(self) -> typing.Annotated[list[int], "FixedSize(12)"]:
        ...
    @property
    def ulp_undefined(self) -> int:
        ...
def compare(actual_data: typing.SupportsInt | typing.SupportsIndex, actual_dtype: DType, actual_shape: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], actual_strides: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], expected_data: typing.SupportsInt | typing.SupportsIndex, expected_dtype: DType, expected_shape: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], expected_strides: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], rtol: typing.SupportsFloat | typing.SupportsIndex, atol: typing.SupportsFloat | typing.SupportsIndex, equal_nan: bool, num_threads: typing.SupportsInt | typing.SupportsIndex = 0) -> CompareResult:
    """
    Compares two strided buffers; the caller keeps them alive. See cc/numerics/compare.h.
    """
def ulp_bucket_labels() -> list[str]:
    ...
