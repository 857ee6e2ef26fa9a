"""torch_xla_ext: makes PyTorch/XLA's lowering visible and correct.

Components (one module each): ``numerics`` (a fast tensor comparator). Importing the package
checks that torch, torch_xla and jax are the pinned versions, without importing any of them.
"""

from torch_xla_ext import _versions
from torch_xla_ext.version import __version__

_versions.check()

__all__ = ["__version__"]
