"""The words of a report, from its figures: the lead sentence (verdict, cause, what to do), the
evidence for each cause, and the figures against the fp64 golden.

Every sentence reads the report's own figures (the causes :mod:`.causes` set, the replays'
figures, the rules the replay applied), so the verdict, the lead sentence and the explanation
never contradict each other.

Example:
    >>> import torch
    >>> from torch_xla_ext import parity
    >>> report = parity.verify(torch.nn.Linear(4, 4), (torch.randn(2, 4),), dtype="fp32")
    >>> lead(report)  # doctest: +ELLIPSIS
    'PASS: XLA matches CPU eager within tolerances (rtol=1.3e-06, atol=1e-05) on all 8 elements ...'
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

from torch_xla_ext import _device, _dtypes, _frontend
from torch_xla_ext.errors import first_line
from torch_xla_ext.parity.causes import LOWERING_BOUND, MATH_NOISE_FRACTION, REASSOCIATION_FACTOR, SIGNIFICANT_FRACTION
from torch_xla_ext.parity.program import rules as _rules
from torch_xla_ext.parity.program.stablehlo import RoundingPoint
from torch_xla_ext.parity.report import (MATMUL_PRECISION, OP_LOWERING, REAL_DIFFERENCE, REASSOCIATION,
                                         ROUNDING_PLACEMENT, UNEXPLAINED, X64_OFF, ModuleParity, Narrowed, OpAudit,
                                         OpLowering, OutputParity, ParityReport, Verdict)

__all__ = ["X64_FIX", "ExplanationParts", "audit_figure", "describe_rounding", "device_caveat", "exception_words",
           "explain", "explain_parts", "lead", "lowering_fix", "modules_words", "narrowed_words", "nondeterminism_words",
           "rules_words", "shapes_words"]

# Most severe first: the cause the lead sentence names when outputs differ for several.
_SEVERITY = (X64_OFF, OP_LOWERING, REAL_DIFFERENCE, UNEXPLAINED, MATMUL_PRECISION, REASSOCIATION, ROUNDING_PLACEMENT)
# What turns JAX's x64 mode on for torchax, and what it costs (the x64 cause's fix).
X64_FIX = ("call torchax.enable_accuracy_mode() or jax.config.update(\"jax_enable_x64\", True) before the run "
           "(64-bit tensors then take twice the memory and bandwidth, a TPU computes float64 in software, and "
           "enable_accuracy_mode also sets JAX's default matmul precision to highest)")


@dataclasses.dataclass(frozen=True)
class ExplanationParts:
    """The explanation in pieces, for the structured renderings: ``lead`` (one sentence),
    ``causes`` (the evidence for each cause, one paragraph each) and ``figures`` (the errors
    against the fp64 golden, where ULP distances mislead)."""

    lead: str
    causes: tuple[str, ...]
    figures: tuple[str, ...]


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


def _rule_words(rules: str, device: str, how: str) -> tuple[str, str]:
    """(who computes, how) for the rules named ``rules``: the registered rule's words, or the
    fallback given for rules read per dot."""
    rule = _rules.by_name(rules)
    return (rule.device, rule.how) if rule is not None else (device, how)


def rules_words(rules: str, source: str) -> str:
    """Which rules the rounded replay applied and why, as a sentence."""
    device, how = _rule_words(rules, "each dot's device", "as its own precision_config asks")
    return (f"The rounded replay applied the {rules} rules ({device} computes f32 dots and convolutions {how}), "
            f"{source if source != 'given' else 'as given'}.")


def _site(module: str | None, source: str | None, text: str | None) -> str:
    """" in blocks.0 at model.py:52 `pos = ...`": where a torch call ran (the module and the
    model's line), "" for what is unknown."""
    where = f" in {module or '<root>'}" if module is not None else ""
    at = f" at {source}" + (f" `{text}`" if text else "") if source else ""
    return where + at


# How the op audit ran (the same words wherever it is named).
_AUDIT_HOW = ("its forward run by {fe} op by op in float64 with JAX's x64 mode on, each op against torch's own on the "
              "CPU from the same inputs")


def _lowering_words(found: OpLowering, frontend: str) -> str:
    """"torchax's lowering `torchax.ops.jaten._aten_gelu`", or the user's override."""
    if found.overridden:
        return f"the override `{found.lowering}` (override_op_definition, in place of {frontend}'s own lowering)"
    return f"{frontend}'s lowering `{found.lowering}`"


def lowering_fix(found: OpLowering, frontend: str) -> str:
    """What to do about an op lowered to other math: fix the user's override, or report the
    frontend's lowering upstream and override it meanwhile."""
    spelling = f"torch.ops.{found.op}" if found.op.startswith("aten.") else found.op
    if found.overridden:
        return (f"correct or remove that override (torchax.default_env().override_op_definition({spelling}, ...)) so "
                f"that it computes what eager computes")
    return (f"report it upstream (google/torchax issues) and meanwhile override the op with "
            f"torchax.default_env().override_op_definition({spelling}, impl), impl computing what eager computes")


def _lowering_figures(found: OpLowering) -> str:
    return (f"its float64 result leaves torch's by {_fmt(found.difference)} (of a scale of {_fmt(found.scale)}) "
            f"where float64 rounding allows {_fmt(found.bound)}")


def audit_figure(audit: OpAudit) -> str:
    """The op audit in a table cell: where it ran and what it found."""
    if audit.error is not None:
        return f"{audit.name}: could not run ({audit.error})"
    if audit.found is not None:
        return f"{audit.name}: {audit.found.op} lowered to other math ({audit.compared} op(s) compared)"
    return f"{audit.name}: {audit.compared} op(s) compared, each within float64 rounding of torch's"


def _audit_cleared(report: ParityReport) -> str:
    """The sentence an op audit that blamed no op adds to a real difference of the program's math."""
    a, fe = report.op_audit, report.frontend
    if a is None:
        return ""
    if a.error is not None:
        return f" The op audit of {a.name} could not run ({a.error})."
    return (f" The op audit of {a.name} ({_AUDIT_HOW.format(fe=fe)}) compared {a.compared} op(s) and found each "
            f"within float64 rounding of torch's ({LOWERING_BOUND:.3g} of its scale): the difference is not {fe}'s "
            f"lowering of those ops, so look at fn's own code and weights against the reference's.")


def narrowed_words(narrowed: Sequence[Narrowed], limit: int = 3) -> str:
    """Where the run computed float64 as float32 (and int64 as int32): how many torch calls, and the
    first ``limit`` distinct lines of the model (their torch calls, the module, "file:line" and the
    line's text)."""
    words = []
    for dtype, narrow in (("float64", "float32"), ("int64", "int32")):
        ns = [n for n in narrowed if n.dtype == dtype]
        if not ns:
            continue
        lines: dict[tuple, list[str]] = {}
        for n in ns:
            lines.setdefault((n.module, n.source, n.source_line), []).append(n.op)
        sites = [f"{', '.join(dict.fromkeys(ops))}{_site(module, source, text)}"
                 for (module, source, text), ops in list(lines.items())[:limit]]
        more = len(lines) - limit
        words.append(f"{dtype} as {narrow} in {len(ns)} torch call(s): {'; '.join(sites)}"
                     + (f"; and {more} more line(s)" if more > 0 else ""))
    return " and ".join(words)


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


def _within(outputs: Sequence[OutputParity]) -> str:
    """The replay figures of ``outputs``: the greatest difference against its bound, and the
    bit-equality figure."""
    w = max(outputs, key=lambda o: (o.replay_distance or 0.0) / (o.replay_bound or 1.0))
    n = sum(o.emulated.total for o in outputs)
    same = sum(o.emulated.total - o.emulated.mismatched for o in outputs)
    return (f"greatest difference {_fmt(w.replay_distance)} against a bound of {_fmt(w.replay_bound)} at output "
            f"{_name(w)}; bit for bit on {same}/{n} elements")


def explain(report: ParityReport, subject: str | None = None) -> str:
    """The explanation of a PASS or FAIL verdict over the report's outputs (their causes already
    set): the lead sentence (verdict, cause, what to do), then the evidence for each cause and the
    figures against the fp64 golden. With ``subject`` (e.g. "the stack's final output"), the
    first sentence describes that subject instead of stating the verdict (a caller whose verdict
    rests on more than these outputs states it first)."""
    p = explain_parts(report, subject)
    return " ".join([p.lead, *p.causes, *p.figures])


def _counts(outputs: Sequence[OutputParity]) -> tuple[int, int, int, list[OutputParity], str]:
    """(elements, mismatched, bit-identical, the failing outputs, the tolerance words) of XLA vs CPU eager."""
    total = sum(o.xla_vs_cpu.total for o in outputs)
    mism = sum(o.xla_vs_cpu.mismatched for o in outputs)
    same = sum(o.xla_vs_cpu.ulp_histogram.get("0", 0) for o in outputs)
    failing = [o for o in outputs if not o.xla_vs_cpu.passed]
    r0 = (failing or list(outputs))[0].xla_vs_cpu
    return total, mism, same, failing, f"rtol={r0.rtol:g}, atol={r0.atol:g}"


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


def explain_parts(report: ParityReport, subject: str | None = None) -> ExplanationParts:
    """:func:`explain` in pieces."""
    outputs, emulation, points = report.outputs, report.emulation, list(report.rounding_points)
    total, mism, same, failing, tol = _counts(outputs)
    if subject is not None:
        head = (f"On {subject}, XLA matches CPU eager within tolerances ({tol}) on all {total} elements, {same} "
                f"bit-identical." if not failing else
                f"On {subject}, {mism}/{total} elements mismatch CPU eager ({tol}).")
    else:
        head = lead(report)
    parts: list[str] = []
    differing = [o for o in outputs if o.cause is not None]
    if emulation.startswith("unavailable"):
        why = emulation.removeprefix("unavailable: ")
        if differing:
            parts.append(f"The replays of XLA's program were unavailable ({why}), so the cause of the differences "
                         f"is neither confirmed nor ruled out.")
        else:
            parts.append(f"(The replays of XLA's program were unavailable: {why}.)")
    elif report.rules != "xla-cpu" or not (report.rules_source == "given" or _device.is_cpu(report.device)):
        # XLA:CPU's rules on a CPU (given, or read from it by "auto") change nothing: no sentence.
        parts.append(rules_words(report.rules, report.rules_source))
    by_cause: dict[str, list[OutputParity]] = {}
    for o in differing:
        by_cause.setdefault(o.cause, []).append(o)
    exact_replay = _exact_replay_words(report.unrounded_replay or "f64", points)
    if ROUNDING_PLACEMENT in by_cause:
        os_ = by_cause[ROUNDING_PLACEMENT]
        parts.append(
            f"Rounding placement explains output(s) {_names(os_)}: {describe_rounding(points)}, where CPU eager "
            f"need not round (a fused kernel such as addmm rounds once). XLA equals the rounded replay of its "
            f"program (the same program with every {_narrow_type(points)} op computed in f32 and rounded where "
            f"XLA rounds) within what evaluation order can change between two XLA builds ({_within(os_)}), and "
            f"{exact_replay} matches the fp64 golden, so XLA computes the reference's math and only rounds in "
            f"different places; it is not a lowering bug.")
    if MATMUL_PRECISION in by_cause:
        os_ = by_cause[MATMUL_PRECISION]
        device, how = _rule_words(report.rules, "the device", "at its precision_config's precision")
        parts.append(
            f"The device's matmul precision explains output(s) {_names(os_)}: XLA equals the rounded replay of its "
            f"program under the {report.rules} rules, where {device} computes f32 dots and convolutions {how} "
            f"({_within(os_)}), while the replay with XLA:CPU's f32 matmuls does not reproduce it, and "
            f"{exact_replay} matches the fp64 golden: the program is the reference's math and its matmuls ran at "
            f"the device's precision, which {_frontend.highest_matmul_precision(report.frontend)} raises.")
    if REASSOCIATION in by_cause:
        os_ = by_cause[REASSOCIATION]
        w = max(os_, key=lambda o: o.xla_error)
        replay = (f"XLA equals the replay of its program, which rounds nothing to a narrow type, within what "
                  f"evaluation order can change ({_within(os_)})"
                  if all(o.reproduced for o in os_) else "the rounded replay does not reproduce XLA's evaluation order")
        parts.append(
            f"Reassociation explains output(s) {_names(os_)}: {exact_replay} of the program matches the "
            f"fp64 golden and XLA is as accurate as CPU eager (errors {_fmt(w.xla_error)} vs {_fmt(w.cpu_error)}, "
            f"within {REASSOCIATION_FACTOR:g}x); {replay}, so what differs is the order of evaluation inside ops "
            f"(summation order of dots and reductions, FMA contraction, approximations of transcendentals). "
            f"Compare against the fp64 golden with a tolerance of about "
            f"{_fmt(2 * max(w.xla_error, w.cpu_error))} rather than against CPU eager bit for bit.")
    if X64_OFF in by_cause:
        os_ = by_cause[X64_OFF]
        w = max(os_, key=lambda o: o.xla_error)
        parts.append(
            f"JAX's x64 mode off explains output(s) {_names(os_)}: with jax_enable_x64 off (JAX's default) torchax "
            f"computes {narrowed_words(report.narrowed)}. XLA's greatest error against the fp64 golden, "
            f"{_fmt(w.xla_error)}, is more than {REASSOCIATION_FACTOR:g}x CPU eager's ({_fmt(w.cpu_error)}), while "
            f"the same forward traced with x64 on (torch's own dtypes), replayed under the same rules, errs by "
            f"{_fmt(w.wide_error or 0.0)}, within {REASSOCIATION_FACTOR:g}x of CPU eager: the narrowing is the "
            f"difference, not the lowering. To keep float64, {X64_FIX}.")
    if OP_LOWERING in by_cause:
        os_ = by_cause[OP_LOWERING]
        a, fe = report.op_audit, report.frontend
        f = a.found
        w = max(os_, key=lambda o: o.unrounded_error or 0.0)
        u, t = sum(o.unrounded.mismatched for o in os_), sum(o.unrounded.total for o in os_)
        parts.append(
            f"An op {fe} lowers differently from eager explains output(s) {_names(os_)}: {exact_replay} of the "
            f"program differs from the fp64 golden on {u}/{t} elements (greatest {_fmt(w.unrounded_error or 0.0)}), "
            f"so the program is not the reference's math, and the op audit of {a.name} ({_AUDIT_HOW.format(fe=fe)}) "
            f"finds {f.op}{_site(f.module, f.source, f.source_line)} computed by {_lowering_words(f, fe)}: "
            f"{_lowering_figures(f)} ({LOWERING_BOUND:.3g} of the scale), while the {a.compared - 1} op(s) that "
            f"finished before it agree. What to do: {lowering_fix(f, fe)}.")
    if REAL_DIFFERENCE in by_cause:
        parts += _real_difference(report, by_cause[REAL_DIFFERENCE], exact_replay)
    if UNEXPLAINED in by_cause and not emulation.startswith("unavailable"):
        parts.append(f"No cause is established for output(s) {_names(by_cause[UNEXPLAINED])}.")
    if report.verdict == Verdict.PASS and report.reproduced and not differing:
        parts.append("XLA also equals the rounded replay of its program within the bound.")
    figures = [_golden(outputs) + _scale_words(outputs)]
    if report.verdict == Verdict.FAIL and set(by_cause) <= {ROUNDING_PLACEMENT, MATMUL_PRECISION, REASSOCIATION}:
        figures.append("Loosening the CPU tolerance instead hides the cause and would also hide a real bug.")
    caveat = device_caveat(report.device, report.rules, report.rules_source)
    if caveat:
        parts.append(caveat)
    return ExplanationParts(head, tuple(parts), tuple(figures))


def _real_difference(report: ParityReport, os_: Sequence[OutputParity], exact_replay: str) -> list[str]:
    parts = []
    math_differs = [o for o in os_ if o.same_math is False]
    if math_differs:
        u = sum(o.unrounded.mismatched for o in math_differs)
        t = sum(o.unrounded.total for o in math_differs)
        w = max(math_differs, key=lambda o: o.unrounded_error)
        faithful = all(o.reproduced for o in math_differs)
        parts.append(
            f"A real difference in output(s) {_names(math_differs)}: the program XLA ran is not the "
            f"reference's math. Replayed in fp64 without rounding it differs from the fp64 golden on {u}/{t} "
            f"elements (greatest {_fmt(w.unrounded_error)}, more than {MATH_NOISE_FRACTION:g} of the run's "
            f"rounding error {_fmt(max(w.xla_error, w.cpu_error))})"
            + ("; XLA itself runs that program faithfully (it equals its rounded replay within the bound)"
               if faithful else "")
            + ". What fn lowers to (or fn itself) differs from the reference: dump the program "
              "(report.hlo_text) and find the op that is not the reference's, or localise it per module "
              "(verify(..., localize=True))." + _audit_cleared(report))
    unfaithful = [o for o in os_ if o.same_math]
    if unfaithful:
        w = max(unfaithful, key=lambda o: o.xla_error)
        d = max(unfaithful, key=lambda o: (o.replay_distance or 0.0) / (o.replay_bound or 1.0))
        rules = "XLA:CPU's" if report.rules == "xla-cpu" else f"the {report.rules} rules'"
        parts.append(
            f"A real difference in output(s) {_names(unfaithful)}: the program is the reference's math, but "
            f"XLA does not execute it as {rules} roundings predict: it differs from the rounded replay by "
            f"{_fmt(d.replay_distance)}, beyond the bound {_fmt(d.replay_bound)} of what evaluation order can "
            f"change, and its fp64 error {_fmt(w.xla_error)} exceeds {REASSOCIATION_FACTOR:g}x both CPU eager's "
            f"({_fmt(w.cpu_error)}) and the replay's ({_fmt(w.emulated_error or 0.0)}). The compiler, the runtime "
            "or the device's arithmetic changed the numerics"
            + (" (on a TPU or GPU, its matmul precision: rerun with rules='auto')" if report.rules == "xla-cpu"
               and not _device.is_cpu(report.device) else "")
            + "; bisect the function or localise it per module.")
    return parts


def _tolerance(outputs: Sequence[OutputParity]) -> str:
    w = max(outputs, key=lambda o: o.xla_error)
    return _fmt(2 * max(w.xla_error, w.cpu_error))


def _precision_advice(report: ParityReport, outputs: Sequence[OutputParity]) -> str:
    device, how = _rule_words(report.rules, "the device", "at the precision its precision_config asks for")
    # Rules read per dot ("per dot: tpu-high on 3, tpu-default on 9") name registered rules.
    named = [_rules.by_name(part.split(" on ")[0]) for part in report.rules.removeprefix("per dot: ").split(", ")]
    highest = next((r.highest for r in named if r is not None and r.highest), None)
    raise_it = (f"{_frontend.highest_matmul_precision(report.frontend)} computes them {highest}, or "
                if highest else "")
    return (f"the cause is {device}'s matmul precision (its f32 dots and convolutions ran {how}; rules "
            f"{report.rules}), not a bug: {raise_it}compare against the fp64 golden with a tolerance of about "
            f"{_tolerance(outputs)} instead of CPU eager")


def _advice(report: ParityReport) -> str:
    """The cause and what to do, as the second half of the lead sentence."""
    verdict, outputs, emulation = report.verdict, report.outputs, report.emulation
    differing = [o for o in outputs if o.cause is not None]
    if not differing:
        return "nothing to do" if verdict == Verdict.PASS else "no output differs from CPU eager bit for bit"
    causes = [c for c in _SEVERITY if any(o.cause == c for o in differing)]
    tol = _tolerance(outputs)
    if causes[0] == X64_OFF:
        w = max((o for o in differing if o.cause == X64_OFF), key=lambda o: o.xla_error)
        return (f"the cause is JAX's x64 mode off: torchax computed {narrowed_words(report.narrowed, 1)}, so XLA's "
                f"error against the fp64 golden is {_fmt(w.xla_error)} where CPU eager's is {_fmt(w.cpu_error)} "
                f"and the same forward with x64 on replays to {_fmt(w.wide_error or 0.0)}: {X64_FIX}")
    if causes[0] == OP_LOWERING:
        f, fe = report.op_audit.found, report.frontend
        return (f"the cause is an op {fe} lowers differently from eager: {f.op}"
                f"{_site(f.module, f.source, f.source_line)} runs {_lowering_words(f, fe)}, and "
                f"{_lowering_figures(f)}: {lowering_fix(f, fe)}")
    if causes[0] == REAL_DIFFERENCE:
        real = [o for o in differing if o.cause == REAL_DIFFERENCE]
        a = report.op_audit
        if any(o.same_math is False for o in real) and a is not None and a.error is None:
            return (f"the cause is a real difference in {_names(real, 4)}: the program XLA ran is not the reference's "
                    f"math, and each of the {a.compared} op(s) {report.frontend} ran in {a.name} agrees with torch's "
                    f"own in float64 (report.op_audit), so look at fn's own code and weights against the reference's")
        if any(o.same_math is False for o in real):
            return (f"the cause is a real difference in {_names(real, 4)}: the program XLA ran is not the reference's "
                    f"math; find the op in report.hlo_text or localise it with verify(..., localize=True)")
        rules = "XLA:CPU's" if report.rules == "xla-cpu" else f"the {report.rules} rules'"
        return (f"the cause is a real difference in {_names(real, 4)}: XLA does not execute its program as "
                f"{rules} roundings predict; bisect the function or localise it with verify(..., localize=True)")
    if causes[0] == UNEXPLAINED:
        why = emulation.removeprefix("unavailable: ") if emulation.startswith("unavailable") else "no replay"
        return (f"no cause is established ({why}); rerun with the replays (emulate=True) to tell rounding from a "
                f"real difference")
    if causes[0] == MATMUL_PRECISION:
        return _precision_advice(report, outputs)
    named = " and ".join(causes)
    if verdict == Verdict.PASS:
        return f"the remaining differences are {named}, so nothing to do"
    if causes == [REASSOCIATION]:
        return (f"the cause is reassociation (the same math in another order), not a bug: compare against the fp64 "
                f"golden with a tolerance of about {tol} instead of CPU eager")
    return (f"the cause is {named} (XLA rounds to {_narrow_word(report.dtype)} in other "
            f"places than CPU eager), not a bug: compare against the rounded replay or the fp64 golden with a "
            f"tolerance of about {tol} instead of CPU eager")


def _narrow_word(dtype: str) -> str:
    """"bf16" for bfloat16 (and "torch.bfloat16"), "f16" for float16: their MLIR names."""
    row = _dtypes.by_name(dtype.removeprefix("torch."))
    return row.mlir if row is not None and row.name in _dtypes.NARROW_FLOATS else dtype


def _lead_sentence(report: ParityReport) -> str:
    """One sentence: the verdict, the cause, what to do. Example: "FAIL: 5/7680 elements mismatch
    CPU eager (rtol=0.016, atol=1e-05) in output(s) <root>, in bfloat16; the cause is rounding
    placement (...), not a bug: compare against the rounded replay or the fp64 golden with a
    tolerance of about 0.0123 instead of CPU eager."."""
    verdict, outputs, dtype = report.verdict, report.outputs, report.dtype
    if not outputs:
        return f"{verdict.value}: no floating-point output was compared."
    total, mism, same, failing, tol = _counts(outputs)
    if verdict == Verdict.PASS:
        head = (f"PASS: XLA matches CPU eager within tolerances ({tol}) on all {total} elements of {len(outputs)} "
                f"output(s) in {dtype}, {same} of them bit-identical")
    else:
        head = f"FAIL: {mism}/{total} elements mismatch CPU eager ({tol}) in output(s) {_names(failing)}, in {dtype}"
    return f"{head}; {_advice(report)}."


def lead(report: ParityReport) -> str:
    """The one sentence a report leads with (verdict, cause, what to do), from its figures: the
    outputs' verdict, then the first divergent layer or module when the report localises."""
    v = report.verdict
    if v == Verdict.EXCEPTION:
        first = _first_line(report.exception or "an exception")
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
    text = _lead_sentence(report)
    if report.first_divergent_module:
        text = (text[:-1] + f"; the first divergent module is {report.first_divergent_module}, start there "
                f"(report.module_table()).")
    return text


def device_caveat(device: str | None = None, rules: str = "xla-cpu", source: str = "given") -> str:
    """The sentence a report made on another device than XLA:CPU carries ("" on the CPU): which
    device rules the replay applied there, and what they leave out."""
    device = device or _device.current()
    if _device.is_cpu(device) or device == "unselected":
        return ""
    if device == _rules.UNKNOWN_DEVICE and rules == "xla-cpu":
        return ("The capture does not name the device it ran on, so this report applied XLA:CPU's rules: on a TPU "
                "or GPU, the device's own matmul precision would read as a real difference; capture again with "
                "this version to record the device.")
    if device == _rules.UNKNOWN_DEVICE:
        return (f"The capture does not name the device it ran on: the replay applied the {rules} rules ({source}); "
                f"the rest of the device's arithmetic is modelled by XLA:CPU's rounding rules.")
    if rules == "xla-cpu":
        return (f"XLA ran on {device}, and this report applied XLA:CPU's rules ({source}): {device}'s own matmul "
                f"precision would read as a real difference; rerun with rules='auto' (--rules auto) to replay the "
                f"precision each dot's precision_config asks of {device}.")
    return (f"XLA ran on {device}: the replay applied {device}'s matmul precision ({rules}); the rest of its "
            f"arithmetic is modelled by XLA:CPU's rounding rules, and that part of the cause attribution is not "
            f"verified on {device}.")


def modules_words(modules: Sequence[ModuleParity], first: ModuleParity | None, floor_ulps: float) -> str:
    """The localisation in words, from the figures the rule read (``own_to_rounding`` against
    ``threshold``), so the text, the table and the flags never disagree."""
    if not modules:
        return ""
    yardstick = (f"its rounding level (CPU eager's RMS error for the same module on the same inputs, at least "
                 f"{floor_ulps:g} unit(s) of roundoff of the output's RMS)")
    if first is None:
        worst = max(modules, key=lambda m: m.own_to_rounding if math.isfinite(m.own_to_rounding) else 0.0)
        return (f"Per module ({len(modules)} calls): no module's own error exceeds {worst.threshold:g}x {yardstick}, "
                f"so the outputs' error accumulates from rounding (greatest own/rounding ratio "
                f"{worst.own_to_rounding:.3g}, at {worst.name}).")
    before = [m for m in modules if m.order < first.order]
    return (f"Per module ({len(modules)} calls): the first divergent module is {first.name}: its own error "
            f"{first.own_error:.3g} (RMS, on the inputs XLA gave it) is {first.own_to_rounding:.3g}x {yardstick}, "
            f"{first.rounding_level:.3g}, beyond the threshold {first.threshold:g}x, while it inherited "
            f"{first.inherited_error:.3g}; the {len(before)} module call(s) that finished before it stay within "
            f"rounding. Start looking there (report.module_table()).")


def exception_words(stage: str, exception: str, after: str = "nothing was compared") -> str:
    return (f"EXCEPTION: the {stage} run raised {_first_line(exception)}; {after}. Fix the exception "
            f"(report.exception has it) and rerun.")


def _first_line(exception: str) -> str:
    """The line a sentence quotes of a caught exception's text (``Type: message``): errors.first_line's rule."""
    return first_line(Exception(exception))


def nondeterminism_words(seed: int, path: str, r) -> str:
    return (f"NONDETERMINISTIC_REFERENCE: two CPU eager runs of the reference, with the RNG reset to seed {seed} "
            f"before each, differ on {r.mismatched}/{r.total} elements of output {path or '<root>'} (greatest "
            f"difference {r.max_abs_diff:.3g}), so a CPU comparison cannot tell an XLA bug from reference noise. "
            f"Make the reference deterministic (seed every generator it uses, no state that changes between "
            f"calls, torch.use_deterministic_algorithms(True)) and rerun.")


def shapes_words(shapes: Sequence[tuple[str, list[int], list[int]]]) -> str:
    listed = "; ".join(f"output {p}: XLA {x}, CPU eager {c}" for p, x, c in shapes)
    return (f"FAIL: a real difference: XLA returns outputs of other shapes than CPU eager ({listed}), so "
            f"torch_xla lowers an op of the program to something else (torch_xla 2.9 lowers sum, mean, "
            f"amax, amin, var and std over dim=[] as no reduction at all, where PyTorch reduces every "
            f"dimension). Nothing else was compared.")
