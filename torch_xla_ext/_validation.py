"""Schema validation of untrusted JSON through pydantic v2, with our typed errors: the one validator
of every file torch_xla_ext reads back (export's manifest, torch_xla's ``.meta``, graph-break
reports, parity captures).

A schema is a stdlib dataclass (or a ``pydantic.BaseModel``) whose fields are JSON types: its
annotations are the schema, one copy of each rule. Dataclasses and ``TypedDict``\\ s nest; a
``TypedDict``'s ``NotRequired`` key may be absent (absent and null stay different). Rules beyond
a type are written into the annotation with ``typing.Annotated`` and the markers here, so a schema
module needs no pydantic at import: :class:`Check` (a predicate and what it expects) and
:class:`Before` (a conversion of the raw value first, such as ``_json.number``).
:func:`validate` checks ``data`` against the schema and turns pydantic's first error into the
caller's exception class, naming ``where`` and the field by its path (pydantic's ``loc``:
``calls[2].path``). pydantic's ``ValidationError`` never leaves this module.

pydantic is a dependency of every install (the JAX-only one too); it is imported when a
validation first runs, not with this module.

Example:
    >>> import dataclasses
    >>> @dataclasses.dataclass
    ... class Point:
    ...     x: int
    ...     tags: list[typing.Annotated[str, Check(str.isidentifier, "an identifier")]] = dataclasses.field(default_factory=list)
    >>> validate(Point, {"x": 3}, ValueError, "p.json")
    Point(x=3, tags=[])
    >>> validate(Point, {"x": "3"}, ValueError, "p.json")
    Traceback (most recent call last):
    ...
    ValueError: p.json: field 'x' must be int, got str
    >>> validate(Point, {"x": 3, "tags": ["ok", "not ok"]}, ValueError, "p.json")
    Traceback (most recent call last):
    ...
    ValueError: p.json: field 'tags[1]' is 'not ok', expected an identifier
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any, Callable, Sequence

__all__ = ["Before", "Check", "field_path", "validate"]

# pydantic's error types that mean "wrong JSON type", as the Python type the field wants.
_EXPECTED = {
    "int_type": "int", "int_parsing": "int", "int_from_float": "int", "float_type": "float",
    "float_parsing": "float", "string_type": "str", "bool_type": "bool", "list_type": "list",
    "dict_type": "dict", "tuple_type": "list", "dataclass_type": "dict", "model_type": "dict",
    "model_attributes_type": "dict", "dataclass_exact_type": "dict", "typed_dict_type": "dict",
}
_CHECK_ERROR = "txe_check"


@dataclasses.dataclass(frozen=True)
class Check:
    """In ``Annotated[T, Check(predicate, expected)]``: after the value is a ``T``,
    ``predicate(value)`` must hold; otherwise "field 'path' is <value>, expected <expected>".
    Name the annotation at module level (``_Kind = Annotated[str, Check(...)]``) when the module
    uses ``from __future__ import annotations``: a class's string annotations are evaluated in the
    class's namespace, where a lambda written in them does not see the module's names."""

    predicate: Callable[[Any], bool]
    expected: str


@dataclasses.dataclass(frozen=True)
class Before:
    """In ``Annotated[T, Before(convert)]``: ``convert(raw)`` is what is validated as a ``T``
    (``_json.number`` reads "nan"/"inf"/"-inf" as the floats the one JSON rule wrote)."""

    convert: Callable[[Any], Any]


def _is_typed_dict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__required_keys__")


class _Translation:
    """Our schema types as pydantic's: each dataclass as a model (pydantic's strict mode takes only
    instances of a stdlib dataclass, not the dict a JSON file holds), each TypedDict rebuilt with
    typing_extensions (pydantic refuses typing's before Python 3.12), each marker as its validator."""

    def __init__(self) -> None:
        import pydantic
        import typing_extensions  # pydantic's dependency: NotRequired and TypedDict on every Python

        self.pydantic, self.typing_extensions = pydantic, typing_extensions
        self.models: dict[Any, Any] = {}        # dataclass -> model
        self.dataclasses: dict[Any, Any] = {}   # model -> dataclass

    def type(self, tp: Any) -> Any:
        pydantic = self.pydantic
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if origin is typing.Annotated:
            base, *marks = args
            extra = []
            for m in marks:
                if isinstance(m, Check):
                    extra.append(pydantic.AfterValidator(functools.partial(_check, m)))
                elif isinstance(m, Before):
                    extra.append(pydantic.BeforeValidator(m.convert))
                else:
                    extra.append(m)
            return typing.Annotated[(self.type(base), *extra)]
        if origin in (self.typing_extensions.NotRequired, self.typing_extensions.Required):
            return self.type(args[0])
        if dataclasses.is_dataclass(tp) and isinstance(tp, type) and not issubclass(tp, pydantic.BaseModel):
            return self.model(tp)
        if _is_typed_dict(tp):
            return self.typed_dict(tp)
        if origin is typing.Literal or not args:
            return tp
        if origin is typing.Union or origin is types.UnionType:
            return typing.Union[tuple(self.type(a) for a in args)]
        translated = origin[tuple(self.type(a) if a is not Ellipsis else a for a in args)]
        # JSON has no tuples: a list stands for one (strict mode would take only a tuple)
        return typing.Annotated[translated, pydantic.BeforeValidator(_list_as_tuple)] if origin is tuple else translated

    def model(self, schema: type) -> Any:
        if schema not in self.models:
            pydantic = self.pydantic
            hints = typing.get_type_hints(schema, include_extras=True)
            fields: dict[str, Any] = {}
            for f in dataclasses.fields(schema):
                if f.default is not dataclasses.MISSING:
                    fields[f.name] = (self.type(hints[f.name]), f.default)
                elif f.default_factory is not dataclasses.MISSING:
                    fields[f.name] = (self.type(hints[f.name]), pydantic.Field(default_factory=f.default_factory))
                else:
                    fields[f.name] = (self.type(hints[f.name]), ...)
            # keys that are not fields are ignored (a to_dict may write derived figures)
            model = pydantic.create_model(schema.__name__, __config__=pydantic.ConfigDict(extra="ignore"), **fields)
            self.models[schema], self.dataclasses[model] = model, schema
        return self.models[schema]

    def typed_dict(self, td: type) -> Any:
        typing_extensions = self.typing_extensions
        hints = typing.get_type_hints(td, include_extras=True)
        optional = (typing_extensions.NotRequired,)

        def required(key: str) -> bool:
            # a NotRequired written in a string annotation (PEP 563) shows only in the evaluated hint
            return key in td.__required_keys__ and typing.get_origin(hints[key]) not in optional

        fields = {k: self.type(v) if required(k) else typing_extensions.NotRequired[self.type(v)]
                  for k, v in hints.items()}
        return typing_extensions.TypedDict(td.__name__, fields)

    def back(self, value: Any) -> Any:
        """A validated value with our dataclasses in place of the models made for them."""
        if isinstance(value, self.pydantic.BaseModel) and type(value) in self.dataclasses:
            return self.dataclasses[type(value)](**{k: self.back(getattr(value, k)) for k in type(value).model_fields})
        if isinstance(value, list):
            return [self.back(v) for v in value]
        if isinstance(value, tuple):
            return tuple(self.back(v) for v in value)
        if isinstance(value, dict):
            return {k: self.back(v) for k, v in value.items()}
        return value


def _list_as_tuple(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _check(mark: Check, value: Any) -> Any:
    if not mark.predicate(value):
        from pydantic_core import PydanticCustomError

        raise PydanticCustomError(_CHECK_ERROR, "expected {expected}", {"expected": mark.expected})
    return value


@functools.lru_cache(maxsize=None)
def _adapter(schema: Any) -> tuple[Any, _Translation]:
    """A pydantic validator of ``schema`` and the translation that made it."""
    import pydantic

    translation = _Translation()
    return pydantic.TypeAdapter(translation.type(schema)), translation


def field_path(loc: Sequence[Any]) -> str:
    """pydantic's ``loc`` as our field path: ``("calls", 2, "path")`` -> ``calls[2].path``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and part.startswith(("function-after[", "function-before[")):
            continue  # a validator's own step, not a field
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

    adapter, translation = _adapter(schema)
    try:
        value = adapter.validate_python(data, strict=strict)
    except pydantic.ValidationError as e:
        first = e.errors(include_url=False)[0]
        path = field_path(first["loc"])
        kind, value = first["type"], first.get("input")
        if kind == _CHECK_ERROR:
            raise error(f"{where}: field '{path}' is {_short(value)}, {first['msg']}") from None
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
    return translation.back(value)
