"""'module:attribute' specs (``--model mymodels:make_mlp``), resolved the same way by every command
and by worker processes."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any, Callable

from torch_xla_ext.errors import TorchXlaExtError


class FactorySpecError(TorchXlaExtError, ValueError):
    """A 'module:attribute' spec that does not name an importable callable."""


def resolve(spec: str, what: str = "--model", *, error: type[Exception] = FactorySpecError) -> Callable[..., Any]:
    """The callable ``spec`` names. The module may sit in the current directory (as with
    ``python -m``); the attribute may be dotted. Errors (of type ``error``) start with ``what``.

    Example:
        >>> resolve("torch_xla_ext.doctor:example")   # doctest: +SKIP
    """
    module_name, sep, attr = spec.partition(":") if isinstance(spec, str) else ("", "", "")
    if not sep or not module_name or not attr:
        raise error(f"{what}: expected module:factory, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise error(f"{what}: cannot import {module_name!r} ({e})") from None
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            break
    if not callable(obj):
        raise error(f"{what}: {module_name} has no callable {attr!r}")
    return obj
