"""The frontends a model reaches XLA through, for parity: each is its run stage (the one seam: it
writes the run's outputs, its program and the device), its hooked run (a capture), and the gate's
feature that its run and replays need. Everything after the run stage (the replays, the
localisation, the causes, the words) reads the record and never asks which frontend made it.

* ``"torch_xla"`` (the default): torch_xla's lazy tensors; the program is the HLO torch_xla runs
  (:mod:`.stages.xla_run`).
* ``"torchax"``: the model under torchax's environment on JAX's XLA, compiled as
  ``torchax.compile`` compiles it; the program is its function's StableHLO lowering
  (:mod:`.stages.torchax_run`). After the outputs are compared it adds the op audit
  (:mod:`.stages.op_audit`): which op torchax lowers to other math than eager, when the program is
  not the reference's math.

Example:
    >>> of("torchax").feature, of("torch_xla").name
    ('parity.torchax', 'torch_xla')
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from torch_xla_ext import _frontend
from torch_xla_ext.parity.pipeline import Stage
from torch_xla_ext.parity.stages import op_audit, torchax_run, xla_run

__all__ = ["Frontend", "of"]


@dataclasses.dataclass(frozen=True)
class Frontend:
    """A frontend's parts: ``stage(early, program=)`` (the run stage), ``capture(model, inputs,
    kwargs, dtype, seed, device, program=)`` (a hooked run's capture), ``feature`` (the gate's) and
    ``uses_xla`` (the run imports torch_xla: the runner imports it first), ``scans`` (it has a
    scan of layers for ``scan_layers`` to check: torch_xla's ``scan_layers``) and ``checks`` (its
    own stages after the outputs are compared: torchax's op audit)."""

    name: str
    feature: str
    stage: Callable[..., Any]
    capture: Callable[..., Any]
    uses_xla: bool
    scans: bool
    checks: tuple[Stage, ...] = ()


_FRONTENDS = {
    "torch_xla": Frontend("torch_xla", "parity.xla", xla_run.stage, xla_run.capture, True, True),
    "torchax": Frontend("torchax", "parity.torchax", torchax_run.stage, torchax_run.capture, False, False,
                        (op_audit.STAGE,)),
}


def of(frontend: Any, argument: str = "frontend") -> Frontend:
    """The frontend named ``frontend``; an ``UnknownFrontendError`` naming ``argument`` otherwise."""
    return _FRONTENDS[_frontend.check(frontend, argument)]
