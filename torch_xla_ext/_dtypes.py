"""The one dtype table: each dtype's name in every system we exchange tensors with.

A row: our name (numpy's, JAX's and torch's attribute name: "bfloat16"), the MLIR element type
("bf16"), the XLA PrimitiveType ("BF16"), the safetensors code ("BF16", None when the format has
none) and the short spellings users type ("fp16", "half"). numpy dtypes (bfloat16 and float8
through ml_dtypes) and torch dtypes are resolved on use: importing this module imports neither
torch nor JAX, so the JAX-only side (export's loader and runner) can use it.

Example:
    >>> from torch_xla_ext import _dtypes
    >>> _dtypes.find("bf16").name, _dtypes.by_mlir("bf16").safetensors, _dtypes.numpy_dtype("bfloat16").itemsize
    ('bfloat16', 'BF16', 2)
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

__all__ = ["DType", "ROWS", "NARROW_FLOATS", "X64_ONLY", "find", "by_name", "by_mlir", "by_safetensors", "float_format", "numpy_dtype",
           "tensor_from_numpy", "numpy_from_tensor",
           "name_of", "torch_dtype", "from_torch"]


@dataclasses.dataclass(frozen=True)
class DType:
    name: str                 # numpy / JAX / torch attribute name
    mlir: str                 # MLIR element type
    xla: str                  # XLA PrimitiveType name (HLO text spells it in lower case)
    safetensors: str | None   # the safetensors format's code
    aliases: tuple[str, ...] = ()

    @property
    def is_float(self) -> bool:
        return self.name.startswith(("float", "bfloat"))


ROWS: tuple[DType, ...] = (
    DType("float64", "f64", "F64", "F64", ("fp64", "double")),
    DType("float32", "f32", "F32", "F32", ("fp32", "float")),
    DType("float16", "f16", "F16", "F16", ("fp16", "half")),
    DType("bfloat16", "bf16", "BF16", "BF16"),
    DType("int64", "i64", "S64", "I64"),
    DType("int32", "i32", "S32", "I32"),
    DType("int16", "i16", "S16", "I16"),
    DType("int8", "i8", "S8", "I8"),
    DType("uint64", "ui64", "U64", "U64"),
    DType("uint32", "ui32", "U32", "U32"),
    DType("uint16", "ui16", "U16", "U16"),
    DType("uint8", "ui8", "U8", "U8"),
    DType("bool", "i1", "PRED", "BOOL"),
    DType("complex64", "complex<f32>", "C64", "C64"),
    DType("complex128", "complex<f64>", "C128", None),
    DType("float8_e4m3fn", "f8E4M3FN", "F8E4M3FN", "F8_E4M3"),
    DType("float8_e5m2", "f8E5M2", "F8E5M2", "F8_E5M2"),
    DType("float8_e4m3fnuz", "f8E4M3FNUZ", "F8E4M3FNUZ", "F8_E4M3FNUZ"),
    DType("float8_e5m2fnuz", "f8E5M2FNUZ", "F8E5M2FNUZ", "F8_E5M2FNUZ"),
)

# The 16-bit floats XLA rounds to per op (cc/parity's IsNarrowFloat; all-reduce on XLA:CPU rejects them).
NARROW_FLOATS = ("bfloat16", "float16")

# The 64-bit dtypes JAX lowers as 32-bit while jax_enable_x64 is off (its default).
X64_ONLY = ("int64", "uint64", "float64", "complex128")

_BY_NAME = {r.name: r for r in ROWS}
_BY_MLIR = {r.mlir: r for r in ROWS}
_BY_SAFETENSORS = {r.safetensors: r for r in ROWS if r.safetensors}
_BY_ANY = {**{a: r for r in ROWS for a in r.aliases}, **_BY_MLIR, **_BY_NAME}


def by_name(name: str) -> DType | None:
    return _BY_NAME.get(name)


def by_mlir(element_type: str) -> DType | None:
    return _BY_MLIR.get(element_type)


def by_safetensors(code: str) -> DType | None:
    return _BY_SAFETENSORS.get(code)


def find(spelling: str) -> DType | None:
    """The row of a name, an MLIR element type or an alias ("bf16", "fp32", "torch.float16",
    case-insensitive); None when no row has it."""
    s = spelling.removeprefix("torch.")
    return _BY_ANY.get(s) or _BY_ANY.get(s.lower())


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype of a row's name (bfloat16 and float8 through ml_dtypes); KeyError for a
    name that is not a row's."""
    if name not in _BY_NAME:
        raise KeyError(name)
    if name == "bool" or hasattr(np, name):
        return np.dtype(name)
    import ml_dtypes

    return np.dtype(getattr(ml_dtypes, name))


def float_format(name: str) -> tuple[int, int]:
    """(exponent bits, mantissa bits stored) of a float row, from ml_dtypes' finfo (numpy's for
    the IEEE types): (8, 7) for bfloat16, (5, 10) for float16."""
    import ml_dtypes

    fi = ml_dtypes.finfo(numpy_dtype(name))
    return int(fi.nexp), int(fi.nmant)


def tensor_from_numpy(a: Any) -> Any:
    """A numpy array as a CPU torch tensor of the same dtype, bit for bit (a copy); ml_dtypes'
    types (bfloat16, float8), which ``torch.from_numpy`` refuses, move as their bits (imports torch)."""
    import torch

    a = np.array(a, copy=True, order="C")
    name = a.dtype.name
    if name == "bool" or hasattr(np, name):
        return torch.from_numpy(a)
    return torch.from_numpy(a.view(f"uint{8 * a.dtype.itemsize}")).view(torch_dtype(name))


def numpy_from_tensor(t: Any) -> np.ndarray:
    """A torch tensor's values as a numpy array of the same dtype, bit for bit (copied to the host
    when the tensor is on a device); ml_dtypes' types (bfloat16, the float8 family), which
    ``Tensor.numpy`` refuses, move as their bits. The inverse of :func:`tensor_from_numpy`."""
    import torch

    t = t.detach().cpu()
    row = from_torch(t.dtype)
    if row is None or row.name == "bool" or hasattr(np, row.name):
        return t.numpy()
    bits = {1: torch.uint8, 2: torch.int16}[t.element_size()]
    return t.contiguous().view(bits).numpy().view(numpy_dtype(row.name))


def name_of(dt: Any) -> str:
    """Our name of a numpy dtype (ml_dtypes' types by their own names)."""
    return np.dtype(dt).name


def torch_dtype(name: str) -> Any:
    """torch's dtype of a row's name (imports torch); None when this torch has no such dtype."""
    import torch

    return getattr(torch, name, None) if name in _BY_NAME else None


@functools.lru_cache(maxsize=None)
def _torch_rows() -> dict[Any, DType]:
    import torch

    return {getattr(torch, r.name): r for r in ROWS if isinstance(getattr(torch, r.name, None), torch.dtype)}


def from_torch(dtype: Any) -> DType | None:
    """The row of a torch.dtype (imports torch); None for a dtype no row has."""
    return _torch_rows().get(dtype)
