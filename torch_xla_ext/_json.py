"""The one JSON policy of every file and string torch_xla_ext writes: strict JSON (RFC 8259, which
has no NaN or Infinity), with a non-finite float written as the string "nan", "inf" or "-inf"
(Python's ``str`` of it; ``float()`` reads each back). Readers take a number field through
:func:`number`, which accepts those strings too.

Example:
    >>> from torch_xla_ext import _json
    >>> _json.dumps({"median_ms": float("nan"), "error": [1.5, float("-inf")]})
    '{"median_ms": "nan", "error": [1.5, "-inf"]}'
    >>> _json.number("-inf")
    -inf
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import IO, Any, Callable

__all__ = ["NON_FINITE", "encode", "dumps", "dump", "number", "is_number"]

NON_FINITE = ("nan", "inf", "-inf")


def _float(x: float) -> float | str:
    return x if math.isfinite(x) else "nan" if math.isnan(x) else "inf" if x > 0 else "-inf"


def encode(obj: Any, default: Callable[[Any], Any] | None = None) -> Any:
    """``obj`` as strict JSON values: non-finite floats as "nan"/"inf"/"-inf", tuples as lists,
    dict keys as strings, numpy scalars and arrays as Python values, dataclasses as dicts.
    Anything else goes to ``default`` (None: left to json, which raises TypeError)."""
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return _float(obj)
    if isinstance(obj, dict):
        return {str(k): encode(v, default) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [encode(v, default) for v in obj]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return encode(dataclasses.asdict(obj), default)
    item = getattr(obj, "tolist", None)  # numpy scalars and arrays
    if callable(item) and type(obj).__module__ == "numpy":
        return encode(item(), default)
    return obj if default is None else encode(default(obj))


def dumps(obj: Any, *, default: Callable[[Any], Any] | None = None, **kwargs: Any) -> str:
    """``json.dumps`` under the policy (``kwargs``: indent, separators, sort_keys ...). Plain
    JSON values (no non-finite float, nothing to convert) are written without the walk, the
    common case of a per-event record; anything else goes through :func:`encode`."""
    try:
        return json.dumps(obj, allow_nan=False, **kwargs)
    except (TypeError, ValueError):
        return json.dumps(encode(obj, default), allow_nan=False, **kwargs)


def dump(obj: Any, fp: IO[str], *, default: Callable[[Any], Any] | None = None, **kwargs: Any) -> None:
    """``json.dump`` under the policy."""
    json.dump(encode(obj, default), fp, allow_nan=False, **kwargs)


def is_number(v: Any) -> bool:
    """A JSON number (not a bool) or one of the non-finite strings."""
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) or (isinstance(v, str) and v in NON_FINITE)


def number(v: Any) -> Any:
    """A number field as written: "nan"/"inf"/"-inf" become floats; anything else is returned as
    it is (the caller checks its type). Also reads the bare NaN/Infinity older files hold, which
    Python's json parser already turned into floats."""
    return float(v) if isinstance(v, str) and v in NON_FINITE else v
