"""JAX's own account of its compiles (jax 0.7.1, the pin, to 0.12), in one place: the
``jax.monitoring`` events JAX records around every trace, lowering and XLA compile, the
listener registration, which process of a ``jax.distributed`` job this is, the errors a traced
value raises where Python needs a concrete one, and the frame that marks a call of a jitted
function.

* Every XLA compile is one ``/jax/core/compile/backend_compile_duration`` duration event
  (``fun_name="jit(f)"``), recorded by the same context manager that logs ``jax_log_compiles``'
  "Finished XLA compilation of jit(f)", and a trace is a ``jaxpr_trace_duration`` scalar at its
  start and a duration at its end. The names are JAX's own constants (``jax._src.dispatch``), so
  a renamed event is a refusal of the gate, not a silent zero. Listeners run only on the trace,
  lower and compile path: never when a compiled program runs.
* ``process_index`` initializes JAX's backends when nothing did yet, and ``jax.distributed``
  refuses to start after that: call it only where a compile has happened (the backends exist).

Importing this module imports nothing of JAX.

Example:
    >>> from torch_xla_ext._compat import jax_monitoring
    >>> jax_monitoring.short_dtype("bfloat16"), jax_monitoring.short_dtype("int32")
    ('bf16', 'i32')
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

__all__ = ["Events", "events", "is_concretization", "is_jit_boundary", "listen", "process", "short_dtype"]


@dataclasses.dataclass(frozen=True)
class Events:
    """JAX's event names: the XLA compile, the trace of a function, its lowering to MLIR."""

    backend_compile: str
    trace: str
    lower: str


_events: Events | None = None
_boundary_file: str | None = None


def events() -> Events:
    """The event names, JAX's own constants."""
    global _events
    if _events is None:
        from jax._src import dispatch

        _events = Events(backend_compile=dispatch.BACKEND_COMPILE_EVENT, trace=dispatch.JAXPR_TRACE_EVENT,
                         lower=dispatch.JAXPR_TO_MLIR_MODULE_EVENT)
    return _events


def listen(on_scalar: Callable[..., None], on_duration: Callable[..., None]) -> None:
    """Registers ``on_scalar(event, value, **kwargs)`` (a trace's start) and ``on_duration(event,
    secs, **kwargs)`` (a trace's, a lowering's or an XLA compile's end; ``fun_name`` in kwargs)
    for the rest of the process (jax.monitoring's public registration)."""
    import jax.monitoring

    events()  # the constants resolve before anything listens
    jax.monitoring.register_scalar_listener(on_scalar)
    jax.monitoring.register_event_duration_secs_listener(on_duration)


def process() -> tuple[int, int]:
    """(``jax.process_index()``, ``jax.process_count()``). Only after a compile: see the module."""
    import jax

    return int(jax.process_index()), int(jax.process_count())


# The errors JAX raises when Python needs the value of a traced array (.item(), bool(), int(), a
# data-dependent shape); TracerBoolConversionError and the others subclass ConcretizationTypeError
# or sit beside it.
_CONCRETIZATION = ("ConcretizationTypeError", "TracerBoolConversionError", "TracerIntegerConversionError",
                   "TracerArrayConversionError", "NonConcreteBooleanIndexError")


def is_concretization(e: BaseException) -> bool:
    """Whether ``e`` is one of ``jax.errors``' concretization errors (a traced value read as a
    Python value inside a jitted function)."""
    import jax.errors

    return isinstance(e, tuple(getattr(jax.errors, n) for n in _CONCRETIZATION))


def is_jit_boundary(code: Any) -> bool:
    """Whether a frame's code object is JAX's API boundary (the wrapper around every function
    ``jax.jit`` returns): the user's line right above it called a jitted function."""
    global _boundary_file
    if _boundary_file is None:
        from jax._src import traceback_util

        _boundary_file = traceback_util.api_boundary.__code__.co_filename
    return code.co_filename == _boundary_file


def short_dtype(name: str) -> str:
    """JAX's short spelling of a dtype (``str_short``): float32 -> f32, bfloat16 -> bf16, bool."""
    if name == "bool":
        return "bool"
    if name.startswith("bfloat"):
        return "bf" + name[6:]
    return name[0] + "".join(c for c in name if c.isdigit())
