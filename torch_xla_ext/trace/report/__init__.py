"""The report over a trace directory's rank files: :func:`write` renders ``report.json``,
``report.md``, ``report.html`` and ``trace.perfetto.json`` and returns the report (plain data,
the schema of docs/trace.md); ``build.build_dir`` builds it without writing."""

from __future__ import annotations

import os
from typing import Any

from torch_xla_ext import _json
from torch_xla_ext.trace.report import html, perfetto, render
from torch_xla_ext.trace.report.build import build_dir
from torch_xla_ext.trace.report.load import load_dir

__all__ = ["FILES", "build_dir", "write"]

FILES = ("report.json", "report.md", "report.html", "trace.perfetto.json")


def write(directory: str) -> dict[str, Any]:
    """Builds the report of ``directory`` and writes its files there; returns it."""
    report = build_dir(directory)
    outputs = {
        "report.json": lambda: _json.dumps(report, indent=1),
        "report.md": lambda: render.to_markdown(report),
        "report.html": lambda: html.render(report),
        "trace.perfetto.json": lambda: _json.dumps(perfetto.events(load_dir(directory))),
    }
    for name, make in outputs.items():
        tmp = os.path.join(directory, name + ".tmp")
        with open(tmp, "w") as f:
            f.write(make())
        os.replace(tmp, os.path.join(directory, name))
    return report
