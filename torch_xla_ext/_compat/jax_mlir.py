"""JAX's MLIR internals that have no public equivalent yet, in one place.

Public JAX/jaxlib APIs are used directly elsewhere (``jax.extend.mlir.ir``,
``jax.extend.mlir.hlo_to_stablehlo``, ``jax.extend.mlir.{de}serialize_portable_artifact``,
``jax.extend.backend``, ``jax.export``). What is here is what those lack: an MLIR context with
every dialect JAX's own lowering registers (StableHLO *and* func/chlo/sdy, which a module printed
by torch_xla needs), and the bytecode writer JAX's compile path uses.
"""

from __future__ import annotations

from typing import Any


def make_context() -> Any:
    """A fresh MLIR context with the dialects of JAX's lowering (StableHLO, CHLO, func, Shardy)."""
    from jax._src.interpreters import mlir as jmlir

    return jmlir.make_ir_context()


def module_to_bytecode(module: Any) -> bytes:
    """MLIR bytecode of ``module`` as JAX hands it to PJRT's ``compile``."""
    from jax._src.interpreters import mlir as jmlir

    return jmlir.module_to_bytecode(module)
