"""Fast tensor comparison with torch.testing's rules, computed in one C++ pass.

Example:
    >>> import numpy as np
    >>> from torch_xla_ext import numerics
    >>> r = numerics.compare(np.float32([1, 2, 3]), np.float32([1, 2, 3.5]))
    >>> r.mismatched, r.max_abs_index
    (1, (2,))

Inputs are torch tensors on any device (an XLA tensor is copied to the CPU once) or numpy
arrays (float64, float32, float16, and ml_dtypes' bfloat16). Nothing here imports torch unless
a torch tensor is passed.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import numpy as np

from torch_xla_ext import _dtypes, _json, _versions

_versions.require("numerics")  # the extension below is built for one CPython

from torch_xla_ext._ext import numerics as _core  # noqa: E402
from torch_xla_ext.errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["CompareReport", "compare", "assert_close", "default_tolerances"]

# torch.testing.assert_close's defaults (torch/testing/_comparison.py, _DTYPE_PRECISIONS).
_DEFAULT_TOLERANCES = {
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7),
}

# The floats cc/numerics compares, by their names in the one dtype table (torch_xla_ext/_dtypes.py).
DTYPES = {r.name: getattr(_core.DType, r.name) for r in _dtypes.ROWS if hasattr(_core.DType, r.name)}

_ULP_LABELS = tuple(_core.ulp_bucket_labels())


@dataclasses.dataclass(frozen=True)
class CompareReport:
    """The outcome of :func:`compare`.

    ``max_abs_diff``/``max_rel_diff`` and their indices are taken over the mismatched elements,
    as torch.testing reports them; when nothing mismatches they are taken over all elements, so
    a passing report still says how close the inputs are. Indices are tuples into ``shape``
    (None for an empty input). ULP distances are counted in ``ulp_dtype``, the promoted dtype of
    the two inputs; ``ulp_undefined`` counts pairs where one side is NaN.
    """

    total: int
    mismatched: int
    max_abs_diff: float
    max_abs_index: tuple[int, ...] | None
    max_rel_diff: float
    max_rel_index: tuple[int, ...] | None
    max_ulp: int
    max_ulp_index: tuple[int, ...] | None
    ulp_histogram: dict[str, int]
    ulp_undefined: int
    ulp_dtype: str
    rtol: float
    atol: float
    equal_nan: bool
    shape: tuple[int, ...]
    actual_dtype: str
    expected_dtype: str

    @property
    def passed(self) -> bool:
        return self.mismatched == 0

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["passed"] = self.passed
        return _json.encode(d)  # the one JSON rule: a non-finite float as "nan"/"inf"/"-inf"

    def to_json(self, **kwargs: Any) -> str:
        return _json.dumps(self.to_dict(), **kwargs)

    def __str__(self) -> str:
        equality = self.rtol == 0 and self.atol == 0
        verb = "equal" if equality else "close"
        head = f"Tensor-likes are {verb}!" if self.passed else f"Tensor-likes are not {verb}!"
        share = self.mismatched / self.total if self.total else 0.0
        lines = [head, "", f"Mismatched elements: {self.mismatched} / {self.total} ({share:.1%})"]
        if self.total:
            for kind, diff, idx, tol in (
                ("absolute", self.max_abs_diff, self.max_abs_index, self.atol),
                ("relative", self.max_rel_diff, self.max_rel_index, self.rtol),
            ):
                line = f"Greatest {kind} difference: {diff} at index {idx}"
                if not equality:
                    line += f" (up to {tol} allowed)"
                lines.append(line)
            lines.append(f"Greatest ULP distance: {self.max_ulp} at index {self.max_ulp_index} (in {self.ulp_dtype})")
            hist = ", ".join(f"{k}: {v}" for k, v in self.ulp_histogram.items() if v)
            if self.ulp_undefined:
                hist += f", undefined (NaN): {self.ulp_undefined}"
            lines.append(f"ULP distances: {hist}")
        return "\n".join(lines)


def default_tolerances(*dtypes: str) -> tuple[float, float]:
    """(rtol, atol) as torch.testing.assert_close picks them: the loosest over ``dtypes``.

    Example:
        >>> default_tolerances("bfloat16", "float32")
        (0.016, 1e-05)
    """
    if not dtypes:
        raise InvalidArgumentError("dtypes: name at least one of " + ", ".join(_DEFAULT_TOLERANCES))
    unknown = [d for d in dtypes if d not in _DEFAULT_TOLERANCES]
    if unknown:
        raise InvalidArgumentError(f"dtypes: no default tolerances for {unknown[0]!r} "
                                   f"(known: {', '.join(_DEFAULT_TOLERANCES)})")
    rtols, atols = zip(*(_DEFAULT_TOLERANCES[d] for d in dtypes))
    return max(rtols), max(atols)


class _Buffer:
    """A strided view for the C++ comparator; holds the owner so the memory stays alive."""

    __slots__ = ("owner", "data", "dtype", "shape", "strides", "type_name")

    def __init__(self, value: Any, side: str):
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(value, torch.Tensor):
            self._from_torch(value, side, torch)
        elif isinstance(value, (np.ndarray, np.floating)):
            self._from_numpy(np.asarray(value), side)
        else:
            raise ArgumentTypeError(
                f"{side}: expected a torch.Tensor or a numpy.ndarray, got {type(value).__module__}.{type(value).__qualname__}"
            )

    def _from_torch(self, t: Any, side: str, torch: Any) -> None:
        self.type_name = str(t.dtype)
        dtype = str(t.dtype).removeprefix("torch.")
        _check_float(dtype, self.type_name, side)
        if t.device.type != "cpu":
            t = t.detach().cpu()  # one device->host copy (XLA executes the pending graph here)
        t = t.detach()
        self.owner = t
        self.data = t.data_ptr()
        self.dtype = dtype
        self.shape = tuple(t.shape)
        self.strides = tuple(t.stride())

    def _from_numpy(self, a: np.ndarray, side: str) -> None:
        self.type_name = f"numpy.{a.dtype.name}"
        dtype = a.dtype.name
        _check_float(dtype, self.type_name, side)
        if any(s % a.itemsize for s in a.strides):
            a = np.ascontiguousarray(a)  # unaligned strides (views into records): copy once
        self.owner = a
        self.data = a.ctypes.data if a.size else 0
        self.dtype = dtype
        self.shape = tuple(a.shape)
        self.strides = tuple(s // a.itemsize for s in a.strides)


def _check_float(dtype: str, type_name: str, side: str) -> None:
    if dtype not in DTYPES:
        kind = "complex" if "complex" in dtype else "bool" if dtype == "bool" else "integer" if "int" in dtype else "unsupported"
        raise ArgumentTypeError(
            f"{side} has dtype {type_name} ({kind}); compare supports float64, float32, bfloat16 and float16"
        )


def _unravel(flat: int, shape: tuple[int, ...]) -> tuple[int, ...] | None:
    if flat < 0:
        return None
    return tuple(int(i) for i in np.unravel_index(flat, shape)) if shape else ()


def compare(
    actual: Any,
    expected: Any,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    equal_nan: bool = False,
    check_dtype: bool = True,
) -> CompareReport:
    """Compares ``actual`` with ``expected`` elementwise, as torch.testing.assert_close would.

    An element matches when ``|actual - expected| <= atol + rtol * |expected|`` (evaluated in
    float64), when both are the same infinity, or when both are NaN and ``equal_nan``. Default
    tolerances are torch.testing's for the dtypes; pass both ``rtol`` and ``atol`` or neither.

    Raises:
        ArgumentTypeError (a TypeError): an input is not a tensor/array, is not floating point, or
            the dtypes differ while ``check_dtype`` is True.
        InvalidArgumentError (a ValueError): the shapes differ, only one of rtol/atol is given,
            or a tolerance is negative or not finite.

    Example:
        >>> compare(np.float32([1.0, 2.0]), np.float32([1.0, 2.5])).mismatched
        1
    """
    a = _Buffer(actual, "actual")
    e = _Buffer(expected, "expected")
    if check_dtype and a.dtype != e.dtype:
        raise ArgumentTypeError(
            f"dtype mismatch: actual is {a.type_name}, expected is {e.type_name} "
            "(pass check_dtype=False to compare in the promoted dtype)"
        )
    if a.shape != e.shape:
        raise InvalidArgumentError(f"shape mismatch: actual has shape {a.shape}, expected has shape {e.shape}")
    if (rtol is None) != (atol is None):
        raise InvalidArgumentError(
            f"Both 'rtol' and 'atol' must be either specified or omitted, but got no {'rtol' if rtol is None else 'atol'}."
        )
    if rtol is None:
        rtol, atol = default_tolerances(a.dtype, e.dtype)
    for flag, value in (("rtol", rtol), ("atol", atol)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
            raise ArgumentTypeError(f"{flag}: expected a number, got {type(value).__name__}")
    r = _core.compare(
        a.data, DTYPES[a.dtype], a.shape, a.strides,
        e.data, DTYPES[e.dtype], e.shape, e.strides,
        float(rtol), float(atol), bool(equal_nan),
    )
    if r.mismatched:
        abs_d, abs_i, rel_d, rel_i = r.max_abs_diff, r.max_abs_index, r.max_rel_diff, r.max_rel_index
    else:
        abs_d, abs_i, rel_d, rel_i = r.max_abs_diff_all, r.max_abs_index_all, r.max_rel_diff_all, r.max_rel_index_all
    return CompareReport(
        total=r.total,
        mismatched=r.mismatched,
        max_abs_diff=float(abs_d) if abs_i >= 0 else 0.0,
        max_abs_index=_unravel(abs_i, a.shape),
        max_rel_diff=float(rel_d) if rel_i >= 0 else 0.0,
        max_rel_index=_unravel(rel_i, a.shape),
        max_ulp=int(r.max_ulp),
        max_ulp_index=_unravel(r.max_ulp_index, a.shape),
        ulp_histogram=dict(zip(_ULP_LABELS, (int(c) for c in r.ulp_histogram))),
        ulp_undefined=int(r.ulp_undefined),
        ulp_dtype=r.ulp_dtype.name,
        rtol=float(rtol),
        atol=float(atol),
        equal_nan=bool(equal_nan),
        shape=a.shape,
        actual_dtype=a.type_name,
        expected_dtype=e.type_name,
    )


def assert_close(actual: Any, expected: Any, **kwargs: Any) -> CompareReport:
    """Like :func:`compare`, but raises AssertionError carrying the report when it fails (a
    failed check, not a bad argument: bad arguments raise as in :func:`compare`).

    Example:
        >>> assert_close(np.float32([1.0]), np.float32([1.0])).passed
        True
    """
    report = compare(actual, expected, **kwargs)
    if not report.passed:
        raise AssertionError(str(report))
    return report
