"""Which cause explains each output, and the explanation text of a verdict.

One output's cause, from the fp64 figures (see :func:`output_cause`):

* **rounding placement**: the program's exact fp64 replay is the reference's math, and XLA is
  bit-identical to the rounded replay, which rounds to bf16/f16 exactly where the program does
  (XLA:CPU's rules, cc/parity/rounding.h): the difference from CPU eager is where each side rounds.
* **reassociation**: the same math, and XLA is as accurate as CPU eager (within
  ``REASSOCIATION_FACTOR`` of its fp64 error): the order of evaluation differs (summation order,
  FMA contraction, approximations of transcendentals); in an fp32 program this is also what
  remains when XLA equals the replay, since nothing rounds to a narrow type.
* **a real difference**: the exact replay leaves the fp64 golden (the program is not the
  reference's math), or XLA leaves its own program's replay and is less accurate than both.

The verdict comes from the comparator; the explanation starts with it and every sentence
follows from the same figures, so the two never contradict each other.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Sequence

from torch_xla_ext import _device, _dtypes, numerics
from torch_xla_ext.parity.stablehlo import RoundingPoint
from torch_xla_ext.parity.verdicts import REAL_DIFFERENCE, REASSOCIATION, ROUNDING_PLACEMENT, UNEXPLAINED, Verdict

if TYPE_CHECKING:  # the report renders through document -> explain: types only, no import cycle
    from torch_xla_ext.parity.report import OutputParity

__all__ = ["MATH_NOISE_FRACTION", "REASSOCIATION_FACTOR", "ExplanationParts", "explain", "explain_parts", "lead",
           "lead_sentence", "output_cause", "same_math"]

# The exact replay may leave the golden by this fraction of the run's own rounding error and
# still compute "the same math": below that, differences are constants stored in the run dtype
# (GELU's 0.7071 as a bf16 constant).
MATH_NOISE_FRACTION = 0.25
# XLA's error against the golden may be this many times CPU eager's (or the replay's) and still
# count as "as accurate": summation order alone moves errors by small factors.
REASSOCIATION_FACTOR = 2.0
# ULP distances of elements below this fraction of the output's scale are reported apart.
SIGNIFICANT_FRACTION = 1e-3


def same_math(unrounded: numerics.CompareReport, unrounded_error: float, xla_error: float, cpu_error: float) -> bool:
    """Whether the exact replay computes the reference's math: it matches the golden at fp64
    tolerances, or differs by much less than the run's own rounding error."""
    if unrounded.passed:
        return True
    return unrounded_error <= MATH_NOISE_FRACTION * max(xla_error, cpu_error)


def output_cause(o: OutputParity, narrow_rounding: bool) -> str | None:
    """The cause of ``o``'s difference from CPU eager (None when there is no difference)."""
    if o.bit_identical:
        return None
    if o.emulated is None or o.same_math is None:
        return UNEXPLAINED
    if not o.same_math:
        return REAL_DIFFERENCE
    if o.emulated.mismatched == 0:
        return ROUNDING_PLACEMENT if narrow_rounding else REASSOCIATION
    if o.xla_error <= REASSOCIATION_FACTOR * max(o.cpu_error, o.emulated_error or 0.0):
        return REASSOCIATION
    return REAL_DIFFERENCE


def _fmt(v: float) -> str:
    return f"{v:.3g}"


def _name(o: OutputParity) -> str:
    return o.path or "<root>"


def _names(outputs: Sequence[OutputParity], limit: int = 12) -> str:
    names = [_name(o) for o in outputs]
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def describe_rounding(points: Sequence[RoundingPoint]) -> str:
    """"XLA rounds to bf16 after the dot (`dot.5`) and again after the add (`add.7`)" for the
    distinct double-rounding pairs, or how many ops round."""
    doubles = [p for p in points if p.after]
    if not points:
        return "the program rounds nothing to a narrow type"
    if not doubles:
        return f"XLA stores {len(points)} intermediate result(s) in {points[0].element_type}"
    pairs: dict[tuple[str, str], list[RoundingPoint]] = {}
    for p in doubles:
        pairs.setdefault((p.after_opcode or "", p.opcode), []).append(p)
    parts = []
    for (first, second), ps in sorted(pairs.items(), key=lambda kv: -len(kv[1]))[:3]:
        ex = ps[0]
        parts.append(f"after the {first} (`{ex.after}`) and again after the {second} (`{ex.instruction}`)"
                     + (f", {len(ps)} such pairs" if len(ps) > 1 else ""))
    more = len(pairs) - 3
    return (f"XLA rounds to {doubles[0].element_type} at {len(points)} ops, twice in a row at {len(doubles)}: "
            + "; ".join(parts) + (f"; and {more} other kinds of pairs" if more > 0 else ""))


def _golden(outputs: Sequence[OutputParity]) -> str:
    worst = max(outputs, key=lambda o: o.xla_error)
    closer = {"xla": "XLA is closer", "cpu": "CPU eager is closer", "tie": "equally close"}[worst.closer]
    return (f"Against the fp64 golden, XLA's greatest error is {_fmt(worst.xla_error)} and CPU eager's is "
            f"{_fmt(worst.cpu_error)} (output {_name(worst)}; {closer}).")


def _scale_words(outputs: Sequence[OutputParity]) -> str:
    """Where mismatches sit relative to each output's scale, when large ULP counts are near zero."""
    notes = []
    for o in outputs:
        r = o.xla_vs_cpu
        if r.max_ulp <= 4 or o.scale <= 0 or o.max_ulp_magnitude >= SIGNIFICANT_FRACTION * o.scale:
            continue
        sig = (f"; above {SIGNIFICANT_FRACTION:g} of the scale the greatest ULP distance is {o.significant.max_ulp}"
               if o.significant is not None else "")
        notes.append(f"output {_name(o)}'s greatest ULP distance ({r.max_ulp}) is at an element of magnitude "
                     f"{_fmt(o.max_ulp_magnitude)}, {_fmt(o.max_ulp_magnitude / o.scale)} of the output's scale "
                     f"({_fmt(o.scale)}); relative to the scale the greatest difference is "
                     f"{_fmt(o.max_diff_to_scale)}{sig}")
    if not notes:
        return ""
    return " ULP distances near zero mislead: " + "; ".join(notes) + "."


def explain(verdict: Verdict, outputs: Sequence[OutputParity], emulation: str, points: Sequence[RoundingPoint],
            dtype: str, subject: str | None = None, unrounded: str = "f64") -> str:
    """The explanation of a PASS or FAIL verdict over ``outputs`` (their causes already set): the
    lead sentence (verdict, cause, what to do; :func:`lead_sentence`), then the evidence for each
    cause and the figures against the fp64 golden.

    With ``subject`` (e.g. "the stack's final output"), the first sentence describes that subject
    instead of stating the verdict (a caller whose verdict rests on more than these outputs states
    it first). ``unrounded``: the float the exact replay computed in ("f64", or "f32" for a
    program that rounds to a narrow float)."""
    p = explain_parts(verdict, outputs, emulation, points, dtype, subject, unrounded)
    return " ".join([p.lead, *p.causes, *p.figures])


@dataclasses.dataclass(frozen=True)
class ExplanationParts:
    """The explanation in pieces, for the structured renderings: ``lead`` (one sentence),
    ``causes`` (the evidence for each cause, one paragraph each) and ``figures`` (the errors
    against the fp64 golden, where ULP distances mislead)."""

    lead: str
    causes: tuple[str, ...]
    figures: tuple[str, ...]


def _counts(outputs: Sequence[OutputParity]) -> tuple[int, int, int, list[OutputParity], str]:
    """(elements, mismatched, bit-identical, the failing outputs, the tolerance words) of XLA vs CPU eager."""
    total = sum(o.xla_vs_cpu.total for o in outputs)
    mism = sum(o.xla_vs_cpu.mismatched for o in outputs)
    same = sum(o.xla_vs_cpu.ulp_histogram.get("0", 0) for o in outputs)
    failing = [o for o in outputs if not o.xla_vs_cpu.passed]
    r0 = (failing or list(outputs))[0].xla_vs_cpu
    return total, mism, same, failing, f"rtol={r0.rtol:g}, atol={r0.atol:g}"


def explain_parts(verdict: Verdict, outputs: Sequence[OutputParity], emulation: str,
                  points: Sequence[RoundingPoint], dtype: str, subject: str | None = None,
                  unrounded: str = "f64") -> ExplanationParts:
    """:func:`explain` in pieces."""
    total, mism, same, failing, tol = _counts(outputs)
    if subject is not None:
        head = (f"On {subject}, XLA matches CPU eager within tolerances ({tol}) on all {total} elements, {same} "
                f"bit-identical." if not failing else
                f"On {subject}, {mism}/{total} elements mismatch CPU eager ({tol}).")
    else:
        head = lead_sentence(verdict, outputs, emulation, dtype)
    parts: list[str] = []
    differing = [o for o in outputs if o.cause is not None]
    if emulation.startswith("unavailable"):
        why = emulation.removeprefix("unavailable: ")
        if differing:
            parts.append(f"The replays of XLA's program were unavailable ({why}), so the cause of the differences "
                         f"is neither confirmed nor ruled out.")
        else:
            parts.append(f"(The replays of XLA's program were unavailable: {why}.)")
    by_cause: dict[str, list[OutputParity]] = {}
    for o in differing:
        by_cause.setdefault(o.cause, []).append(o)
    narrow = list(points)
    exact_replay = _exact_replay_words(unrounded, narrow)
    if ROUNDING_PLACEMENT in by_cause:
        os_ = by_cause[ROUNDING_PLACEMENT]
        n = sum(o.emulated.total for o in os_)
        parts.append(
            f"Rounding placement explains output(s) {_names(os_)}: {describe_rounding(narrow)}, where CPU eager "
            f"need not round (a fused kernel such as addmm rounds once). XLA matches the rounded replay of its "
            f"program (the same program with every {_narrow_type(narrow)} op computed in f32 and rounded where "
            f"XLA rounds) bit for bit on {n}/{n} elements, and {exact_replay} matches the fp64 golden, so "
            f"XLA computes the reference's math and only rounds in different places; it is not a lowering bug.")
    if REASSOCIATION in by_cause:
        os_ = by_cause[REASSOCIATION]
        w = max(os_, key=lambda o: o.xla_error)
        replay = ("XLA is bit-identical to the replay of its program, which rounds nothing to a narrow type"
                  if all(o.emulated is not None and o.emulated.mismatched == 0 for o in os_)
                  else f"the rounded replay does not reproduce XLA's evaluation order")
        parts.append(
            f"Reassociation explains output(s) {_names(os_)}: {exact_replay} of the program matches the "
            f"fp64 golden and XLA is as accurate as CPU eager (errors {_fmt(w.xla_error)} vs {_fmt(w.cpu_error)}, "
            f"within {REASSOCIATION_FACTOR:g}x); {replay}, so what differs is the order of evaluation inside ops "
            f"(summation order of dots and reductions, FMA contraction, approximations of transcendentals). "
            f"Compare against the fp64 golden with a tolerance of about "
            f"{_fmt(2 * max(w.xla_error, w.cpu_error))} rather than against CPU eager bit for bit.")
    if REAL_DIFFERENCE in by_cause:
        os_ = by_cause[REAL_DIFFERENCE]
        math_differs = [o for o in os_ if o.same_math is False]
        if math_differs:
            u = sum(o.unrounded.mismatched for o in math_differs)
            t = sum(o.unrounded.total for o in math_differs)
            w = max(math_differs, key=lambda o: o.unrounded_error)
            faithful = all(o.emulated.mismatched == 0 for o in math_differs)
            parts.append(
                f"A real difference in output(s) {_names(math_differs)}: the program XLA ran is not the "
                f"reference's math. Replayed in fp64 without rounding it differs from the fp64 golden on {u}/{t} "
                f"elements (greatest {_fmt(w.unrounded_error)}, more than {MATH_NOISE_FRACTION:g} of the run's "
                f"rounding error {_fmt(max(w.xla_error, w.cpu_error))})"
                + ("; XLA itself runs that program faithfully (bit for bit equal to its rounded replay)"
                   if faithful else "")
                + ". What fn lowers to (or fn itself) differs from the reference: dump the program "
                  "(report.hlo_text) and find the op that is not the reference's, or localise it per module "
                  "(verify(..., localize=True)).")
        unfaithful = [o for o in os_ if o.same_math]
        if unfaithful:
            w = max(unfaithful, key=lambda o: o.xla_error)
            k = sum(o.emulated.mismatched for o in unfaithful)
            t = sum(o.emulated.total for o in unfaithful)
            parts.append(
                f"A real difference in output(s) {_names(unfaithful)}: the program is the reference's math, but "
                f"XLA does not execute it as XLA:CPU's roundings predict: it differs from the rounded replay on "
                f"{k}/{t} elements and its fp64 error {_fmt(w.xla_error)} exceeds {REASSOCIATION_FACTOR:g}x both "
                f"CPU eager's ({_fmt(w.cpu_error)}) and the replay's ({_fmt(w.emulated_error or 0.0)}). The "
                f"compiler or runtime changed the numerics; bisect the function or localise it per module.")
    if UNEXPLAINED in by_cause and not emulation.startswith("unavailable"):
        parts.append(f"No cause is established for output(s) {_names(by_cause[UNEXPLAINED])}.")
    if verdict == Verdict.PASS and emulation == "matches" and not differing:
        parts.append("XLA also equals the rounded replay of its program bit for bit.")
    figures = [_golden(outputs) + _scale_words(outputs)]
    if verdict == Verdict.FAIL and set(by_cause) <= {ROUNDING_PLACEMENT, REASSOCIATION}:
        figures.append("Loosening the CPU tolerance instead hides the cause and would also hide a real bug.")
    caveat = device_caveat()
    if caveat:
        parts.append(caveat)
    return ExplanationParts(head, tuple(parts), tuple(figures))


# Most severe first: the cause the lead sentence names when outputs differ for several.
_SEVERITY = (REAL_DIFFERENCE, UNEXPLAINED, REASSOCIATION, ROUNDING_PLACEMENT)


def _advice(verdict: Verdict, outputs: Sequence[OutputParity], emulation: str, dtype: str) -> str:
    """The cause and what to do, as the second half of the lead sentence."""
    differing = [o for o in outputs if o.cause is not None]
    if not differing:
        return "nothing to do" if verdict == Verdict.PASS else "no output differs from CPU eager bit for bit"
    causes = [c for c in _SEVERITY if any(o.cause == c for o in differing)]
    w = max(outputs, key=lambda o: o.xla_error)
    tol = _fmt(2 * max(w.xla_error, w.cpu_error))
    if causes[0] == REAL_DIFFERENCE:
        real = [o for o in differing if o.cause == REAL_DIFFERENCE]
        if any(o.same_math is False for o in real):
            return (f"the cause is a real difference in {_names(real, 4)}: the program XLA ran is not the reference's "
                    f"math; find the op in report.hlo_text or localise it with verify(..., localize=True)")
        return (f"the cause is a real difference in {_names(real, 4)}: XLA does not execute its program as "
                f"XLA:CPU's roundings predict; bisect the function or localise it with verify(..., localize=True)")
    if causes[0] == UNEXPLAINED:
        why = emulation.removeprefix("unavailable: ") if emulation.startswith("unavailable") else "no replay"
        return (f"no cause is established ({why}); rerun with the replays (emulate=True) to tell rounding from a "
                f"real difference")
    named = " and ".join(causes)
    if verdict == Verdict.PASS:
        return f"the remaining differences are {named}, so nothing to do"
    if causes == [REASSOCIATION]:
        return (f"the cause is reassociation (the same math in another order), not a bug: compare against the fp64 "
                f"golden with a tolerance of about {tol} instead of CPU eager")
    return (f"the cause is {named} (XLA rounds to {_narrow_word(dtype)} in other "
            f"places than CPU eager), not a bug: compare against the rounded replay (exactly) or the fp64 golden with "
            f"a tolerance of about {tol} instead of CPU eager")


def _narrow_word(dtype: str) -> str:
    """"bf16" for bfloat16 (and "torch.bfloat16"), "f16" for float16: their MLIR names."""
    row = _dtypes.by_name(dtype.removeprefix("torch."))
    return row.mlir if row is not None and row.name in _dtypes.NARROW_FLOATS else dtype


def lead_sentence(verdict: Verdict, outputs: Sequence[OutputParity], emulation: str, dtype: str) -> str:
    """One sentence: the verdict, the cause, what to do. Example: "FAIL: 5/7680 elements mismatch
    CPU eager (rtol=0.016, atol=1e-05) in output(s) <root>, in bfloat16; the cause is rounding
    placement (...), not a bug: compare against the rounded replay (exactly) or the fp64 golden
    with a tolerance of about 0.0123 instead of CPU eager."."""
    if not outputs:
        return f"{verdict.value}: no floating-point output was compared."
    total, mism, same, failing, tol = _counts(outputs)
    if verdict == Verdict.PASS:
        head = (f"PASS: XLA matches CPU eager within tolerances ({tol}) on all {total} elements of {len(outputs)} "
                f"output(s) in {dtype}, {same} of them bit-identical")
    else:
        head = f"FAIL: {mism}/{total} elements mismatch CPU eager ({tol}) in output(s) {_names(failing)}, in {dtype}"
    return f"{head}; {_advice(verdict, outputs, emulation, dtype)}."


def lead(report: Any) -> str:
    """The one sentence a report leads with (verdict, cause, what to do), from its figures: the
    outputs' verdict, then the first divergent layer or module when the report localises.

    Example:
        >>> import torch
        >>> from torch_xla_ext import parity
        >>> report = parity.verify(torch.nn.Linear(4, 4), (torch.randn(2, 4),), dtype="fp32")
        >>> lead(report)  # doctest: +ELLIPSIS
        'PASS: XLA matches CPU eager within tolerances (rtol=1.3e-06, atol=1e-05) on all 8 elements ...'
    """
    v = report.verdict
    if v == Verdict.EXCEPTION:
        first = (report.exception or "an exception").splitlines()[0]
        return (f"EXCEPTION: the {report.stage or 'XLA'} run raised {first}; nothing was compared: fix the exception "
                f"(report.exception) and rerun.")
    if v == Verdict.NONDETERMINISTIC_REFERENCE:
        path = report.nondeterminism[0] if report.nondeterminism else ""
        return (f"NONDETERMINISTIC_REFERENCE: two CPU eager runs of the reference differ on output {path or '<root>'}, "
                f"so CPU eager cannot judge XLA: make the reference deterministic and rerun.")
    if report.layers and report.first_divergent_layer is not None:
        l = report.layers[report.first_divergent_layer]
        cause = "the scan lowering changes it" if not l.scan_vs_loop.passed else (l.cause or "a real difference")
        return (f"{v.value}: layer {l.index} of {len(report.layers)} is the first divergent layer ({cause}); start "
                f"looking there (report.layers).")
    text = lead_sentence(v, report.outputs, report.emulation, report.dtype)
    if report.first_divergent_module:
        text = (text[:-1] + f"; the first divergent module is {report.first_divergent_module}, start there "
                f"(report.module_table()).")
    return text


def device_caveat(device: str | None = None) -> str:
    """The one sentence a report made on another device than XLA:CPU carries ("" on the CPU)."""
    device = device or _device.current()
    if _device.is_cpu(device):
        return ""
    return (f"XLA ran on {device}: the rounding rules this explanation applies are XLA:CPU's, and its cause "
            f"attribution is not verified on {device}.")


def _exact_replay_words(unrounded: str, points: Sequence[RoundingPoint]) -> str:
    """How the explanation names the replay without rounding."""
    if unrounded == "f64" or not points:
        return "the exact fp64 replay"
    narrow = _narrow_type(points)
    row = _dtypes.by_mlir(narrow)
    if row is None:
        return "the replay without rounding (in f32)"
    finer = 23 - _dtypes.float_format(row.name)[1]  # f32's mantissa bits over the narrow type's
    return f"the replay without rounding (in f32, whose rounding is 2^{finer} times finer than {narrow}'s)"


def _narrow_type(points: Sequence[RoundingPoint]) -> str:
    return points[0].element_type if points else "narrow-float"
