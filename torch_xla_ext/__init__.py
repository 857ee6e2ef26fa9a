"""torch_xla_ext: makes PyTorch/XLA's lowering visible and correct.

Components (one module each): ``numerics`` (a fast tensor comparator), ``export`` and
``collectives`` (StableHLO export with typed inputs, collective tokens and scales; a JAX runner),
``jax_call`` (call_jax that needs only JAX and passes only kept arguments), ``graph_breaks`` (one
ledger over Dynamo, the openxla bridge and XLA), ``parity`` (XLA-vs-CPU verdicts with an
explanation) and ``doctor`` (all of them on one model). Importing the package checks that torch,
torch_xla and jax are the pinned versions, without importing any of them.
"""

from torch_xla_ext import _versions
from torch_xla_ext.version import __version__

_versions.check()

__all__ = ["__version__"]
