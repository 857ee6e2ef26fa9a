"""Writes torch_xla_ext/_ext.pyi, the type stub of the private extension module, from the built
module itself (pybind11 puts every signature in the first line of a docstring).

    make stubs        # = make develop, then: .venv/bin/python python/generate_stubs.py

Each submodule of `_ext` (one per component) becomes a class of the same name holding its classes
and static functions, so `from torch_xla_ext._ext import numerics as _core; _core.compare(...)`
type-checks. tests/packaging/stubs_test.py fails when the checked-in stub and the built module
differ; rerun this after changing a binding.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import re
import sys
from typing import Any

MODULE = "torch_xla_ext._ext"
HEADER = (
    "# The type stub of torch_xla_ext._ext, generated from the built module by\n"
    "# python/generate_stubs.py (`make stubs`): do not edit by hand.\n"
    "# Each submodule (one per component) is a class holding its classes and static functions.\n"
)
_KEPT_DUNDERS = {"__init__", "__str__", "__repr__", "__int__", "__index__", "__eq__", "__ne__", "__hash__",
                 "__len__", "__iter__", "__getitem__", "__contains__", "__bool__", "__call__", "__enter__",
                 "__exit__"}
_SIG = re.compile(r"^(?:\d+\. )?(?P<name>\w+)(?P<sig>\(.*\)(?: -> .+)?)$")


def _split_params(params: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in params:
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def _clean(sig: str) -> str:
    """`(a: T = <repr>, b: U) -> R` with defaults as `...` and our module prefix dropped."""
    sig = sig.replace(MODULE + ".", "")
    close = _matching_paren(sig)
    params, ret = sig[1:close], sig[close + 1:]
    parts = []
    for p in _split_params(params):
        name_type, eq, _ = _partition_default(p)
        parts.append(f"{name_type} = ..." if eq else name_type)
    return "(" + ", ".join(parts) + ")" + (ret if ret.strip() else " -> None")


def _matching_paren(sig: str) -> int:
    depth = 0
    for i, ch in enumerate(sig):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0:
            return i
    raise ValueError(f"unbalanced signature: {sig}")


def _partition_default(param: str) -> tuple[str, bool, str]:
    depth = 0
    for i, ch in enumerate(param):
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        elif ch == "=" and depth == 0 and param[i - 1] == " ":
            return param[:i].strip(), True, param[i + 1:].strip()
    return param, False, ""


def _signatures(name: str, doc: str | None) -> list[str]:
    lines = (doc or "").splitlines()
    sigs = [m.group("sig") for line in lines if (m := _SIG.match(line.strip())) and m.group("name") == name]
    if not sigs:
        raise SystemExit(f"generate_stubs: no pybind11 signature for {name!r} in its docstring")
    if not lines[0].startswith("Overloaded function"):
        sigs = sigs[:1]
    return [_clean(s) for s in sigs]


def _summary(doc: str | None, skip_signatures: bool) -> str | None:
    text = [line for line in (doc or "").splitlines()]
    if skip_signatures:
        text = [line for line in text if not _SIG.match(line.strip()) and line.strip() != "Overloaded function."]
    body = " ".join(line.strip() for line in text if line.strip())
    return body.replace('"""', "'''") or None


def _function(name: str, fn: Any, indent: str, decorator: str | None) -> list[str]:
    sigs = _signatures(name, fn.__doc__)
    out = []
    for sig in sigs:
        if len(sigs) > 1:
            out.append(f"{indent}@typing.overload")
        if decorator:
            out.append(f"{indent}@{decorator}")
        out.append(f"{indent}def {name}{sig}: ...")
    return out


def _is_pybind_function(v: Any) -> bool:
    return type(v).__name__ in ("builtin_function_or_method", "instancemethod")


def _class(name: str, cls: type, indent: str, owner: str) -> list[str]:
    bases = [b for b in cls.__bases__ if b.__name__ != "pybind11_object" and b is not object]
    base = "(" + ", ".join(b.__qualname__ for b in bases) + ")" if bases else ""
    out = [f"{indent}class {name}{base}:"]
    inner = indent + "    "
    doc = _summary(cls.__doc__, skip_signatures=False)
    members = getattr(cls, "__members__", None)
    if doc and members is None:
        out.append(f'{inner}"""{doc}"""')
    if members is not None:  # py::enum_
        out += [f"{inner}{m}: typing.ClassVar[{owner}.{cls.__qualname__}]" for m in members]
    for attr, value in sorted(vars(cls).items()):
        if (attr.startswith("__") and attr not in _KEPT_DUNDERS) or attr.startswith("_pybind11"):
            continue
        if members is not None and attr in members:
            continue
        if isinstance(value, property):
            ret = _property_type(value)
            out.append(f"{inner}@property")
            out.append(f"{inner}def {attr}(self) -> {ret}: ...")
            if value.fset is not None:
                out.append(f"{inner}@{attr}.setter")
                out.append(f"{inner}def {attr}(self, value: {ret}) -> None: ...")
        elif isinstance(value, staticmethod):
            out += _function(attr, value.__func__, inner, "staticmethod")
        elif _is_pybind_function(value):
            out += [re.sub(r"\(self: [\w.]+(?=[,)])", "(self", line) for line in _function(attr, value, inner, None)]
    if len(out) == 1 or (len(out) == 2 and out[1].strip().startswith('"""')):
        out.append(f"{inner}...")
    return out


def _property_type(prop: property) -> str:
    doc = (prop.fget.__doc__ or "").splitlines()
    first = doc[0] if doc else ""
    m = re.match(r"^\w*\([^)]*\) -> (?P<ret>.+)$", first.strip())
    if not m:
        raise SystemExit(f"generate_stubs: no return type for property {prop.fget!r}")
    return m.group("ret").replace(MODULE + ".", "")


def render() -> str:
    """The stub text for the importable (built) torch_xla_ext._ext."""
    ext = importlib.import_module(MODULE)
    out = [HEADER, "import collections.abc", "import typing", ""]
    for sub_name in sorted(n for n, v in vars(ext).items() if inspect.ismodule(v)):
        sub = getattr(ext, sub_name)
        out.append("")
        out.append(f"class {sub_name}:")
        doc = _summary(sub.__doc__, skip_signatures=False)
        if doc:
            out.append(f'    """{doc}"""')
        # Classes first, in an order where a base precedes its subclasses.
        classes = sorted((n, v) for n, v in vars(sub).items() if inspect.isclass(v))
        for n, v in sorted(classes, key=lambda nv: (len(nv[1].__mro__), nv[0])):
            out += _class(n, v, "    ", sub_name)
        for n, v in sorted(vars(sub).items()):
            if n.startswith("__") or inspect.isclass(v) or inspect.ismodule(v):
                continue
            if _is_pybind_function(v):
                out += _function(n, v, "    ", "staticmethod")
            elif isinstance(v, (int, float, str, bool)):
                out.append(f"    {n}: typing.ClassVar[{type(v).__name__}]")
    return "\n".join(out).rstrip() + "\n"


def stub_path() -> str:
    import torch_xla_ext

    return os.path.join(os.path.dirname(torch_xla_ext.__file__), "_ext.pyi")


def main() -> int:
    # Run from a checkout: the package next to this directory (after `make develop`).
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="where to write (default: next to the imported torch_xla_ext)")
    a = p.parse_args()
    path = a.out or stub_path()
    text = render()
    with open(path, "w") as f:
        f.write(text)
    print(f"generate_stubs: wrote {path} ({text.count(chr(10))} lines)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
