"""Schema validation of untrusted JSON through pydantic v2, with our typed errors.

A schema is a ``pydantic.BaseModel`` or a stdlib dataclass whose fields are JSON types (its
annotations are the schema: one copy of each rule); :func:`validate` checks ``data`` against it and turns pydantic's first error into the caller's
exception class, naming ``where`` and the field by its path (pydantic's ``loc``: ``calls[2].path``).
pydantic's ``ValidationError`` never leaves this module.

pydantic is imported when a validation runs, never at import: the JAX-only install of
``export`` (jax[cpu], numpy, ml_dtypes, flatbuffers and our wheel) has no pydantic, so the
manifest and torch_xla-meta validators of ``export`` stay hand-written (``export/manifest.py``,
``_compat/stablehlo.py``); the torch-side files (graph-break reports, parity captures) use this.

Example:
    >>> import dataclasses
    >>> @dataclasses.dataclass
    ... class Point:
    ...     x: int
    >>> validate(Point, {"x": 3}, ValueError, "p.json")
    Point(x=3)
    >>> validate(Point, {"x": "3"}, ValueError, "p.json")
    Traceback (most recent call last):
    ...
    ValueError: p.json: field 'x' must be int, got str
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Any, Sequence

__all__ = ["field_path", "validate"]

# pydantic's error types that mean "wrong JSON type", as the Python type the field wants.
_EXPECTED = {
    "int_type": "int", "int_parsing": "int", "int_from_float": "int", "float_type": "float",
    "float_parsing": "float", "string_type": "str", "bool_type": "bool", "list_type": "list",
    "dict_type": "dict", "tuple_type": "list", "dataclass_type": "dict", "model_type": "dict",
    "model_attributes_type": "dict", "dataclass_exact_type": "dict",
}


@functools.lru_cache(maxsize=None)
def _adapter(schema: Any) -> Any:
    """A pydantic validator of ``schema``. A stdlib dataclass is validated through a model made
    from its fields (pydantic's strict mode takes only instances of a dataclass, not the dict a
    JSON file holds); keys that are not fields are ignored (``to_dict`` writes derived figures)."""
    import pydantic

    if dataclasses.is_dataclass(schema) and not issubclass(schema, pydantic.BaseModel):
        hints = typing.get_type_hints(schema)
        fields: dict[str, Any] = {}
        for f in dataclasses.fields(schema):
            if f.default is not dataclasses.MISSING:
                fields[f.name] = (hints[f.name], f.default)
            elif f.default_factory is not dataclasses.MISSING:
                fields[f.name] = (hints[f.name], pydantic.Field(default_factory=f.default_factory))
            else:
                fields[f.name] = (hints[f.name], ...)
        model = pydantic.create_model(schema.__name__, __config__=pydantic.ConfigDict(extra="ignore"), **fields)
        return pydantic.TypeAdapter(model), schema
    return pydantic.TypeAdapter(schema), None


def field_path(loc: Sequence[Any]) -> str:
    """pydantic's ``loc`` as our field path: ``("calls", 2, "path")`` -> ``calls[2].path``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def validate(schema: Any, data: Any, error: type[Exception], where: str, *, strict: bool = True) -> Any:
    """``data`` validated against ``schema`` (and built into it); the first violation raises
    ``error(f"{where}: field '<path>' ...")``. ``strict``: no coercion (JSON's types as they are:
    "3" is not an int, true is not an int; an int is a float)."""
    import pydantic

    adapter, dataclass = _adapter(schema)
    try:
        value = adapter.validate_python(data, strict=strict)
    except pydantic.ValidationError as e:
        first = e.errors(include_url=False)[0]
        path = field_path(first["loc"])
        kind, value = first["type"], first.get("input")
        if not path:
            expected = _EXPECTED.get(kind)
            what = f"expected a JSON {'object' if expected == 'dict' else expected}" if expected else first["msg"]
            raise error(f"{where}: {what}, got {type(value).__name__}") from None
        if kind == "missing":
            raise error(f"{where}: missing field '{path}'") from None
        if kind in _EXPECTED:
            raise error(f"{where}: field '{path}' must be {_EXPECTED[kind]}, got {type(value).__name__}") from None
        raise error(f"{where}: field '{path}' is {_short(value)} ({first['msg'][:1].lower()}{first['msg'][1:]})") \
            from None
    if dataclass is None:
        return value
    return dataclass(**{name: getattr(value, name) for name in type(value).model_fields})
