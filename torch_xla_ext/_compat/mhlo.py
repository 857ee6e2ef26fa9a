"""jaxlib's mhlo passes, which only a private module of jaxlib registers.

``hlo_to_stablehlo`` (public) leaves the ops StableHLO lacks in the ``mhlo`` dialect; jaxlib
also ships the pass that lowers what it can of them to StableHLO (``hlo-legalize-to-stablehlo``,
as ``stablehlo.custom_call @mhlo.<op>`` where StableHLO has no such op), registered by
``jaxlib.mlir._mlir_libs._mlirHlo.register_mhlo_passes``.
"""

from __future__ import annotations

from typing import Any


def legalize_to_stablehlo(module: Any) -> None:
    """Runs ``hlo-legalize-to-stablehlo`` on ``module`` (in place, inside its context); ops it
    cannot lower stay as they are (``allow-xla-features``), for the caller to name."""
    import jaxlib.mlir._mlir_libs._mlirHlo as mhlo
    from jax.extend.mlir import passmanager

    mhlo.register_mhlo_passes()
    passmanager.PassManager.parse("builtin.module(hlo-legalize-to-stablehlo{allow-experimental-features=true allow-xla-features=true})").run(
        module.operation)
