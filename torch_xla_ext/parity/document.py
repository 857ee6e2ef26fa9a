"""A report as a document: one lead sentence, then sections of paragraphs and tables.

Plain data: the explanation stage writes it from a report's figures (:mod:`.sections`), the report
holds it, and its renderings read it: plain text (``str(report)``) and Markdown here, JSON through
``report.to_dict()``, HTML in :mod:`.html`. Nothing here knows what a parity report is.

Example:
    >>> doc = Document("PASS: all equal.", (Section("figures", "Figures", ("One paragraph.",)),))
    >>> print(doc.markdown("Parity"))
    # Parity
    <BLANKLINE>
    **PASS: all equal.**
    <BLANKLINE>
    ## Figures
    <BLANKLINE>
    One paragraph.
    <BLANKLINE>
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

__all__ = ["Document", "Section", "Table"]

# Rows of long tables shown in text and Markdown (JSON and HTML keep them all).
ROWS = 40


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


@dataclasses.dataclass(frozen=True)
class Document:
    """The lead sentence and the sections, in order."""

    lead: str
    sections: tuple[Section, ...] = ()

    def markdown(self, title: str) -> str:
        """A ``#`` title, the lead sentence in bold, then each section (long tables cut at ``ROWS``)."""
        lines = [f"# {title}", "", f"**{self.lead}**"]
        for s in self.sections:
            lines += ["", f"## {s.title}"]
            for p in s.paragraphs:
                lines += ["", p]
            for t in s.tables:
                lines += [""] + _md_table(t)
        return "\n".join(lines) + "\n"

    def text(self, heading: str) -> str:
        """``heading``, the lead sentence, then each section as ``== title ==`` and aligned tables."""
        lines = [heading, "", self.lead]
        for s in self.sections:
            lines += ["", f"== {s.title} =="]
            lines += list(s.paragraphs)
            for t in s.tables:
                lines += _text_table(t)
        return "\n".join(lines)


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


def _md_cell(v: Any) -> str:
    return str(v).replace("|", "\\|").replace("\n", " ")


def _md_table(t: Table) -> list[str]:
    lines = ["| " + " | ".join(t.header) + " |", "|" + "---|" * len(t.header)]
    for i, r in enumerate(t.rows[:ROWS]):
        cells = [_md_cell(c) for c in r]
        if i in t.marks:
            cells[0] = f"**{cells[0]}** ({t.marks[i]})"
        lines.append("| " + " | ".join(cells) + " |")
    if len(t.rows) > ROWS:
        lines.append(f"\n({len(t.rows) - ROWS} more rows in the JSON and HTML reports)")
    return lines


def _text_table(t: Table) -> list[str]:
    rows = [tuple(str(c) for c in r) for r in t.rows[:ROWS]]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(t.header)]
    lines = ["  " + "  ".join(h.ljust(w) for h, w in zip(t.header, widths)).rstrip()]
    for i, r in enumerate(rows):
        lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()
                     + (f"  <- {t.marks[i]}" if i in t.marks else ""))
    if len(t.rows) > ROWS:
        lines.append(f"  ({len(t.rows) - ROWS} more rows: report.to_dict()['sections'])")
    return lines
