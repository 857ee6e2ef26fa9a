"""JAX's tracing and lowering internals that call_jax needs (jax/jaxlib 0.7.1).

The only module of torch_xla_ext that reads them: the trace context that keys a lowering cache
(the config that changes lowering), scoping the sharding partitioner to GSPMD for one lowering,
and the constants JAX hoists out of a function body into leading parameters. Which leaves JAX
keeps is read through the public ``jax.export`` API instead (``Exported.module_kept_var_idx``).
"""

from __future__ import annotations

from typing import Any, ContextManager

import numpy as np
from jax._src import config as _config


def trace_context() -> Any:
    """A hashable value of every JAX config option that changes tracing or lowering."""
    return _config.trace_context()


def gspmd_partitioner() -> ContextManager[None]:
    """Lower with GSPMD sharding annotations (what torch_xla's SPMD partitioner reads), not
    Shardy's, for the duration of the block."""
    return _config.use_shardy_partitioner(False)


def hoisted_constants(lowered: Any) -> list[np.ndarray]:
    """The values of the constants JAX hoisted into the module's leading parameters (JAX's
    simplified jaxpr constants), in parameter order; empty when the option is off."""
    return [np.asarray(c) for c in getattr(lowered._lowering, "const_args", ())]
