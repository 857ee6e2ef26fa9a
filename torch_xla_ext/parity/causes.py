"""Which cause explains an output's difference from CPU eager, from its figures against the fp64
golden and the replays of XLA's own program.

* **rounding placement**: the program's unrounded replay is the reference's math, and XLA equals
  the rounded replay (which rounds to bf16/f16 exactly where the program does, by XLA:CPU's
  rules, cc/parity/rounding.h) within the bound evaluation order allows: the difference from CPU
  eager is where each side rounds;
* **matmul precision**: the same, where the rounded replay applies another device's precision
  for f32 dots and convolutions (``rules``) and the replay with XLA:CPU's own f32 matmuls does not
  reproduce the run: the device's matmul precision is the difference;
* **reassociation**: the same math, and XLA either equals its replay within the bound in a program
  that rounds nothing to a narrow type, or is as accurate as CPU eager (within
  ``REASSOCIATION_FACTOR`` of its fp64 error): the order of evaluation differs (summation order,
  FMA contraction, approximations of transcendentals);
* **x64 off**: the run computed float64 tensors in float32 (a frontend on JAX, torchax, with JAX's
  ``jax_enable_x64`` off, its default), its error against the golden is beyond
  ``REASSOCIATION_FACTOR`` times CPU eager's, and its program traced with x64 on (torch's own
  dtypes), replayed under the same rules, is within it: the narrowing is the difference. Checked
  before the others: a narrowed program replays faithfully, and its exact replay in f64 may still
  not be the reference's math (constants stored in f32);
* **op lowering**: the unrounded replay leaves the golden, and the frontend's op audit (torchax:
  the first divergent module's forward op by op in float64, :mod:`.stages.op_audit`) found an op
  whose result leaves torch's own on the same inputs by more than float64 rounding
  (:func:`lowering_differs`): the frontend lowers that op to other math than eager PyTorch;
* **a real difference**: the unrounded replay leaves the golden (the program is not the
  reference's math) and no op audit blames an op, or XLA leaves its own program's replay and is
  less accurate than both.

**The run equals its rounded replay** when their greatest difference is within
:func:`replay_bound`: twice the smaller of the two's own greatest errors against the program's
exact math, plus one reordered sum of the program's longest reduction at the output's scale (the
derivation is in docs/parity.md). Bit equality between the two, which two XLA builds (torch_xla's
and jaxlib's) or two CPUs need not give, is a figure (``emulated``), never a cause.

Example:
    >>> import numpy as np
    >>> b = replay_bound(run_error=1e-3, replay_error=2e-3, scale=1.0, longest_reduction=64, unit=2.0 ** -24)
    >>> b == 2 * 1e-3 + 2 * 8 * 2.0 ** -24   # twice the smaller error, plus one reordered 64-term sum
    True
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from torch_xla_ext import numerics
from torch_xla_ext.parity.casts import to_numpy
from torch_xla_ext.parity.leaves import tensor_leaves
from torch_xla_ext.parity.report import (MATMUL_PRECISION, OP_LOWERING, REAL_DIFFERENCE, REASSOCIATION,
                                         ROUNDING_PLACEMENT, UNEXPLAINED, X64_OFF, OutputParity)

__all__ = ["LOWERING_BOUND", "MATH_NOISE_FRACTION", "REASSOCIATION_FACTOR", "REPLAY_FACTOR", "SIGNIFICANT_FRACTION",
           "cause", "closer", "golden_errors", "lowering_differs", "op_difference", "output_cause", "output_parity",
           "program_differs", "replay_bound", "replay_figures", "same_math"]

# The exact replay may leave the golden by this fraction of the run's own rounding error and
# still compute "the same math": below that, differences are constants stored in the run dtype
# (GELU's 0.7071 as a bf16 constant).
MATH_NOISE_FRACTION = 0.25
# XLA's error against the golden may be this many times CPU eager's (or the replay's) and still
# count as "as accurate": summation order alone moves errors by small factors.
REASSOCIATION_FACTOR = 2.0
# The run and its rounded replay, two evaluations of the same roundings, differ by at most this
# many times the smaller of their own errors against the program's exact math (docs/parity.md).
REPLAY_FACTOR = 2.0
# ULP distances of elements below this fraction of the output's scale are reported apart.
SIGNIFICANT_FRACTION = 1e-3
# One op computed twice in float64 from the same inputs (the frontend's lowering, torch's kernel)
# differs by rounding alone: an elementwise op by a few units of roundoff u = 2^-53 per element, a
# reduction of n terms by about sqrt(n) u (n u in the worst order) of the magnitudes it sums
# (measured under torchax: at most 12 u, erfinv and ResNet-18's convolutions, over every op of
# GPT-2, BERT, ResNet-18, MobileNetV3 and two dozen elementwise ops and reductions).
# 2^-36 of the op's scale is 2^17 u, beyond any order of a sum of up to 2^17 terms of the scale's
# magnitude, and 2^-12 of float32's unit roundoff, so a lowering to other math (GELU's tanh form is
# ~1e-4 of its scale away) or to float32 arithmetic lies orders of magnitude above it.
LOWERING_BOUND = 2.0 ** -36


def golden_errors(y: Any, golden: Any) -> tuple[float, float]:
    """Greatest and mean |y - golden|, in float64 (NaN where either is NaN). A float32 or float64
    ``y`` is read in place: the subtraction from the float64 golden promotes it, exactly."""
    if isinstance(y, np.ndarray):
        y = torch.from_numpy(y if y.dtype in (np.float32, np.float64) else np.array(y, dtype=np.float64))
    if y.numel() == 0:
        return 0.0, 0.0
    e = torch.sub(y.reshape(golden.shape), golden.double()).abs_()
    return float(e.max()), float(e.mean())


def closer(xla: tuple[float, float], cpu: tuple[float, float]) -> str:
    if xla == cpu:
        return "tie"
    return "xla" if xla < cpu else "cpu"  # greatest error first, mean breaks ties


def _max_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Greatest |a - b| (in float64; any float dtypes): NaN against NaN and an infinity against the
    same infinity agree; NaN against a number, or infinities that differ, are an infinite distance.
    One pass of the comparator (numerics.compare, exact equality), no temporaries: a logits-sized
    difference array in fresh NumPy memory cost 0.1-0.3 s."""
    if a.size == 0:
        return 0.0
    greatest = numerics.compare(a, b, rtol=0.0, atol=0.0, equal_nan=True, check_dtype=False).max_abs_diff
    return math.inf if math.isnan(greatest) else float(greatest)


def replay_bound(run_error: float, replay_error: float, scale: float, longest_reduction: int, unit: float) -> float:
    """How far a run may be from its rounded replay when both execute the same roundings and
    differ only in evaluation order: ``REPLAY_FACTOR`` times the smaller of their greatest errors
    against the program's exact math, plus ``2 sqrt(n) u`` of the output's ``scale`` (one sum of
    the program's longest reduction, ``n`` terms, reordered in the unit ``u`` it is computed in)."""
    return REPLAY_FACTOR * min(run_error, replay_error) + 2.0 * math.sqrt(max(1, longest_reduction)) * unit * scale


def replay_figures(x: Any, rounded: np.ndarray, exact: np.ndarray,
                   longest_reduction: int) -> tuple[float, float, float, float, bool]:
    """(distance, run error, replay error, bound, reproduced) of a run's output ``x`` (a tensor)
    and its rounded replay ``rounded``, the errors against the program's exact math ``exact`` (the
    unrounded replay) over the elements where it is finite."""
    itself = same_buffer(x, rounded)  # the run is its own rounded replay: one set of figures
    r = (to_numpy(x.detach()) if isinstance(x, torch.Tensor) else np.asarray(x)).reshape(-1)
    p = r if itself else np.asarray(rounded).reshape(-1)
    e = np.asarray(exact, np.float64).reshape(-1)
    finite = np.isfinite(e)
    distance = 0.0 if itself else _max_distance(r, p)
    if not finite.any():
        return distance, 0.0, 0.0, 0.0, distance == 0.0
    if not finite.all():
        r, e = r[finite], e[finite]
        p = r if itself else p[finite]
    run_error = _max_distance(r, e)
    replay_error = run_error if itself else _max_distance(p, e)
    unit = 2.0 ** -53 if (isinstance(x, torch.Tensor) and x.dtype == torch.float64) else 2.0 ** -24
    scale = max(abs(float(e.max())), abs(float(e.min())))  # the greatest |e|, without a copy
    bound = replay_bound(run_error, replay_error, scale, longest_reduction, unit)
    return distance, run_error, replay_error, bound, bool(distance <= bound)


def same_buffer(x: Any, y: Any) -> bool:
    """Whether ``x`` and ``y`` (tensors or arrays) are the same elements in the same memory: a run
    whose outputs are its own rounded replay's results (``ProgramRun.rounded_by_run``)."""
    if x is y:
        return True
    x, y = (to_numpy(v) if isinstance(v, torch.Tensor) else v for v in (x, y))
    if not (isinstance(x, np.ndarray) and isinstance(y, np.ndarray)) or x.size == 0:
        return False
    return (x.dtype == y.dtype and x.shape == y.shape and x.strides == y.strides
            and x.__array_interface__["data"][0] == y.__array_interface__["data"][0])


def _magnitude(t: Any) -> float:
    """The greatest finite |value| of a floating-point tensor (0 when it has none)."""
    a = np.abs(t.detach().double().numpy().reshape(-1))
    a = a[np.isfinite(a)]
    return float(a.max()) if a.size else 0.0


def op_difference(result: Any, eager: Any, inputs: Any) -> tuple[float, float]:
    """(difference, scale) of one op: the greatest |result - eager| over the floating-point tensors
    both name (pytree paths; NaN against NaN agrees; results of other shapes are an infinite
    difference), and the greatest magnitude among the op's floating-point ``inputs`` and ``eager``
    (a sum that cancels to near zero is measured against what it summed)."""
    got = dict(tensor_leaves(result))
    difference = 0.0
    for path, want in tensor_leaves(eager):
        g = got.get(path)
        if g is None or not (want.is_floating_point() and g.is_floating_point()):
            continue
        if tuple(g.shape) != tuple(want.shape):
            difference = math.inf
            continue
        if want.numel():
            difference = max(difference, _max_distance(g.detach().double().numpy().reshape(-1),
                                                       want.detach().double().numpy().reshape(-1)))
    scale = max((_magnitude(t) for _, t in tensor_leaves((inputs, eager)) if t.is_floating_point()), default=0.0)
    return difference, scale


def lowering_differs(difference: float, scale: float) -> bool:
    """Whether one op's two float64 evaluations differ by more than float64 rounding allows
    (``LOWERING_BOUND`` of its scale): it is lowered to other math."""
    return difference > LOWERING_BOUND * scale


def same_math(unrounded: numerics.CompareReport, unrounded_error: float, xla_error: float, cpu_error: float) -> bool:
    """Whether the exact replay computes the reference's math: it matches the golden at fp64
    tolerances, or differs by much less than the run's own rounding error."""
    if unrounded.passed:
        return True
    return unrounded_error <= MATH_NOISE_FRACTION * max(xla_error, cpu_error)


def output_parity(path: str, x: Any, c: Any, g: Any, tol: dict, rounded: Any = None, exact: Any = None,
                  longest_reduction: int = 1, xla_cpu: Any = None, wide: Any = None) -> OutputParity:
    """Compares one output: XLA ``x`` vs CPU eager ``c`` (tolerances), both vs the fp64 golden
    ``g``, and, when given, XLA vs the rounded replay (exactly, and within the bound) and the
    exact replay vs ``g``; ``xla_cpu``: the rounded replay with XLA:CPU's own rules, when the
    replay applied another device's; ``wide``: the replay of the program traced with JAX's x64 mode
    on, when the run computed float64 tensors in float32."""
    cmp = numerics.compare(x, c, equal_nan=True, check_dtype=False, **tol)
    xe, ce = golden_errors(x, g), golden_errors(c, g)
    gd = g.double()
    scale = float(gd.abs().max()) if gd.numel() else 0.0
    magnitude = float(gd[cmp.max_ulp_index].abs()) if cmp.max_ulp_index is not None else 0.0
    significant = None
    if scale > 0:
        mask = (gd.abs() >= SIGNIFICANT_FRACTION * scale)
        if bool(mask.any()) and not bool(mask.all()):
            keep = mask.numpy()  # NumPy's boolean indexing: about 10x torch's at a vocabulary's logits
            significant = numerics.compare(to_numpy(x)[keep], to_numpy(c)[keep], equal_nan=True, check_dtype=False,
                                           **tol)
    o = OutputParity(path, cmp, xe[0], ce[0], xe[1], ce[1], closer(xe, ce), scale,
                     (cmp.max_abs_diff / scale) if scale > 0 else 0.0, magnitude, significant)
    if rounded is None:
        return o
    wide_error = golden_errors(np.asarray(wide).reshape(tuple(x.shape)), g)[0] if wide is not None else None
    rounded = np.asarray(rounded).reshape(tuple(x.shape))
    exact = np.asarray(exact, dtype=np.float64).reshape(tuple(x.shape))
    unrounded = numerics.compare(exact, gd.numpy(), equal_nan=True, check_dtype=False)
    unrounded_error = golden_errors(exact, g)[0]
    distance, run_error, replay_error, bound, reproduced = replay_figures(x, rounded, exact, longest_reduction)
    xla_cpu_reproduced = None
    if xla_cpu is not None:
        xla_cpu_reproduced = replay_figures(x, xla_cpu, exact, longest_reduction)[-1]
    return OutputParity(
        path, cmp, xe[0], ce[0], xe[1], ce[1], o.closer, scale, o.max_diff_to_scale, magnitude, significant,
        emulated=numerics.compare(x, rounded, rtol=0.0, atol=0.0, equal_nan=True, check_dtype=False),
        emulated_error=xe[0] if same_buffer(x, rounded) else golden_errors(rounded, g)[0], unrounded=unrounded, unrounded_error=unrounded_error,
        same_math=same_math(unrounded, unrounded_error, xe[0], ce[0]), replay_distance=distance,
        run_rounding=run_error, replay_rounding=replay_error, replay_bound=bound, reproduced=reproduced,
        xla_cpu_reproduced=xla_cpu_reproduced, wide_error=wide_error)


def cause(bit_identical: bool, same: bool | None, reproduced: bool | None, xla_error: float, cpu_error: float,
          replay_error: float | None, narrow: bool, xla_cpu_reproduced: bool | None = None,
          wide_error: float | None = None, lowering: bool = False) -> str | None:
    """The rule (module docstring) on one output's (or layer's) figures. ``replay_error``: the
    rounded replay's error against the golden; ``narrow``: the program rounds to bf16/f16;
    ``xla_cpu_reproduced``: False when the replay with XLA:CPU's f32 matmuls does not reproduce
    the run where the device's rules' replay does (None: not asked); ``wide_error``: the error of
    the program traced with x64 on, replayed, when the run narrowed float64 tensors (None: not);
    ``lowering``: the op audit found an op the frontend lowers to other math (OpAudit.found)."""
    if bit_identical:
        return None
    if reproduced is None or same is None:
        return UNEXPLAINED
    if (wide_error is not None and wide_error <= REASSOCIATION_FACTOR * cpu_error
            and xla_error > REASSOCIATION_FACTOR * max(cpu_error, wide_error)):
        return X64_OFF
    if not same:
        return OP_LOWERING if lowering else REAL_DIFFERENCE
    if reproduced:
        if xla_cpu_reproduced is False:
            return MATMUL_PRECISION
        return ROUNDING_PLACEMENT if narrow else REASSOCIATION
    if xla_error <= REASSOCIATION_FACTOR * max(cpu_error, replay_error or 0.0):
        return REASSOCIATION
    return REAL_DIFFERENCE


def output_cause(o: OutputParity, narrow: bool, lowering: bool = False) -> str | None:
    """The cause of ``o``'s difference from CPU eager (None when there is no difference);
    ``lowering`` as for :func:`cause`."""
    return cause(o.bit_identical, o.same_math, o.reproduced, o.xla_error, o.cpu_error, o.emulated_error, narrow,
                 o.xla_cpu_reproduced, o.wide_error, lowering)


def program_differs(o: OutputParity) -> bool:
    """Whether ``o`` is a real difference because the program is not the reference's math (the
    exact replay leaves the golden): what an op audit can explain."""
    return o.same_math is False and output_cause(o, narrow=False) == REAL_DIFFERENCE
