"""Which sections the doctor runs, per frontend: the one place the doctor reads ``frontend``.

* ``torch_xla``: parity (torch_xla's run against CPU eager), export (torch_xla's exporter; the
  bundle run by JAX against torch_xla's execution of the same export), call_jax (the embedded
  block's JAX gate) and graph breaks (lazy vs Dynamo, each in its own process).
* ``torchax``: parity (the model as ``torchax.compile`` compiles it), export (torchax's lowering;
  the bundle run by JAX against torchax's own run) and compiles (the model's compiled forward called
  ``steps`` times under ``torch-xla-ext trace``: what JAX compiled, where, and why again). call_jax
  is torch_xla's (torchax has ``interop.call_jax``: docs/jax_call.md) and torchax has no Dynamo
  bridge, so neither runs.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from torch_xla_ext import _versions
from torch_xla_ext.doctor.sections.compiles import compiles_section
from torch_xla_ext.doctor.sections.export import export_section
from torch_xla_ext.doctor.sections.graph_breaks import graph_breaks_section
from torch_xla_ext.doctor.sections.jax_call import jax_call_section
from torch_xla_ext.doctor.sections.parity import parity_section

__all__ = ["EXAMPLE_NAME", "PLANS", "Step", "Target"]

EXAMPLE_NAME = "embedded example (DoctorBlock: attention + MLP, call_jax gate, print, digamma, all_reduce)"

# One section to run: its name and what runs it, returning (summary, markdown, data).
Step = tuple[str, Callable[[], tuple[str, str, dict]]]


@dataclasses.dataclass
class Target:
    """The model the doctor examines, in the forms its sections take."""

    name: str
    model_fn: Callable[[], Any]      # a fresh module (parity runs it more than once)
    inputs: tuple
    kwargs: dict
    export_fn: Callable[[], Any]     # the module export takes (the embedded block without call_jax and digamma)
    spec: str                        # the `module:factory` a worker process calls
    block: Any = None                # the embedded block (call_jax's section), None for --model


def _torch_xla(t: Target, out_dir: str, steps: int, progress: Callable[[str], None]) -> list[Step]:
    if t.block is not None and not _versions.available("jax_call"):
        t.name = t.name.replace("call_jax gate, ", "") + "; the call_jax gate left out: jax_call cannot run here"
    plan: list[Step] = [
        ("parity", lambda: parity_section(t.model_fn, t.inputs, t.kwargs, out_dir, frontend="torch_xla")),
        ("export", lambda: export_section(t.export_fn(), t.inputs, t.kwargs, out_dir, frontend="torch_xla")),
    ]
    if t.block is not None:
        plan.append(("call_jax", lambda: jax_call_section(t.block, t.inputs)))
    plan.append(("graph_breaks", lambda: graph_breaks_section(t.spec, out_dir, progress, steps)))
    return plan


def _torchax(t: Target, out_dir: str, steps: int, progress: Callable[[str], None]) -> list[Step]:
    if t.block is not None:  # the block runs its gate in torch under torchax (call_jax is torch_xla's)
        t.name = t.name.replace("call_jax gate, ", "")
    t.name += " under torchax"
    return [
        ("parity", lambda: parity_section(t.model_fn, t.inputs, t.kwargs, out_dir, frontend="torchax")),
        ("export", lambda: export_section(t.export_fn(), t.inputs, t.kwargs, out_dir, frontend="torchax")),
        ("compiles", lambda: compiles_section(t.spec, out_dir, steps)),
    ]


# frontend -> the sections it runs (one entry per _frontend.FRONTENDS; a test checks they agree)
PLANS: dict[str, Callable[[Target, str, int, Callable[[str], None]], list[Step]]] = {
    "torch_xla": _torch_xla,
    "torchax": _torchax,
}
