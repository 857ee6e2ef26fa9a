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


def compile_on_cpu(module: Any, *, optimize: bool = True) -> Any:
    """``module`` compiled by XLA through JAX's CPU client, for one device (no replicas or
    partitions); ``optimize=False`` compiles with LLVM's optimization level 0 (several times
    faster). Raises ``jax.errors.JaxRuntimeError`` when XLA cannot compile it."""
    import jax
    from jax.extend import backend

    client = backend.get_backend("cpu")
    overrides = None if optimize else {"xla_backend_optimization_level": 0}
    return client.compile_and_load(module_to_bytecode(module), [jax.devices("cpu")[0]],
                                   backend.get_compile_options(1, 1, env_options_overrides=overrides))


def execute_on_cpu(executable: Any, args: Any) -> list:
    """Runs an executable of :func:`compile_on_cpu` on numpy arrays; returns numpy arrays.

    64-bit arguments (int64 token ids, float64) keep their width: JAX would narrow them to 32 bits
    with x64 off, which the executable's parameter types do not allow."""
    import jax
    import jax.experimental
    import numpy as np

    device = jax.devices("cpu")[0]
    with jax.experimental.enable_x64():
        arrays = [jax.device_put(np.asarray(a), device) for a in args]
        outs = executable.execute_sharded(arrays).disassemble_into_single_device_arrays()
        return [np.asarray(o[0]) for o in outs]
