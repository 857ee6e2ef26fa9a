"""torchax's interop and dispatch (the pin is 0.0.13; torch_xla 2.9's bundled copy has the same
names): the two seams the script trace records through, and what it reads of a jitted torch
function. The one place that knows these torchax internals; ``_compat/torchax.py`` holds torchax's
export lowering.

* ``interop.wrap_jax_jit(torch_function, jax_jit_func, kwargs_for_jax)`` is under
  ``torchax.compile``, ``interop.jax_jit`` and ``JittableModule.make_jitted``/``jittable_call``,
  each of which looks it up as a module global when it jits: replaced once, every function jitted
  afterwards goes through the replacement. For ``jax.jit`` it returns
  ``functools.partial(call_jax, jitted)``; the replacement returns what ``make_call`` makes of
  (the torch function, ``jax.jit``'s keyword arguments, ``call_jax``, the jitted function).
  ``jax.value_and_grad``, ``jax.checkpoint`` and ``shard_map`` pass through unchanged (they are
  traced inside a jitted function, not compiled alone).
* ``tensor.Environment.dispatch(self, func, types, args, kwargs)``: every torch op on a torchax
  tensor, first as the torch function, then its aten ops; wrapped by ``wrap``.
* ``describe(torch_function)``: a ``JittableModule``'s method (``functools.partial(
  jm.functional_call, "forward")``; ``JittableModule.__class__`` is the wrapped model's class, by
  torchax's design) or a plain function: its name, definition, parameters, and the other names of
  tied parameters (the wrapped model is the JittableModule's one submodule).

Importing this module imports nothing of torch, JAX or torchax.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import sys
from typing import Any, Callable

__all__ = ["Target", "describe", "install", "jax_values", "op_name"]


@dataclasses.dataclass
class Target:
    """A jitted torch function: ``name`` (``GPT2LMHeadModel.forward``, ``main.<locals>.step``),
    ``defined`` ("file:line"), ``module`` (a JittableModule's method: its first two arguments are
    the parameters and buffers dicts), ``params`` (its parameters' (name, kind), ``self`` left
    out), ``aliases`` (FQN -> the other names of the same tied parameter)."""

    name: str
    defined: str
    module: bool
    params: list[tuple[str, str]]
    aliases: dict[str, list[str]] = dataclasses.field(default_factory=dict)


def install(make_call: Callable[[Any, dict[str, Any], Any, Any], Any],
            wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Replaces ``torchax.interop.wrap_jax_jit`` (see the module; ``make_call(torch_function,
    jit_kwargs, call_jax, jitted)`` makes the callable torchax returns) and wraps
    ``torchax.tensor.Environment.dispatch`` with ``wrap(original)``. torchax must be imported."""
    import jax

    interop = sys.modules["torchax.interop"]
    tensor = sys.modules["torchax.tensor"]
    original = interop.wrap_jax_jit

    def wrap_jax_jit(torch_function: Any, jax_jit_func: Any = jax.jit, kwargs_for_jax: Any = None) -> Any:
        res = original(torch_function, jax_jit_func=jax_jit_func, kwargs_for_jax=kwargs_for_jax)
        if jax_jit_func is not jax.jit or not isinstance(res, functools.partial) or len(res.args) != 1:
            return res
        return make_call(torch_function, dict(kwargs_for_jax or {}), res.func, res.args[0])

    functools.update_wrapper(wrap_jax_jit, original)
    interop.wrap_jax_jit = wrap_jax_jit
    tensor.Environment.dispatch = wrap(tensor.Environment.dispatch)


def jax_values(tree: Any) -> Any:
    """``tree`` with torchax tensors as the JAX arrays they hold (``interop.jax_view``), what
    ``call_jax`` hands the jitted function."""
    from torchax import interop

    return interop.jax_view(tree)


def describe(torch_function: Any) -> Target:
    """What a jitted torch function is (see :class:`Target`)."""
    from torchax import interop

    target, module, aliases = torch_function, False, {}
    func = getattr(torch_function, "func", None)
    owner = getattr(func, "__self__", None)
    if (isinstance(torch_function, functools.partial) and isinstance(owner, interop.JittableModule)
            and torch_function.args and isinstance(torch_function.args[0], str)):
        method = torch_function.args[0]
        model_class = owner.__class__  # the wrapped model's class (JittableModule reports it)
        target, module = getattr(model_class, method), True
        name = f"{model_class.__name__}.{method}"
        aliases = _aliases(owner)
    else:
        name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or type(target).__name__
    code = getattr(inspect.unwrap(target), "__code__", None)
    defined = f"{code.co_filename}:{code.co_firstlineno}" if code is not None else ""
    try:
        params = [(p.name, p.kind.name) for p in inspect.signature(target).parameters.values()]
    except (TypeError, ValueError):
        params = []
    if module and params and params[0][0] == "self":
        params = params[1:]
    return Target(name=name, defined=defined, module=module, params=params, aliases=aliases)


def _aliases(jittable: Any) -> dict[str, list[str]]:
    """FQN -> the other FQNs of the same tensor (tied weights: JittableModule keeps one name)."""
    model = next(iter(jittable.children()), None)  # the wrapped model: JittableModule's one submodule
    if model is None:
        return {}
    by_id: dict[int, list[str]] = {}
    for n, p in model.named_parameters(remove_duplicate=False):
        by_id.setdefault(id(p), []).append(n)
    return {n: [m for m in names if m != n] for names in by_id.values() if len(names) > 1 for n in names}


def op_name(func: Any) -> str:
    """How the report names a dispatched op: ``aten.argmax.default`` for an aten overload,
    ``Tensor.__getitem__`` or ``torch.randint`` for a torch function."""
    if type(func).__name__ in ("OpOverload", "OpOverloadPacket"):
        return str(func)
    q = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or str(func)
    owner = getattr(func, "__objclass__", None) or getattr(func, "__self__", None)
    if q.startswith("TensorBase.") or getattr(owner, "__name__", "") == "TensorBase":
        return "Tensor." + q.split(".")[-1]
    if "." not in q or q.startswith("_VariableFunctionsClass."):
        return "torch." + q.split(".")[-1]
    return q

