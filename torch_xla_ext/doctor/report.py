"""The doctor's report: one :class:`Section` per component run, their statuses, the report's
files and its exit code. A section whose check fails on the model raises :class:`SectionFailed`
with what it found; the runner (:mod:`.runner`) turns every outcome into a Section.

Example:
    >>> r = DoctorReport("m", "out", [Section("parity", "finding", "bf16 FAIL", "...", {}, 1.0)], [])
    >>> r.ok, r.exit_code
    (False, 0)
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from torch_xla_ext import _device, _json

__all__ = ["EXIT_BAD_INPUT", "EXIT_BUG", "EXIT_REPORT_WRITTEN", "STATUSES", "DoctorReport", "Section",
           "SectionFailed", "json_safe"]


class SectionFailed(Exception):
    """Raised by a section whose check failed on the model (a parity exception, an export beyond
    tolerance, a graph-break mode whose backend failed): the summary, markdown and data are
    written as they are, with the section marked as a finding. The report is complete, so the
    command still exits 0."""

    def __init__(self, summary: str, markdown: str, data: dict[str, Any]):
        super().__init__(summary)
        self.summary, self.markdown, self.data = summary, markdown, data


# A section's status: "ok"; "finding" (it produced its report, and the report says something about
# the model failed: a finding, not an error); "error" (it could not produce its report: a bug of
# torch_xla_ext or of a library, with the traceback; the command exits 1).
STATUSES = ("ok", "finding", "error")
# Exit codes of `torch-xla-ext doctor`: the report was written (findings included); bad input
# (the --model spec or a flag, named in the message); a section could not produce its report.
EXIT_REPORT_WRITTEN, EXIT_BUG, EXIT_BAD_INPUT = 0, 1, 2


@dataclasses.dataclass
class Section:
    name: str
    status: str
    summary: str
    markdown: str
    data: dict[str, Any]
    seconds: float

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclasses.dataclass
class DoctorReport:
    model: str
    out_dir: str
    sections: list[Section]
    files: list[str]
    plots_skipped: list[str] = dataclasses.field(default_factory=list)  # without matplotlib

    @property
    def ok(self) -> bool:
        """Every section ran and found nothing wrong."""
        return all(s.ok for s in self.sections)

    @property
    def exit_code(self) -> int:
        """0 when every section produced its report (findings included), 1 when one could not
        (a bug: its traceback is in the report)."""
        return EXIT_BUG if any(s.status == "error" for s in self.sections) else EXIT_REPORT_WRITTEN

    def summary(self) -> str:
        lines = [f"torch-xla-ext doctor: {self.model}"]
        mark = {"ok": "ok ", "finding": "FND", "error": "ERR"}
        lines += [f"  {mark[s.status]} {s.name:13s} {s.summary}" for s in self.sections]
        lines += [f"  note: {m}" for m in self.plots_skipped]
        lines.append(f"  report: {os.path.join(self.out_dir, 'report.md')}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "device": _device.current(), "ok": self.ok, "exit_code": self.exit_code,
                "files": self.files, "plots_skipped": self.plots_skipped,
                "sections": {s.name: {"ok": s.ok, "status": s.status, "summary": s.summary,
                                      "seconds": round(s.seconds, 3), **s.data}
                             for s in self.sections}}

    def to_json(self, **kwargs: Any) -> str:
        return _json.dumps(self.to_dict(), **kwargs)

    def to_markdown(self) -> str:
        out = [f"# torch-xla-ext doctor: {self.model}", "", f"Ran on XLA:{_device.current()}.", "",
               "| section | status | finding |", "|---|---|---|"]
        out += [f"| {s.name} | {s.status} | {s.summary} |" for s in self.sections]
        if any(s.status == "finding" for s in self.sections):
            out += ["", "A *finding* is about the model on this stack (a mode or a check that failed on it); "
                    "the section still produced its report. An *error* is a bug of torch_xla_ext or a library."]
        if self.plots_skipped:
            out += ["", "Plots skipped (every number above is still computed):", ""]
            out += [f"- {m}" for m in self.plots_skipped]
        for s in self.sections:
            out += ["", f"## {s.name}", "", s.markdown.rstrip()]
        return "\n".join(out) + "\n"


def json_safe(obj: Any) -> Any:
    """``obj`` as strict JSON values under the package's one JSON rule (torch_xla_ext/_json.py);
    anything JSON has no type for is its ``str``."""
    return _json.encode(obj, default=str)
