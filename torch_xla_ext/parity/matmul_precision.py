"""A device's matmul precision (:mod:`.program.rules`) applied to torch's own CPU matmuls.

The localisation measures what rounding costs in each module by running it on CPU eager in the
run's dtype (its CPU shadow). Under another device's rules, an f32 run's matmuls round too: inside
:func:`on_cpu` every f32 ``mm``, ``addmm``, ``bmm``, ``baddbmm`` and ``convolution`` computes as
the rules' device computes it (operands rounded to bf16 or TF32, or split into bf16 pieces whose
products are summed in f32), and attention runs through its unfused math (``matmul`` on the CPU)
so its two products round as well. The same arithmetic as the rounded replay's rewrite, read from
the same data (the rule's :class:`~torch_xla_ext.parity.program.rules.MatmulPrecision`), written
for torch.

Example:
    >>> import torch
    >>> from torch_xla_ext.parity.program.rules import resolve
    >>> x = torch.full((1, 1), 1.0 + 2.0 ** -10)
    >>> with on_cpu(resolve("tpu-default")):
    ...     float(x @ x)                      # the operands rounded to bf16 (1.0) first
    1.0
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from torch_xla_ext._compat.dispatch import TorchDispatchMode
from torch_xla_ext.parity.program.rules import F32_MANTISSA_BITS, MatmulPrecision, Rules

__all__ = ["on_cpu", "shadow_precision"]

_aten = torch.ops.aten


def shadow_precision(rules: Rules) -> MatmulPrecision:
    """The one precision a torch run applies for ``rules``: theirs, or, when read per dot, that of
    the device's DEFAULT (a torch op carries no precision_config)."""
    if rules.precision is not None:
        return rules.precision
    return rules.for_dot(None)


@contextlib.contextmanager
def on_cpu(rules: Rules) -> Iterator[None]:
    """Inside, torch's f32 matmuls compute at ``rules``' precision (nothing changes under XLA:CPU's)."""
    precision = shadow_precision(rules)
    if not precision.rounds:
        yield
        return
    with sdpa_kernel([SDPBackend.MATH]), _Rounding(precision):
        yield


def _round_mantissa(t: Any, bits: int) -> Any:
    """``t`` (float32) rounded to nearest even at ``bits`` explicit mantissa bits (infinities and
    NaNs kept)."""
    if bits == 7:
        return t.to(torch.bfloat16).to(torch.float32)
    shift = F32_MANTISSA_BITS - bits
    i = t.contiguous().view(torch.int32)
    bias = ((i >> shift) & 1) + ((1 << (shift - 1)) - 1)
    rounded = ((i + bias) & ~((1 << shift) - 1)).view(torch.float32)
    return torch.where(torch.isfinite(t), rounded, t)


def _truncated(t: Any, bits: int) -> Any:
    """``t`` (float32) with its mantissa bits below the first ``bits`` cleared."""
    return (t.contiguous().view(torch.int32) & ~((1 << (F32_MANTISSA_BITS - bits)) - 1)).view(torch.float32)


def _pieces(t: Any, precision: MatmulPrecision) -> list[Any]:
    """``t`` as the precision's pieces, largest first: each but the last truncated, the last rounded."""
    out, rest = [], t
    for k in range(precision.pieces):
        if k == precision.pieces - 1:
            out.append(_round_mantissa(rest, precision.mantissa_bits))
            break
        high = _truncated(rest, precision.mantissa_bits)
        out.append(high)
        rest = rest - high
    return out


def _product(precision: MatmulPrecision, op: Any, a: Any, b: Any) -> Any:
    """``op(a, b)`` (a bilinear torch op) at ``precision``: the sum of its pieces' products in the
    order the precision lists them (the replay's rewrite follows the same data)."""
    x, y = _pieces(a, precision), _pieces(b, precision)
    if not precision.partial:
        return op(x[0], y[0])
    (i, j), *rest = precision.partial
    total = op(x[i], y[j])
    for i, j in rest:
        total = total + op(x[i], y[j])
    total = torch.where(total.abs() <= float("inf"), total, torch.zeros_like(total))
    return total + op(x[0], y[0])


class _Rounding(TorchDispatchMode):
    def __init__(self, precision: MatmulPrecision):
        super().__init__()
        self.precision = precision

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        f32 = lambda *ts: all(isinstance(t, torch.Tensor) and t.dtype == torch.float32 for t in ts)  # noqa: E731
        p = self.precision
        if func in (_aten.mm.default, _aten.bmm.default) and f32(*args[:2]):
            return _product(p, func, args[0], args[1])
        if func in (_aten.addmm.default, _aten.baddbmm.default) and f32(*args[:3]):
            mm = _aten.mm.default if func == _aten.addmm.default else _aten.bmm.default
            beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
            return beta * args[0] + alpha * _product(p, mm, args[1], args[2])
        if func == _aten.convolution.default and f32(*args[:2]):
            bias, rest = args[2], args[3:]
            out = _product(p, lambda a, b: func(a, b, None, *rest), args[0], args[1])
            if bias is not None:
                shape = [1, -1] + [1] * (out.dim() - 2)
                out = out + bias.reshape(shape)
            return out
        return func(*args, **kwargs)
