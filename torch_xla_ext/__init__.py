"""torch_xla_ext: makes PyTorch/XLA's lowering visible and correct.

Components (one module each): ``numerics`` (a fast tensor comparator), ``export`` and
``collectives`` (StableHLO export with typed inputs, collective tokens and scales; a JAX runner),
``jax_call`` (call_jax that needs only JAX and passes only kept arguments), ``graph_breaks`` (one
ledger over Dynamo, the openxla bridge and XLA), ``parity`` (XLA-vs-CPU verdicts with an
explanation) and ``doctor`` (all of them on one model).

Importing the package never imports torch or checks anything: a JAX user with only ``jax[cpu]``
and the wheel loads, runs and converts export bundles (``export.load``, ``run``, ``to_jax``). Each
feature checks, where it is used, that the installed stack has the upstream APIs it relies on
(``_versions.require``) and raises ImportError naming what is missing, what is installed and what
to do.
"""

from torch_xla_ext.version import __version__

__all__ = ["__version__"]
