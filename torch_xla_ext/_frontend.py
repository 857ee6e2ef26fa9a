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

__all__ = ["DEFAULT", "FRONTENDS", "UnknownFrontendError", "check", "highest_matmul_precision"]

FRONTENDS = ("torch_xla", "torchax")
DEFAULT = "torch_xla"

# The call that makes a frontend compute f32 dots and convolutions at full f32 precision
# (precision HIGHEST), as reports name the fix: torch_xla records its setting in each dot's
# precision_config; torchax lowers through JAX, whose default precision governs every dot it makes.
_HIGHEST_MATMUL_PRECISION = {
    "torch_xla": "torch_xla.backends.set_mat_mul_precision('highest')",
    "torchax": "jax.config.update('jax_default_matmul_precision', 'highest')",
}


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


def highest_matmul_precision(frontend: str) -> str:
    """The call that raises ``frontend``'s f32 matmuls to precision HIGHEST.

    Example:
        >>> highest_matmul_precision("torchax")
        "jax.config.update('jax_default_matmul_precision', 'highest')"
    """
    return _HIGHEST_MATMUL_PRECISION[check(frontend)]
