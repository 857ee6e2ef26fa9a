"""torchax (the pin is 0.0.13) running a PyTorch model on JAX's XLA, as plain data for parity: the
compiled forward ``torchax.compile`` builds, torchax's eager (op by op) run, the lowering of each to
StableHLO with its arguments.
The one place that knows torchax's environment, its interop and its op registry (``_compat/torchax.py``
holds its export); everything else works from the plain data here.

- **The compiled forward** is ``torchax.compile(model)``'s: ``JittableModule(model).functional_call``
  of ``forward`` with its ``params`` and ``buffers`` as JAX arguments, under ``jax.jit`` through
  ``interop.jax_view``, its outputs flattened (any pytree: a ``ModelOutput`` is no JAX type). It is
  lowered once (every argument kept, so ``main`` takes them all in JAX's pytree order), compiled
  from that lowering and run: the program is exactly what ran.
- **The eager run** is the model called under ``torchax.default_env()``: every aten op is its own
  XLA computation. The values it reads back to Python (``.item()``, ``bool(t)``, ``nonzero``: what a
  trace cannot have) are recorded, so its program can be traced with those reads answered by the
  values the run read (as torch_xla's lazy trace takes a read value as a constant).
- **x64**: with JAX's ``jax_enable_x64`` off (its default) torchax makes a float64 tensor float32 and
  an int64 tensor int32; :func:`lower` with ``x64=True`` traces the program torch's dtypes ask for.

Importing this module imports nothing of torch, JAX or torchax.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from torch_xla_ext import _dtypes
from torch_xla_ext._compat import torchax as _torchax  # numpy and _dtypes at import, like this module

__all__ = ["Lowering", "Reads", "compiled_forward", "eager", "environment", "lower", "overridden", "platform", "seed",
           "to_cpu", "to_jax", "version", "x64_enabled", "x64_mode"]

# The aten ops whose torchax lowering reads a value back to Python: a trace fails on them
# (jax.errors.ConcretizationTypeError), the eager run records what they gave.
_READS = ("_local_scalar_dense", "nonzero")


@dataclasses.dataclass
class Lowering:
    """A lowered program: ``text`` (StableHLO, ``main`` taking every argument), ``args`` (main's
    arguments, numpy; None when lowered from shapes alone) and ``order``: what each of main's
    arguments is, ("parameter", name), ("buffer", name) or ("input", k) (the k-th tensor of
    ``(args, kwargs)`` in torch's pytree order); ``outputs``: the results of running it, when it ran."""

    text: str
    args: list[np.ndarray] | None
    order: list[tuple[str, Any]] = dataclasses.field(default_factory=list)
    outputs: list[Any] | None = None


class _Label:
    """One argument's place, as a pytree leaf (JAX orders main's arguments by its own flattening)."""

    def __init__(self, kind: str, key: Any):
        self.kind, self.key = kind, key


def _order(structure: tuple) -> list[tuple[str, Any]]:
    import jax

    return [(leaf.kind, leaf.key) for leaf in jax.tree_util.tree_leaves(structure)]


def _labels(state: tuple, tensors: Sequence[Any]) -> tuple:
    labelled = tuple(({k: _Label("parameter", k) for k in params}, {k: _Label("buffer", k) for k in buffers})
                     for params, buffers in state)
    return (*labelled, *(_Label("input", k) for k in range(len(tensors))))


class Reads:
    """The values an eager run read back to Python, in order, and the torchax ops that read them:
    :meth:`recording` appends what each read gives, :meth:`answering` gives them back in order
    (inside a trace, as constants)."""

    def __init__(self) -> None:
        self.values: list[Any] = []
        self._next = 0

    def __len__(self) -> int:
        return len(self.values)

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        env = _env()
        originals = {op: env._get_op_or_decomp(op) for op in _read_ops()}

        def record(op: Any) -> Callable[..., Any]:
            original = originals[op]

            def impl(*args: Any, **kwargs: Any) -> Any:
                a, k = env.t2j_iso((args, kwargs))
                value = original.func(*a, **k)
                self.values.append(value)
                return env.j2t_iso(value)

            return impl

        with _overridden(env, {op: record(op) for op in originals}):
            yield

    @contextlib.contextmanager
    def answering(self) -> Iterator[None]:
        env = _env()
        self._next = 0

        def answer(*args: Any, **kwargs: Any) -> Any:
            if self._next >= len(self.values):
                raise RuntimeError("the trace reads more values than the eager run did: it takes another path")
            value = self.values[self._next]
            self._next += 1
            return env.j2t_iso(value)

        with _overridden(env, {op: answer for op in _read_ops()}):
            yield


def _read_ops() -> list[Any]:
    import torch

    return [getattr(torch.ops.aten, name).default for name in _READS]


@contextlib.contextmanager
def _overridden(env: Any, impls: dict[Any, Callable[..., Any]]) -> Iterator[None]:
    """torchax's lowering of each op replaced by ``impls[op]`` (``Environment.override_op_definition``),
    the environment's own entries restored after."""
    saved = {op: env._ops.get(op) for op in impls}
    try:
        for op, impl in impls.items():
            env.override_op_definition(op, impl)
        yield
    finally:
        for op, entry in saved.items():
            if entry is None:
                env._ops.pop(op, None)
            else:
                env._ops[op] = entry


def _env() -> Any:
    import torchax

    return torchax.default_env()


def environment() -> Any:
    """torchax's default environment (the one every run here uses)."""
    return _env()


@contextlib.contextmanager
def overridden(impls: dict[Any, Callable[..., Any]]) -> Iterator[None]:
    """The default environment with each op's lowering replaced by ``impls[op]`` through torchax's
    public ``override_op_definition`` (the function gets torchax tensors and computes with torch
    ops), its own entries restored after: how a test plants a lowering."""
    with _overridden(_env(), impls):
        yield


def platform() -> str:
    """The device JAX computes on, as parity names devices: "CPU", "TPU", "GPU"."""
    import jax

    return jax.devices()[0].platform.upper()


def x64_enabled() -> bool:
    """Whether JAX's x64 mode is on (torchax then keeps float64 and int64)."""
    import jax

    return bool(jax.config.jax_enable_x64)


@contextlib.contextmanager
def x64_mode() -> Iterator[None]:
    """JAX's x64 mode on for this thread, restored after (as ``_compat.torchax.x64``)."""
    with _torchax.x64():
        yield


def to_jax(tree: Any) -> Any:
    """Every CPU tensor of ``tree`` (a module: moved in place, as ``module.to("jax")``) as a torchax
    tensor."""
    env = _env()
    with env:
        return env.to_xla(tree)


def to_cpu(tensor: Any) -> Any:
    """A torchax tensor as a CPU torch tensor (a copy); a CPU tensor as it is."""
    import torchax.tensor

    if isinstance(tensor, (torchax.tensor.Tensor, torchax.tensor.View)):
        return tensor.torch()
    return tensor


def _numpy(leaves: Sequence[Any]) -> list[np.ndarray]:
    return [np.asarray(v) for v in leaves]


class _Inputs:
    """``(args, kwargs)`` split into their tensors, which a compiled function takes as JAX arguments,
    and everything else (a flag, None, a size), which it closes over as the model reads it."""

    def __init__(self, args: tuple, kwargs: dict):
        import torch

        from torch_xla_ext._compat.pytree import tree_flatten  # torch: this module imports none at import

        self._leaves, self._spec = tree_flatten((tuple(args), dict(kwargs)))
        self._where = [i for i, v in enumerate(self._leaves) if isinstance(v, torch.Tensor)]
        self.tensors = [self._leaves[i] for i in self._where]

    def rebuild(self, tensors: Sequence[Any]) -> tuple[tuple, dict]:
        from torch_xla_ext._compat.pytree import tree_unflatten  # torch: this module imports none at import

        leaves = list(self._leaves)
        for i, t in zip(self._where, tensors):
            leaves[i] = t
        return tree_unflatten(leaves, self._spec)


def _state(model: Any) -> tuple:
    """A module's parameters and buffers as torch.func.functional_call takes them (nothing for a
    function)."""
    import torch

    if not isinstance(model, torch.nn.Module):
        return ()
    return ((dict(model.named_parameters()), dict(model.named_buffers())),)


def compiled_forward(model: Any, args: tuple, kwargs: dict, flatten: Callable[[Any], list],
                     on_lowered: Callable[[Lowering], None] | None = None,
                     on_arguments: Callable[[list[np.ndarray]], None] | None = None) -> tuple[list, Lowering]:
    """``torchax.compile(model)``'s forward (or ``torchax.compile(fn)``'s function) on ``args`` and
    ``kwargs`` (torchax tensors, the model moved), its outputs flattened by ``flatten`` (a torch
    value -> a list of tensors) inside the compiled function: lowered once, compiled from that
    lowering and run; ``on_arguments(arrays)`` gets the function's arguments (the lowering's, in
    its order) before it is traced, ``on_lowered(lowering)`` the lowering before JAX compiles it.
    Returns (outputs as torchax tensors, the lowering with its arguments). What torchax or JAX
    raises while tracing propagates."""
    import jax
    import torch
    import torchax
    from torchax import interop

    env = _env()
    inputs = _Inputs(args, kwargs)
    with env:
        if isinstance(model, torch.nn.Module):
            fast = torchax.compile(model)
            state: tuple = (fast.params, fast.buffers)

            def forward(params: Any, buffers: Any, *tensors: Any) -> list:
                a, k = inputs.rebuild(tensors)
                return flatten(fast.functional_call("forward", params, buffers, *a, **k))
        else:
            state = ()

            def forward(*tensors: Any) -> list:
                a, k = inputs.rebuild(tensors)
                return flatten(model(*a, **k))

        call = interop.jax_view((*state, *inputs.tensors))
        arrays = _numpy(jax.tree_util.tree_leaves(call))
        if on_arguments is not None:
            on_arguments(arrays)
        lowered = jax.jit(interop.jax_view(forward), keep_unused=True).lower(*call)
        lowering = Lowering(lowered.as_text(), arrays,
                            _order(_labels(((fast.params, fast.buffers),) if state else (), inputs.tensors)))
        if on_lowered is not None:
            on_lowered(lowering)
        outputs = lowered.compile()(*call)
    return interop.torch_view(list(outputs)), lowering


def seed(value: int) -> None:
    """torchax's random stream seeded with ``value`` (its ``Environment.manual_seed``)."""
    _env().manual_seed(value)


def version() -> str:
    import torchax

    return str(torchax.__version__)


def eager(model: Any, args: tuple, kwargs: dict, reads: Reads, run: Callable[..., Any]) -> Any:
    """``run(model, args, kwargs)`` under torchax's environment (op by op), recording into ``reads``
    the values it reads back to Python."""
    env = _env()
    with env, reads.recording():
        return run(model, args, kwargs)


def lower(model: Any, args: tuple, kwargs: dict, flatten: Callable[[Any], list], *, reads: Reads | None = None,
          like: tuple[Any, tuple, dict] | None = None, mode: Any = None,
          run: Callable[[Any, tuple, dict], Any] | None = None, execute: bool = False) -> Lowering:
    """The trace of ``model``'s forward (its parameters and buffers as arguments, as
    ``torch.func.functional_call`` binds them; a function as it is) on ``args`` and ``kwargs``
    (torchax tensors, the model moved), lowered to StableHLO with every argument kept. ``run(model,
    args, kwargs)`` calls it (default: ``model(*args, **kwargs)``; a recorder of its module calls).
    ``reads``: the values read back to Python answered by an eager run's (:class:`Reads`). ``like``:
    (model, args, kwargs) on the CPU in torch's own dtypes: the trace then runs in JAX's x64 mode
    from their shapes and dtypes alone (float64 and int64 stay), and the lowering has no arguments.
    ``mode``: a ``torch.overrides.TorchFunctionMode`` that sees every torch call of the trace.
    With ``execute``, JAX also compiles the lowering and runs it: ``Lowering.outputs`` (torchax
    tensors)."""
    import jax
    import torch
    from torch.nn.utils.stateless import _reparametrize_module
    from torchax import interop


    env = _env()
    inputs = _Inputs(args, kwargs)
    state = _state(model)
    run = run or (lambda m, a, k: m(*a, **k))

    def forward(*values: Any) -> list:
        with (mode if mode is not None else contextlib.nullcontext()):
            if not state:
                return flatten(run(model, *inputs.rebuild(values)))
            a, k = inputs.rebuild(values[1:])
            with _reparametrize_module(model, {**values[0][0], **values[0][1]}, tie_weights=True):
                return flatten(run(model, a, k))

    jitted = jax.jit(interop.jax_view(forward), keep_unused=True)
    with contextlib.ExitStack() as stack:
        if reads is not None:
            stack.enter_context(reads.answering())
        if like is not None:
            stack.enter_context(x64_mode())
            like_state, like_tensors = _state(like[0]), _Inputs(like[1], like[2]).tensors
            shapes = jax.tree_util.tree_map(
                lambda t: jax.ShapeDtypeStruct(tuple(t.shape), _dtypes.numpy_dtype(_dtypes.from_torch(t.dtype).name)),
                (*like_state, *like_tensors))
            return Lowering(jitted.lower(*shapes).as_text(), None, _order(_labels(like_state, like_tensors)))
        with env:
            call = interop.jax_view((*state, *inputs.tensors))
        lowered = jitted.lower(*call)
        outputs = interop.torch_view(list(lowered.compile()(*call))) if execute else None
    return Lowering(lowered.as_text(), _numpy(jax.tree_util.tree_leaves(call)), _order(_labels(state, inputs.tensors)),
                    outputs)
