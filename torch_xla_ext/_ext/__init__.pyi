"""
torch_xla_ext private extension: C++ core bindings (use the torch_xla_ext modules)
"""
from __future__ import annotations
from . import graph
from . import collectives
from . import graph_breaks
from . import jax_call
from . import numerics
from . import parity
__all__: list[str] = ['collectives', 'graph', 'graph_breaks', 'jax_call', 'numerics', 'parity']
