"""The one ``--model module:factory`` contract, resolved the same way by every command and by
worker processes.

A factory takes no arguments and returns ``(model, args)`` or ``(model, args, kwargs)``:
``model`` is an ``nn.Module`` (or a callable where a command says so), ``args`` a tuple of example
inputs (a single tensor is taken as a 1-tuple) and ``kwargs`` a dict of keyword inputs (HF models
take ``attention_mask`` this way). :func:`load_model` checks that shape and names what is wrong;
each command documents which parts it uses.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any, Callable, NamedTuple

from torch_xla_ext.errors import InvalidArgumentError


class FactorySpecError(InvalidArgumentError):
    """A 'module:attribute' spec that does not name an importable callable, or a factory whose
    return value breaks the contract."""


class Made(NamedTuple):
    """What a ``--model`` factory made: ``model(*args, **kwargs)`` runs it."""

    model: Any
    args: tuple
    kwargs: dict


def resolve(spec: str, what: str = "--model", *, error: type[Exception] = FactorySpecError) -> Callable[..., Any]:
    """The callable ``spec`` names. The module may sit in the current directory (as with
    ``python -m``); the attribute may be dotted. Errors (of type ``error``) start with ``what``.

    Example:
        >>> resolve("torch_xla_ext.graph_breaks:example").__name__
        'example'
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


def check_made(made: Any, spec: str = "factory", what: str = "--model", *, module_only: bool = True,
               error: type[Exception] = FactorySpecError) -> Made:
    """``made`` checked against the contract: ``(model, args)`` or ``(model, args, kwargs)``."""
    import torch

    if not (isinstance(made, tuple) and len(made) in (2, 3)):
        raise error(f"{what}: {spec}() must return (model, args) or (model, args, kwargs), "
                    f"got {_describe(made)}")
    model, args = made[0], made[1]
    kwargs = made[2] if len(made) == 3 else {}
    if module_only and not isinstance(model, torch.nn.Module):
        raise error(f"{what}: {spec}()[0] must be an nn.Module, got {_describe(model)}")
    if not module_only and not callable(model):
        raise error(f"{what}: {spec}()[0] must be callable, got {_describe(model)}")
    if isinstance(args, torch.Tensor):
        args = (args,)
    if isinstance(args, list):
        args = tuple(args)
    if not isinstance(args, tuple):
        raise error(f"{what}: {spec}()[1] (args) must be a tuple of inputs, got {_describe(args)}")
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise error(f"{what}: {spec}()[2] (kwargs) must be a dict with str keys, got {_describe(kwargs)}")
    return Made(model, args, dict(kwargs))


def load_model(spec: str, what: str = "--model", *, module_only: bool = True,
               error: type[Exception] = FactorySpecError) -> Made:
    """Resolves ``spec``, calls the factory and checks what it returns.

    Example:
        >>> model, args, kwargs = load_model("torch_xla_ext.graph_breaks:example")
        >>> type(model).__name__, [tuple(a.shape) for a in args], kwargs
        ('ExampleModel', [(4, 16)], {})
    """
    return check_made(resolve(spec, what, error=error)(), spec, what, module_only=module_only, error=error)


def _describe(v: Any) -> str:
    if isinstance(v, tuple):
        return f"a tuple of {len(v)}"
    return f"a {type(v).__name__}"
