"""A device's matmul precision (:mod:`.program.rules`) applied to torch's own CPU matmuls.

The localisation measures what rounding costs in each module by running it on CPU eager in the
run's dtype (its CPU shadow). Under another device's rules, an f32 run's matmuls round too: inside
:func:`on_cpu` every f32 ``mm``, ``addmm``, ``bmm``, ``baddbmm`` and ``convolution`` computes as
the rules' device computes it (operands rounded to bf16 or TF32, or split into bf16 pieces whose
products are summed in f32), and attention runs through its unfused math (``matmul`` on the CPU)
so its two products round as well. The same arithmetic as the rounded replay's rewrite, written
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
from torch_xla_ext.parity.program.rules import MatmulPrecision, Rules

__all__ = ["on_cpu", "shadow_precision"]

_aten = torch.ops.aten
_MASK = -65536  # 0xFFFF0000 as an int32: a float32's bf16 part (sign, exponent, 7 mantissa bits)


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
    shift = 23 - bits
    i = t.contiguous().view(torch.int32)
    bias = ((i >> shift) & 1) + ((1 << (shift - 1)) - 1)
    rounded = ((i + bias) & ~((1 << shift) - 1)).view(torch.float32)
    return torch.where(torch.isfinite(t), rounded, t)


def _pieces(t: Any, n: int) -> list[Any]:
    """``t`` as ``n`` bf16-valued float32 pieces: each but the last truncated, the last rounded."""
    out, rest = [], t
    for k in range(n):
        if k == n - 1:
            out.append(_round_mantissa(rest, 7))
            break
        high = (rest.contiguous().view(torch.int32) & _MASK).view(torch.float32)
        out.append(high)
        rest = rest - high
    return out


def _product(precision: MatmulPrecision, op: Any, a: Any, b: Any) -> Any:
    """``op(a, b)`` (a bilinear torch op) at ``precision``: the pass structure of rewrite._matmul_as."""
    if precision.passes <= 1:
        return op(_round_mantissa(a, precision.mantissa_bits), _round_mantissa(b, precision.mantissa_bits))
    n = 2 if precision.passes == 3 else 3
    x, y = _pieces(a, n), _pieces(b, n)
    if precision.passes == 3:
        total = op(x[1], y[0]) + op(x[0], y[1])
    else:
        total = op(x[1], y[1])
        for i, j in ((0, 2), (2, 0), (0, 1), (1, 0)):
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
