"""The JAX half of the script trace: every compile JAX makes in a traced process, and for torchax,
which torch function compiled at which call and why, where the program runs op by op, and where
a jitted function reads a traced value.

* :mod:`.recorder` (``JitRecorder``): ``jax.monitoring``'s compile listener (installed when
  ``jax`` is imported: a plain JAX program's compiles are counted too) and torchax's two seams
  (installed when ``torchax`` is imported): its jit (``interop.wrap_jax_jit``) and its dispatch
  (``Environment.dispatch``);
* :mod:`.functions`: a jitted torch function and JAX's names of its arguments in torch's terms;
* :mod:`.signatures`: what differs between two calls as JAX's tracing cache sees them.

The records are ``trace.schema``'s ``jit_function``, ``jit_compile``, ``concretization`` and
``jit_summary``; the report reads them through ``report/build.py``'s compile and step sources.
"""

from torch_xla_ext.trace.jit.recorder import JitRecorder

__all__ = ["JitRecorder"]
