"""`export`: a model to a bundle through one frontend's exporter, chosen once from ``frontend``:
``"torch_xla"`` (the default; torch.export + torch_xla's StableHLO exporter, torch_xla's lazy
trace as the fallback: ``torch_xla_exporter.py``) or ``"torchax"`` (torch.export + torchax's
lowering to JAX: ``torchax_exporter.py``). Each exporter takes the checked arguments and options
and gives the same Bundle: the manifest (input kinds from torch.export's graph signature and the
C++ analysis, user inputs named by argument, outputs by their pytree path), the weights, and a
`main` that ``run``, ``to_jax`` and ``load_jax`` take without torch.

Example:
    >>> import torch
    >>> class Masked(torch.nn.Module):
    ...     def forward(self, input_ids, attention_mask=None):
    ...         return input_ids * attention_mask
    >>> ids, mask = torch.ones(2, 3), torch.ones(2, 3)
    >>> b = export(Masked(), (ids,), {"attention_mask": mask})
    >>> [i.name for i in b.manifest.inputs if i.kind == "user_input"]   # in main's argument order
    ['attention_mask', 'input_ids']
    >>> export(Masked(), (ids,), {"attention_mask": mask}, frontend="torchax").manifest.frontend
    'torchax'
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

from torch_xla_ext import _frontend, _versions
from torch_xla_ext.export import torch_program, torch_xla_exporter, torchax_exporter
from torch_xla_ext.export.bundle import Bundle
from torch_xla_ext.export.options import TRACER_CHOICES, ExportOptions, check

__all__ = ["EXPORTERS", "ExportOptions", "Exporter", "TRACER_CHOICES", "export"]


@dataclasses.dataclass(frozen=True)
class Exporter:
    """One frontend's exporter: the gate's feature it needs, and
    ``export(model, args, kwargs, names, options) -> Bundle`` (``names``: the user inputs'
    argument names; None, with args and kwargs None, for a given ``torch.export.ExportedProgram``)."""

    feature: str
    export: Callable[..., Bundle]


# One exporter per frontend of _frontend.FRONTENDS (tests/export/torchax_export_test.py checks they agree).
EXPORTERS: dict[str, Exporter] = {
    torch_xla_exporter.FRONTEND: Exporter(torch_xla_exporter.FEATURE, torch_xla_exporter.export),
    torchax_exporter.FRONTEND: Exporter(torchax_exporter.FEATURE, torchax_exporter.export),
}


def export(model: Any, args: Sequence[Any] | None = None, kwargs: dict[str, Any] | None = None, *,
           options: ExportOptions | None = None, frontend: str = _frontend.DEFAULT) -> Bundle:
    """A model's StableHLO program with a typed manifest of `main`, through ``frontend``'s
    exporter (``"torch_xla"``, the default, or ``"torchax"``).

    `model` is an nn.Module (or callable) run as ``model(*args, **kwargs)``, or a
    ``torch.export.ExportedProgram`` (exported with its own example inputs: pass no args). User
    inputs are the leaves of ``(args, kwargs)`` in torch.utils._pytree order; `run` takes them in
    that order. An unknown ``frontend`` is an UnknownFrontendError (a ValueError) naming the known
    ones; a frontend whose stack is missing (torchax) an UnsupportedStackError naming the install
    line.

    Example:
        >>> import torch
        >>> b = export(torch.nn.Linear(4, 4), (torch.randn(2, 4),))
        >>> [i.kind for i in b.manifest.inputs]
        ['parameter', 'parameter', 'user_input']
    """
    exporter = EXPORTERS[_frontend.check(frontend)]
    _versions.require(exporter.feature)
    import torch

    options = check(options)
    if isinstance(model, torch.export.ExportedProgram):
        return exporter.export(model, args, kwargs, None, options)
    model, args, kwargs, names = torch_program.arguments(model, args, kwargs)
    return exporter.export(model, args, kwargs, names, options)
