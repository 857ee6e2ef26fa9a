"""The frontends a PyTorch model reaches XLA through, and the one check of a ``frontend`` argument.

``"torch_xla"`` (the default): torch_xla's lazy tensors, its exporter and its XLA build.
``"torchax"``: torchax, which runs the model's aten ops as JAX (``torchax.compile``, its
``exported_program_to_stablehlo``) on JAX's XLA. Each component takes ``frontend=`` and chooses
its one seam from it once (the exporter, the run stage, the recorder); nothing else branches on it.

Example:
    >>> from torch_xla_ext import _frontend
    >>> _frontend.check("torchax")
    'torchax'
    >>> try:
    ...     _frontend.check("jax2torch")
    ... except _frontend.UnknownFrontendError as e:
    ...     print(e)
    frontend: 'jax2torch' is not a frontend; known are 'torch_xla' (the default), 'torchax'
"""

from __future__ import annotations

from typing import Any

from torch_xla_ext.errors import InvalidArgumentError

__all__ = ["DEFAULT", "FRONTENDS", "UnknownFrontendError", "check"]

FRONTENDS = ("torch_xla", "torchax")
DEFAULT = "torch_xla"


class UnknownFrontendError(InvalidArgumentError):
    """A ``frontend`` that is not one of :data:`FRONTENDS`; names the argument and the known ones."""


def check(frontend: Any, argument: str = "frontend") -> str:
    """``frontend`` if it is one of :data:`FRONTENDS`; else an :class:`UnknownFrontendError` (a
    ValueError) naming ``argument`` (``"frontend"``, ``"--frontend"``, a manifest field) and the
    frontends there are."""
    if isinstance(frontend, str) and frontend in FRONTENDS:
        return frontend
    known = ", ".join(f"{f!r} (the default)" if f == DEFAULT else repr(f) for f in FRONTENDS)
    raise UnknownFrontendError(f"{argument}: {frontend!r} is not a frontend; known are {known}")
