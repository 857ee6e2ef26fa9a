"""A parity report as a document: one lead sentence, then structured sections.

The lead sentence (:func:`torch_xla_ext.parity.explain.lead`) says the verdict, the cause and
what to do. The sections follow in a fixed order, each present when the report has its figures:

* **Outputs**: per output, its cause and its figures against CPU eager and the fp64 golden;
* **Rounding**: where XLA rounds, what the replays of its program show, and the evidence for
  each cause;
* **Per layer** (scan_layers) and **Per module** (a localisation: fed by the localisation result
  the report carries, ``report.modules`` and ``report.first_divergent_module``);
* **Figures**: tolerances, errors against the golden, time per stage, and the full explanation.

One structure (:func:`sections`) renders as plain text (``str(report)``), Markdown
(:func:`to_markdown`), JSON (``report.to_dict()["sections"]``) and HTML
(:mod:`torch_xla_ext.parity.html`), so the four never disagree.

Example:
    >>> import torch
    >>> from torch_xla_ext import parity
    >>> print(to_markdown(parity.verify(torch.nn.Linear(4, 4), (torch.randn(2, 4),), dtype="fp32")).splitlines()[0])
    # Parity: PASS (float32)
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any, Sequence

from torch_xla_ext.parity import explain as _explain
from torch_xla_ext.parity.verdicts import Verdict

if TYPE_CHECKING:  # the report renders through this module: types only, no import cycle
    from torch_xla_ext.parity.report import ModuleParity, ParityReport

__all__ = ["Section", "Table", "lead", "module_section", "sections", "to_markdown", "to_text"]

# Rows of long tables shown in text and Markdown (JSON and HTML keep them all).
_ROWS = 40


@dataclasses.dataclass(frozen=True)
class Table:
    header: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    # Row index -> a mark ("first divergent", "diverges") that renderers highlight.
    marks: dict[int, str] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"header": list(self.header), "rows": [[_jsonable(c) for c in r] for r in self.rows],
                "marks": {str(k): v for k, v in self.marks.items()}}


@dataclasses.dataclass(frozen=True)
class Section:
    key: str  # "outputs", "rounding", "layers", "modules", "figures"
    title: str
    paragraphs: tuple[str, ...] = ()
    tables: tuple[Table, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "title": self.title, "paragraphs": list(self.paragraphs),
                "tables": [t.to_dict() for t in self.tables]}


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


def _g(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}"


def lead(report: ParityReport) -> str:
    """The report's one-sentence lead (verdict, cause, what to do)."""
    return _explain.lead(report)


def _parts(report: ParityReport) -> _explain.ExplanationParts | None:
    if not report.outputs or report.verdict not in (Verdict.PASS, Verdict.FAIL):
        return None
    return _explain.explain_parts(report.verdict, report.outputs, report.emulation, report.rounding_points,
                                  report.dtype, unrounded=report.unrounded_replay or "f64")


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


def _rounding(report: ParityReport, parts: _explain.ExplanationParts | None) -> Section | None:
    if not report.outputs:
        return None
    paras = []
    if not any(o.cause == "rounding placement" for o in report.outputs):  # else its paragraph says where
        paras.append(f"Rounding: {_explain.describe_rounding(report.rounding_points)}.")
    emulation = {"matches": "XLA equals the rounded replay of its program bit for bit on every output",
                 "differs": "XLA differs from the rounded replay of its program on some output"}.get(
        report.emulation, f"the replays of XLA's program were {report.emulation}")
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
    if replayed:
        tables.append(Table(
            ("output", "XLA = rounded replay", "rounded replay err vs fp64", "exact replay mismatched vs fp64",
             "exact replay err", "same math"),
            tuple((o.path or "<root>",
                   f"{o.emulated.total - o.emulated.mismatched}/{o.emulated.total}" if o.emulated else "-",
                   _g(o.emulated_error), f"{o.unrounded.mismatched}/{o.unrounded.total}" if o.unrounded else "-",
                   _g(o.unrounded_error), {True: "yes", False: "no", None: "-"}[o.same_math])
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


def _figures(report: ParityReport, parts: _explain.ExplanationParts | None) -> Section:
    paras = list(parts.figures) if parts is not None else []
    paras.append(f"Full explanation: {report.explanation}")
    rows = [("dtype", report.dtype), ("rtol", _g(report.rtol) if report.rtol is not None else "dtype default"),
            ("atol", _g(report.atol) if report.atol is not None else "dtype default"),
            ("replays", report.emulation), ("program math", report.hlo_math)]
    if report.stage:
        rows.append(("stage", report.stage))
    if report.nondeterminism:
        path, r = report.nondeterminism
        rows.append(("CPU eager vs itself", f"{r.mismatched}/{r.total} differ in output {path or '<root>'}"))
    rows += [(f"seconds: {k}", f"{v:.3f}") for k, v in report.seconds.items()]
    return Section("figures", "Figures", tuple(paras), (Table(("figure", "value"), tuple(rows)),))


def sections(report: ParityReport) -> list[Section]:
    """The report's sections, in order (outputs, rounding, per layer, per module, figures)."""
    parts = _parts(report)
    out = [_outputs(report), _rounding(report, parts), _layers(report)]
    if report.outputs or report.modules:
        out.append(module_section(report.modules, report.first_divergent_module))
    out.append(_figures(report, parts))
    return [s for s in out if s is not None]


def _md_cell(v: Any) -> str:
    return str(v).replace("|", "\\|").replace("\n", " ")


def _md_table(t: Table) -> list[str]:
    rows = t.rows[:_ROWS]
    lines = ["| " + " | ".join(t.header) + " |", "|" + "---|" * len(t.header)]
    for i, r in enumerate(rows):
        cells = [_md_cell(c) for c in r]
        if i in t.marks:
            cells[0] = f"**{cells[0]}** ({t.marks[i]})"
        lines.append("| " + " | ".join(cells) + " |")
    if len(t.rows) > _ROWS:
        lines.append(f"\n({len(t.rows) - _ROWS} more rows in the JSON and HTML reports)")
    return lines


def to_markdown(report: ParityReport) -> str:
    """The report as Markdown: a title with the verdict, the lead sentence, then the sections.

    Example:
        >>> import torch
        >>> from torch_xla_ext import parity
        >>> report = parity.verify(torch.nn.Linear(4, 4), (torch.randn(2, 4),), dtype="fp32")
        >>> with open("parity.md", "w") as f:
        ...     n = f.write(to_markdown(report))
    """
    lines = [f"# Parity: {report.verdict.value} ({report.dtype})", "", f"**{lead(report)}**"]
    for s in sections(report):
        lines += ["", f"## {s.title}"]
        for p in s.paragraphs:
            lines += ["", p]
        for t in s.tables:
            lines += [""] + _md_table(t)
    return "\n".join(lines) + "\n"


def _text_table(t: Table) -> list[str]:
    rows = [tuple(str(c) for c in r) for r in t.rows[:_ROWS]]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(t.header)]
    lines = ["  " + "  ".join(h.ljust(w) for h, w in zip(t.header, widths)).rstrip()]
    for i, r in enumerate(rows):
        lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()
                     + (f"  <- {t.marks[i]}" if i in t.marks else ""))
    if len(t.rows) > _ROWS:
        lines.append(f"  ({len(t.rows) - _ROWS} more rows: report.to_dict()['sections'])")
    return lines


def to_text(report: ParityReport) -> str:
    """``str(report)``: the verdict line, the lead sentence, then the sections as text."""
    lines = [f"Parity verdict: {report.verdict.value} ({report.dtype}) on XLA:{report.device}", "", lead(report)]
    for s in sections(report):
        lines += ["", f"== {s.title} =="]
        for p in s.paragraphs:
            lines.append(p)
        for t in s.tables:
            lines += _text_table(t)
    return "\n".join(lines)
