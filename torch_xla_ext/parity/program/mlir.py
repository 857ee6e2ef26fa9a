"""JAX's public MLIR bindings (``jax.extend.mlir.ir`` and its StableHLO dialect), imported when a
program is first read, not when parity is imported: a process that only compares a saved capture
(``compare_capture(..., emulate=False)``) needs torch alone, and the gate
(``_versions.require("parity.replay")``) names what is missing before JAX is imported.

Example:
    >>> from torch_xla_ext.parity.program.mlir import ir
    >>> with ir.Context():
    ...     str(ir.IntegerType.get_signless(32))
    'i32'
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["ir", "stablehlo"]


class _Deferred:
    """A module imported on its first attribute read (importlib makes that thread-safe)."""

    def __init__(self, name: str):
        self._name = name
        self._module: Any = None

    def __getattr__(self, attr: str) -> Any:
        if self._module is None:  # an import's lookup costs about 5 us: a program's build reads ~15,000 names
            self._module = importlib.import_module(self._name)
        return getattr(self._module, attr)

    def __repr__(self) -> str:
        return f"<{self._name}, imported on first use>"


ir: Any = _Deferred("jax.extend.mlir.ir")
stablehlo: Any = _Deferred("jax.extend.mlir.dialects.stablehlo")
