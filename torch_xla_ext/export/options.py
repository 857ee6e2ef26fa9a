"""The options of :func:`torch_xla_ext.export.export`, and their one check.

Example:
    >>> check(ExportOptions(num_replicas=0))
    Traceback (most recent call last):
    ...
    torch_xla_ext.errors.InvalidArgumentError: options.num_replicas: expected an int >= 1, got 0
"""

from __future__ import annotations

import dataclasses

from torch_xla_ext.errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["ExportOptions", "TRACER_CHOICES", "check"]

TRACER_CHOICES = ("auto", "torch.export", "lazy")


@dataclasses.dataclass
class ExportOptions:
    """Options of :func:`export`. `strict` is torch.export's; `custom_ops_allowed_in_graph`
    (op namespaces lowered to stablehlo.custom_call) and `export_node_metadata` (torch's node
    metadata as MLIR locations) are torch_xla's StableHLOExportOptions fields (for torchax,
    `export_node_metadata` keeps JAX's source locations in the module). `tracer`: "auto"
    (torch.export, and torch_xla's lazy trace of one forward pass when torch.export or torch_xla's
    exporter cannot trace the model), "torch.export" (no fallback: an ExportLoweringError naming
    where it failed) or "lazy" (torch_xla's lazy trace only: exactly what torch_xla runs); the
    torchax frontend has no lazy trace. `num_replicas` (torchax): the size of the "torch_dist" axis
    torchax's c10d collectives reduce over; JAX bakes it into an average (`avg`: the sum divided by
    it), so such a bundle runs with that many replicas only (`manifest.num_replicas`)."""

    strict: bool = False
    custom_ops_allowed_in_graph: tuple[str, ...] = ()
    export_node_metadata: bool = False
    tracer: str = "auto"
    num_replicas: int = 1


def check(options: ExportOptions | None) -> ExportOptions:
    """``options`` (the defaults for None) when every field is one it can be; an
    InvalidArgumentError (or ArgumentTypeError) naming the field otherwise. (What a field means
    to one frontend is its exporter's to check.)"""
    options = ExportOptions() if options is None else options
    if not isinstance(options, ExportOptions):
        raise ArgumentTypeError(f"options: expected an export.ExportOptions, got {type(options).__name__}")
    if options.tracer not in TRACER_CHOICES:
        raise InvalidArgumentError(f"options.tracer: {options.tracer!r} is not one of {', '.join(TRACER_CHOICES)}")
    n = options.num_replicas
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidArgumentError(f"options.num_replicas: expected an int >= 1, got {n!r}")
    return options
