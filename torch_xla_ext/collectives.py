"""A drop-in for ``xm.all_reduce`` on one tensor that exports for every scale, applies the scale
at world size 1 too, and records every call through the C++ hook API (cc/collectives/hooks.h) —
the call a torch_xla fork makes from its own all-reduce lowering.

Example:
    >>> import torch, torch_xla
    >>> from torch_xla_ext import collectives
    >>> grad = torch.full((4,), 6.0, device="xla")
    >>> start = collectives.next_sequence()
    >>> y = collectives.all_reduce("sum", grad, scale=0.5)   # traced by torch.export too
    >>> y.cpu().tolist()                   # one replica: the sum is grad itself, then the scale
    [3.0, 3.0, 3.0, 3.0]
    >>> [(c.requested_scale, c.applied_scale, c.lowering) for c in collectives.recorded_calls(start)]
    [(0.5, 0.5, 'all_reduce+multiply')]

torch_xla 2.9's ``xm.all_reduce`` returns a clone and drops ``scale`` at world size 1, and with
scale != 1 takes torch_xla's private ``_xla_all_reduce`` binding, which torch.export cannot
trace. Here the reduce is always ``_c10d_functional.all_reduce`` over all replicas and the scale
is a multiply after it, which is exactly what torch_xla's own lowering emits for a scale.
"""

from __future__ import annotations

from torch_xla_ext import _versions

_versions.require("collectives")  # before anything here imports torch

import math
import operator
from typing import Any, Sequence

from torch_xla_ext import _dtypes
from torch_xla_ext._compat import collectives as _xla
from torch_xla_ext._ext import collectives as _core
from torch_xla_ext.errors import ArgumentTypeError, InvalidArgumentError, UnimplementedError

__all__ = ["AllReduceCall", "CollectiveArgumentError", "REDUCE_NAMES", "REDUCE_TYPES", "all_reduce",
           "clear_recorded_calls", "next_sequence", "record_all_reduce", "recorded_calls"]

AllReduceCall = _core.AllReduceCall  # one recorded call: sequence, reduce, requested/applied scale, ...
# Every reduce name an exported program's collectives can carry (the C++ analysis' one list,
# cc/collectives/analysis.h), and the ones torch_xla's all-reduce lowers, which all_reduce takes.
REDUCE_NAMES = tuple(_core.reduce_names())
REDUCE_TYPES = tuple(n for n in REDUCE_NAMES if n in _xla.REDUCE_TYPES)
CPU_UNREDUCIBLE = tuple(f"torch.{n}" for n in _dtypes.NARROW_FLOATS)


class CollectiveArgumentError(InvalidArgumentError):
    """A bad reduce type, scale or replica groups."""


def _normalise_groups(groups: Sequence[Sequence[int]] | None, world: int) -> list[list[int]]:
    """``groups`` as lists of replica ids, each an int in ``[0, world)`` and in one group at most."""
    if groups is None:
        return []
    if isinstance(groups, (str, bytes)) or not isinstance(groups, Sequence):
        raise CollectiveArgumentError(f"groups: expected a list of lists of replica ids, got {type(groups).__name__}")
    out = []
    for g, group in enumerate(groups):
        if isinstance(group, (str, bytes)) or not isinstance(group, Sequence):
            raise CollectiveArgumentError(f"groups[{g}]: expected a list of replica ids, got {group!r}")
        ids = []
        for k, r in enumerate(group):
            try:
                i = operator.index(r)  # an int (a float is not a replica id)
            except TypeError:
                raise CollectiveArgumentError(f"groups[{g}][{k}]: expected a replica id (an int), got {r!r}") from None
            if isinstance(r, bool) or not 0 <= i < world:
                raise CollectiveArgumentError(f"groups[{g}][{k}]: replica {r!r} is not in [0, world size {world})")
            ids.append(int(i))
        out.append(ids)
    seen = sorted(r for g in out for r in g)
    if len(set(seen)) != len(seen):
        raise CollectiveArgumentError(f"groups: a replica appears twice in {out}")
    return out


def all_reduce(reduce_type: str, tensor: Any, *, scale: float = 1.0,
               groups: Sequence[Sequence[int]] | None = None) -> Any:
    """Reduces `tensor` over the replicas, then multiplies by `scale` (at every world size).

    With `groups` other than None or one group of every replica, this uses torch_xla's own
    grouped lowering (runs eagerly, does not export, as in torch_xla 2.9).

    Example:
        >>> import torch, torch_xla
        >>> class Mean(torch.nn.Module):
        ...     def forward(self, x):
        ...         return all_reduce("sum", x, scale=0.5)
        >>> ep = torch.export.export(Mean(), (torch.ones(4),))   # all_reduce, then multiply by 0.5
        >>> [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
        ['_c10d_functional.all_reduce.default', 'aten.mul.Tensor']
    """
    import torch

    if reduce_type in REDUCE_NAMES and reduce_type not in REDUCE_TYPES:
        raise UnimplementedError(f"reduce_type: '{reduce_type}' is a reduction StableHLO has, but torch_xla's all-reduce "
                                 f"lowering does not take it; it takes {', '.join(REDUCE_TYPES)}")
    if reduce_type not in REDUCE_TYPES:
        raise CollectiveArgumentError(f"reduce_type: {reduce_type!r} is not one of {', '.join(REDUCE_TYPES)}")
    if not isinstance(tensor, torch.Tensor):
        raise ArgumentTypeError(f"tensor: expected a torch.Tensor, got {type(tensor).__name__}")
    if tensor.device.type != "xla" and not torch.compiler.is_compiling():
        # Eagerly, only torch_xla can reduce; while torch.export/torch.compile trace, any device.
        raise ArgumentTypeError(f"tensor: expected an XLA tensor (or one being traced), got device {tensor.device}")
    scale = float(scale)
    if not math.isfinite(scale):
        raise CollectiveArgumentError(f"scale: must be finite, got {scale}")
    if scale != 1.0 and not tensor.is_floating_point():
        raise CollectiveArgumentError(f"scale: {scale} on a {tensor.dtype} tensor (scale needs a floating tensor)")
    if tensor.device.type == "xla" and str(tensor.dtype) in CPU_UNREDUCIBLE and _xla.device_type() == "CPU":
        # XLA:CPU's runtime rejects these all-reduces when the graph executes; inside a larger
        # graph torch_xla 2.9 then aborts with heap corruption instead of raising. Say so now.
        raise CollectiveArgumentError(
            f"tensor: XLA:CPU cannot all-reduce {tensor.dtype}; reduce in float32 instead, e.g. "
            f"all_reduce({reduce_type!r}, t.float(), scale={scale}).to(t.dtype)")
    world = _xla.world_size()
    group_list = _normalise_groups(groups, world)
    if group_list and group_list != [list(range(world))]:
        result = _xla.xla_all_reduce(reduce_type, tensor, scale, group_list)
        lowering = "xla_all_reduce(groups, scale)"
    else:
        group_list = []
        result = _xla.c10d_all_reduce(tensor, reduce_type)
        lowering = "all_reduce"
        if scale != 1.0:
            result = result * scale
            lowering = "all_reduce+multiply"
    _core.record_all_reduce(reduce_type, scale, scale, group_list, world, lowering)
    return result


def record_all_reduce(reduce: str, requested_scale: float, applied_scale: float,
                      replica_groups: Sequence[Sequence[int]] = (), world_size: int = 1,
                      lowering: str = "") -> int:
    """Records one all-reduce as a lowering would (see cc/collectives/hooks.h); returns its
    sequence number. For Python-side lowerings; a C++ lowering calls RecordAllReduce directly.

    Example: ``record_all_reduce("sum", 0.5, 1.0, lowering="clone")`` records a dropped scale.
    """
    return _core.record_all_reduce(reduce, float(requested_scale), float(applied_scale),
                                   [list(g) for g in replica_groups], int(world_size), lowering)


def next_sequence() -> int:
    """The sequence number the next recorded call will get."""
    return _core.next_all_reduce_sequence()


def recorded_calls(since: int = 0) -> list[AllReduceCall]:
    """Recorded all-reduce calls with sequence >= `since`, oldest first (:class:`AllReduceCall`:
    sequence, reduce, requested_scale, applied_scale, replica_groups, world_size, lowering)."""
    return _core.recorded_all_reduces_since(since)


def clear_recorded_calls() -> None:
    """Empties the log (sequence numbers keep increasing)."""
    _core.clear_recorded_all_reduces()
