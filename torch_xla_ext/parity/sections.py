"""The sections of a report's document, from its figures: **Outputs** (per output, its cause and
its figures against CPU eager and the fp64 golden), **Rounding** (where XLA rounds, the rules the
replay applied and why, what the replays of its program show, the evidence for each cause),
**Per layer** (scan_layers) and **Per module** (a localisation), and **Figures** (tolerances,
errors against the golden, time per stage, and the full explanation). Each section is present
when the report has its figures; the explanation stage puts the document in the report.

Example:
    >>> import torch
    >>> from torch_xla_ext import parity
    >>> report = parity.verify(torch.nn.Linear(4, 4), (torch.randn(2, 4),), dtype="fp32")
    >>> [s.title for s in document(report).sections]
    ['Outputs', 'Rounding', 'Per module', 'Figures']
"""

from __future__ import annotations

import math
from typing import Sequence

from torch_xla_ext.parity import wording
from torch_xla_ext.parity.document import Document, Section, Table
from torch_xla_ext.parity.report import ModuleParity, ParityReport, Verdict

__all__ = ["document", "module_section", "sections"]


def _g(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}"


def document(report: ParityReport) -> Document:
    """The report's lead sentence and sections."""
    return Document(wording.lead(report), tuple(sections(report)))


def _outputs(report: ParityReport) -> Section | None:
    if not report.outputs:
        return None
    rows = []
    for o in report.outputs:
        r = o.xla_vs_cpu
        rows.append((o.path or "<root>", "x".join(map(str, r.shape)) or "scalar", o.cause or "bit-identical",
                     f"{r.mismatched}/{r.total}", f"{r.ulp_histogram.get('0', 0)}/{r.total}", r.max_ulp,
                     _g(o.max_diff_to_scale), _g(o.xla_error), _g(o.cpu_error), o.closer))
    header = ("output", "shape", "cause", "mismatched", "bit-identical", "max ULP", "max diff / scale",
              "XLA err vs fp64", "CPU err vs fp64", "closer to fp64")
    r0 = report.outputs[0].xla_vs_cpu
    paras = [f"XLA vs CPU eager with rtol={r0.rtol:g}, atol={r0.atol:g}; errors are the greatest absolute "
             f"difference from the fp64 golden run (the reference in float64 on the same rounded inputs)."]
    return Section("outputs", "Outputs", tuple(paras), (Table(header, tuple(rows)),))


def _rounding(report: ParityReport, parts: wording.ExplanationParts | None) -> Section | None:
    if not report.outputs:
        return None
    paras = []
    if not any(o.cause == "rounding placement" for o in report.outputs):  # else its paragraph says where
        paras.append(f"Rounding: {wording.describe_rounding(report.rounding_points)}.")
    if report.emulation in ("matches", "differs"):
        bits = "bit for bit" if report.emulation == "matches" else "not bit for bit (a figure, not a cause)"
        emulation = (f"XLA equals the rounded replay of its program within the bound evaluation order allows on "
                     f"every output, {bits}" if report.reproduced else
                     "XLA differs from the rounded replay of its program beyond the bound evaluation order allows "
                     "on some output")
        rules = wording.rules_words(report.rules, report.rules_source)
        if parts is None or rules not in parts.causes:
            paras.append(rules)
    else:
        emulation = f"the replays of XLA's program were {report.emulation}"
    exact = ("the replay without rounding (in f32, far finer than the program's roundings)"
             if report.unrounded_replay == "f32" else "the exact fp64 replay")
    math_words = {"same": f"{exact} matches the fp64 golden: the program is the reference's math",
                  "differs": f"{exact} leaves the fp64 golden: the program is not the reference's math"}.get(
        report.hlo_math, "whether the program is the reference's math is unknown (no replay)")
    paras.append(f"Replays: {emulation}; {math_words}.")
    if parts is not None:
        paras += list(parts.causes)
    tables = []
    replayed = [o for o in report.outputs if o.emulated is not None or o.unrounded is not None]
    yes = {True: "yes", False: "no", None: "-"}
    if replayed:
        tables.append(Table(
            ("output", "XLA - rounded replay", "bound", "within", "bit-equal", "rounded replay err vs fp64",
             "exact replay mismatched vs fp64", "exact replay err", "same math"),
            tuple((o.path or "<root>", _g(o.replay_distance), _g(o.replay_bound), yes[o.reproduced],
                   f"{o.emulated.total - o.emulated.mismatched}/{o.emulated.total}" if o.emulated else "-",
                   _g(o.emulated_error), f"{o.unrounded.mismatched}/{o.unrounded.total}" if o.unrounded else "-",
                   _g(o.unrounded_error), yes[o.same_math])
                  for o in replayed)))
    doubles = [p for p in report.rounding_points if p.after]
    if doubles:
        tables.append(Table(("rounds again at", "op", "type", "after rounding at", "op before"),
                            tuple((p.instruction, p.opcode, p.element_type, p.after, p.after_opcode)
                                  for p in doubles)))
    return Section("rounding", "Rounding", tuple(paras), tuple(tables))


def _layers(report: ParityReport) -> Section | None:
    if not report.layers:
        return None
    rows, marks = [], {}
    for i, l in enumerate(report.layers):
        rows.append((l.index, "yes" if l.scan_vs_loop.passed else "NO", f"{l.xla_vs_cpu.mismatched}/{l.xla_vs_cpu.total}",
                     _g(l.xla_error), _g(l.cpu_error), l.cause or "bit-identical"))
        if l.index == report.first_divergent_layer:
            marks[i] = "first divergent"
        elif l.diverges:
            marks[i] = "diverges"
    first = report.first_divergent_layer
    para = (f"Layer {first} is the first divergent layer." if first is not None else
            "No layer diverges: scan_layers agrees with the loop and every difference from CPU eager is rounding.")
    return Section("layers", "Per layer", (para,), (Table(
        ("layer", "scan = loop", "XLA vs CPU mismatched", "XLA err vs fp64", "CPU err vs fp64", "cause"),
        tuple(rows), marks),))


def module_section(modules: Sequence[ModuleParity], first_divergent: str | None) -> Section:
    """The per-module section from a localisation result (the modules in completion order and the
    name of the first divergent one, as ``report.modules`` / ``report.first_divergent_module``).
    Each module's ``diverges`` flag is the localisation's rule; this only shows it."""
    if not modules:
        return Section("modules", "Per module", ("Not localised: rerun with verify(..., localize=True) "
                                                 "(torch-xla-ext parity --localize) to separate each module's own "
                                                 "error from what it inherited.",))
    rows, marks = [], {}
    for i, m in enumerate(modules):
        ratio = m.own_to_rounding
        rows.append(("  " * m.depth + m.name, _g(m.own_error), _g(m.rounding_level),
                     _g(ratio) if math.isfinite(ratio) else "inf", _g(m.inherited_error), _g(m.total_error)))
        if m.name == first_divergent:
            marks[i] = "first divergent"
        elif m.diverges:
            marks[i] = "diverges"
    if first_divergent is not None:
        m = next(m for m in modules if m.name == first_divergent)
        para = (f"The first divergent module is {m.name}: its own error {_g(m.own_error)} (the module in fp64 on the "
                f"inputs XLA gave it) is {_g(m.own_to_rounding)}x CPU eager's rounding error {_g(m.rounding_level)} "
                f"for the same inputs; it inherited {_g(m.inherited_error)}.")
    else:
        para = "No module's own error is beyond rounding: the outputs' error accumulates from rounding."
    return Section("modules", "Per module", (para, "Completion order (children before their parent); errors are "
                                                   "greatest absolute differences from the fp64 golden."),
                   (Table(("module", "own err", "rounding", "own / rounding", "inherited", "total err"), tuple(rows),
                          marks),))


def _figures(report: ParityReport, parts: wording.ExplanationParts | None) -> Section:
    paras = list(parts.figures) if parts is not None else []
    paras.append(f"Full explanation: {report.explanation}")
    rows = [("dtype", report.dtype), ("rtol", _g(report.rtol) if report.rtol is not None else "dtype default"),
            ("atol", _g(report.atol) if report.atol is not None else "dtype default"),
            ("replays (bit for bit)", report.emulation),
            ("replay reproduces the run within the bound", {True: "yes", False: "no", None: "-"}[report.reproduced]),
            ("rules", report.rules), ("rules from", report.rules_source), ("program math", report.hlo_math)]
    if report.op_audit is not None:
        rows.append(("op audit", wording.audit_figure(report.op_audit)))
    if report.stage:
        rows.append(("stage", report.stage))
    if report.nondeterminism:
        path, r = report.nondeterminism
        rows.append(("CPU eager vs itself", f"{r.mismatched}/{r.total} differ in output {path or '<root>'}"))
    rows += [(f"seconds: {k}", f"{v:.3f}") for k, v in report.seconds.items()]
    return Section("figures", "Figures", tuple(paras), (Table(("figure", "value"), tuple(rows)),))


def sections(report: ParityReport) -> list[Section]:
    """The report's sections, in order (outputs, rounding, per layer, per module, figures)."""
    parts = wording.explain_parts(report) if report.outputs and report.verdict in (Verdict.PASS, Verdict.FAIL) \
        else None
    out = [_outputs(report), _rounding(report, parts), _layers(report)]
    if report.outputs or report.modules:
        out.append(module_section(report.modules, report.first_divergent_module))
    out.append(_figures(report, parts))
    return [s for s in out if s is not None]
