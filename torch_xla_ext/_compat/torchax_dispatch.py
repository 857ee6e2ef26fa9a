"""torchax's dispatch (the pin is 0.0.13) seen op by op, for parity's op audit: every op an eager
run lowers through torchax's registry, with its inputs and result copied to the CPU and the same op
computed by torch on the CPU from those inputs (what torchax's own ``debug_accuracy`` compares,
without its pdb). The one place that knows these torchax internals; ``_compat/torchax_run.py``
holds its compiled and eager runs.

* ``tensor.Environment.dispatch(self, func, types, args, kwargs)`` is called by torchax's
  TorchFunctionMode for every torch function and by its TorchDispatchMode for every aten op. The
  audit wraps it on the default environment's instance for its duration (the class's own, which
  the script trace may have wrapped, is what the wrapper calls).
* ``Environment._get_op_or_decomp(func)`` is the lowering dispatch runs for ``func`` (torchax's
  table, a user's ``override_op_definition``, or torchax's decompositions); its ``func`` is the
  function that implements it and ``is_user_defined`` says it is an override.
* Compared: an op found there with a torchax tensor among its inputs. Not compared: tensor
  constructors and the dtype/device conversions dispatch handles before its table (no tensor in,
  or nothing but a copy), ops that draw random numbers (tagged ``nondeterministic_seeded``) or
  return uninitialised memory (``empty*``), and an op torch cannot run on the CPU copies.

Importing this module imports nothing of torch, JAX or torchax.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable, Iterator

from torch_xla_ext._compat import torchax_run as _run

__all__ = ["OpCall", "audit"]


@dataclasses.dataclass
class OpCall:
    """One op torchax lowered in an audited run: ``func`` (the torch op: an aten OpOverload, or a
    torch function torchax lowers itself such as ``torch.nn.functional.linear``), ``lowering`` (the
    module-qualified name of the function torchax ran for it), ``overridden`` (that function is a
    user's ``override_op_definition``, not torchax's own), ``inputs`` ((args, kwargs) on the CPU as
    the op received them), ``result`` (what torchax computed, on the CPU) and ``eager`` (what torch
    computes for the same op on the CPU from ``inputs``)."""

    func: Any
    lowering: str
    overridden: bool
    inputs: tuple[tuple, dict]
    result: Any
    eager: Any


def _pytree() -> Any:
    """torch's pytree (``_compat.pytree``), imported on first use: it imports torch, and this module
    imports none at import."""
    from torch_xla_ext._compat import pytree  # torch at import: see the docstring

    return pytree


def _qualified(fn: Any) -> str:
    """``torchax.ops.jaten._aten_gelu``: a function by its module and qualified name."""
    module = getattr(fn, "__module__", None)
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    return f"{module}.{name}" if module else name


def _on_cpu(tree: Any) -> Any:
    """``tree`` with every torchax tensor (and view) copied to a CPU torch tensor."""
    import torchax.tensor

    def one(v: Any) -> Any:
        if isinstance(v, torchax.tensor.View):
            v = v.torch()  # a View's torch() is the torchax tensor it stands for, not a CPU copy
        return v.torch() if isinstance(v, torchax.tensor.Tensor) else v

    return _pytree().tree_map(one, tree)


def _has_torchax_tensor(tree: Any) -> bool:
    import torchax.tensor

    return any(isinstance(v, (torchax.tensor.Tensor, torchax.tensor.View)) for v in _pytree().tree_leaves(tree))


def _compared(env: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    """The lowering (torchax's ``Operator``) dispatch runs for ``func`` when the op is compared
    (module docstring), else None."""
    import torch
    import torchax.tensor

    if func in torchax.tensor.TENSOR_CONSTRUCTORS or func in _conversions():
        return None
    if torch.Tag.nondeterministic_seeded in getattr(func, "tags", ()):
        return None
    packet = getattr(getattr(func, "overloadpacket", None), "__name__", "") or getattr(func, "__name__", "")
    if "empty" in packet:  # empty, empty_like, new_empty, empty_strided: their values are garbage on the CPU
        return None
    if not _has_torchax_tensor((args, kwargs)):
        return None
    try:
        return env._get_op_or_decomp(func)
    except torchax.tensor.OperatorNotFound:
        return None


def _conversions() -> tuple:
    """What ``Environment.dispatch`` handles before its table (a copy to a dtype or device)."""
    import torch

    return (torch.Tensor.to, torch.ops.aten.lift_fresh.default, torch.ops.aten._to_copy,
            torch.ops.aten._to_copy.default)


@contextlib.contextmanager
def _torch_only() -> Iterator[None]:
    """Plain torch on the CPU inside torchax's modes: no dispatch or function mode sees the block."""
    import torch
    from torch.utils._mode_utils import no_dispatch

    with no_dispatch(), torch._C.DisableTorchFunction():
        yield


def _eager(func: Any, inputs: tuple[tuple, dict]) -> tuple[bool, Any]:
    """(ran, result) of ``func`` by torch on the CPU from ``inputs`` (a ``device=`` made the CPU,
    as torchax's debug_accuracy does). An op torch cannot run on them is not compared."""
    args, kwargs = inputs
    if "device" in kwargs:
        kwargs = {**kwargs, "device": "cpu"}
    try:
        with _torch_only():
            return True, func(*args, **kwargs)
    except Exception:  # noqa: BLE001 - torch refusing an op on the CPU copies: that op is not compared
        return False, None


def _clone(tree: Any) -> Any:
    """CPU copies kept apart from what torch computes on them (an in-place op writes its inputs)."""
    import torch

    return _pytree().tree_map(lambda v: v.clone() if isinstance(v, torch.Tensor) else v, tree)


def _wrapped(env: Any, on_op: Callable[[OpCall], bool]) -> Callable[..., Any]:
    """``env.dispatch`` that reports every compared op to ``on_op`` until it returns False."""
    original = type(env).dispatch
    state = {"on": True}

    def dispatch(func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        op = _compared(env, func, args, kwargs) if state["on"] else None
        if op is None:
            return original(env, func, types, args, kwargs)
        with _torch_only():
            inputs = _on_cpu((tuple(args), dict(kwargs)))  # before the op: in-place ops write their inputs
        result = original(env, func, types, args, kwargs)
        with _torch_only():
            ran, eager = _eager(func, _clone(inputs))
            if ran and state["on"]:
                call = OpCall(func, _qualified(op.func), bool(op.is_user_defined), inputs, _on_cpu(result), eager)
                state["on"] = bool(on_op(call))
        return result

    return dispatch


def audit(model: Any, args: tuple, kwargs: dict, on_op: Callable[[OpCall], bool], *,
          within: Callable[[], Any] | None = None) -> Any:
    """``model(*args, **kwargs)`` (a module or a function, and CPU tensors: a module is moved in
    place) run by torchax op by op, on JAX's CPU with JAX's x64 mode on, calling ``on_op(OpCall)``
    after each compared op (in the order ops finish: a decomposition's own ops before the op);
    ``on_op`` returns False to stop comparing (the run goes on). ``within()``: a context manager
    entered inside torchax's environment, so its torch function mode sees each call before
    torchax's (the float64 widening). Returns the output, on the CPU. What torchax raises
    propagates; ``on_op`` runs as plain torch on the CPU, outside torchax's modes."""
    import jax

    env = _run.environment()
    with _run.x64_mode(), jax.default_device(jax.devices("cpu")[0]):
        model, args, kwargs = _run.to_jax(model), _run.to_jax(args), _run.to_jax(kwargs)
        env.dispatch = _wrapped(env, on_op)  # the instance's: the class's own stays as it is
        try:
            with env, (within() if within is not None else contextlib.nullcontext()):
                out = model(*args, **kwargs)
        finally:
            del env.dispatch
        return _on_cpu(out)

