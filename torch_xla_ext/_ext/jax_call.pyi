from __future__ import annotations
import collections.abc
import typing
__all__: list[str] = ['ArrayType', 'ConstantRow', 'HloSignature', 'ParamMapping', 'ParamRow', 'ParamSource', 'build_param_mapping', 'read_hlo_signature']
class ArrayType:
    """
    One array (or tuple) type of an HLO signature.
    """
    def __repr__(self) -> str:
        ...
    def __str__(self) -> str:
        ...
    @property
    def dims(self) -> list[int]:
        ...
    @property
    def element_type(self) -> str:
        """
        HLO's short name: 'f32', 'bf16', 'pred', 'tuple'.
        """
    @property
    def tuple_shapes(self) -> list[ArrayType]:
        """
        The elements when element_type is 'tuple'.
        """
class HloSignature:
    """
    The entry signature of an HloModuleProto.
    """
    @property
    def module_name(self) -> str:
        ...
    @property
    def parameters(self) -> list[ArrayType]:
        ...
    @property
    def results(self) -> list[ArrayType]:
        """
        The result, flattened one tuple level.
        """
class ParamSource:
    """
    Where one HLO parameter's value comes from.
    """
    @property
    def index(self) -> int:
        ...
    @property
    def kind(self) -> str:
        """
        'leaf' (index into the flattened leaves) or 'constant' (index into the hoisted constants).
        """
class ParamRow:
    @property
    def dtype(self) -> str:
        ...
    @property
    def hlo_param(self) -> int | None:
        ...
    @property
    def kept(self) -> bool:
        ...
    @property
    def kind(self) -> str:
        ...
    @property
    def path(self) -> str:
        ...
    @property
    def shape(self) -> list[int]:
        ...
    @property
    def value(self) -> str:
        ...
class ConstantRow:
    @property
    def dtype(self) -> str:
        ...
    @property
    def hlo_param(self) -> int | None:
        ...
    @property
    def index(self) -> int:
        ...
    @property
    def shape(self) -> list[int]:
        ...
class ParamMapping:
    def to_table(self) -> str:
        ...
    @property
    def constants(self) -> list[ConstantRow]:
        ...
    @property
    def module_name(self) -> str:
        ...
    @property
    def num_hlo_params(self) -> int:
        ...
    @property
    def results(self) -> list[ArrayType]:
        ...
    @property
    def rows(self) -> list[ParamRow]:
        ...
    @property
    def sources(self) -> list[ParamSource]:
        """
        One ParamSource per HLO parameter, in order.
        """
def build_param_mapping(leaves: collections.abc.Sequence[tuple[str, str, str, collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], str]], constants: collections.abc.Sequence[tuple[str, collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex]]], kept_var_idx: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], hlo_module_proto: bytes, outputs: collections.abc.Sequence[tuple[str, str, collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex]]] | None = None) -> ParamMapping:
    """
    Maps leaves (path, 'tensor'|'static', dtype, shape, value) and hoisted constants (dtype, shape) to HLO parameters via JAX's kept_var_idx, checked against the module; with outputs [(path, dtype, shape)], checks the module's results too. See cc/jax_call/param_mapping.h.
    """
def read_hlo_signature(hlo_module_proto: bytes) -> HloSignature:
    """
    The entry signature of a serialized HloModuleProto.
    """
