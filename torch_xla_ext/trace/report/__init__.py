"""The report over a trace directory's rank files: :func:`write` renders ``report.json``,
``report.md``, ``report.html`` and ``trace.perfetto.json`` and returns the report as plain data
(the schema of docs/trace.md); ``build.build_dir`` builds it as typed objects
(``model.Report``) without writing."""

from __future__ import annotations

import os
from typing import Any

from torch_xla_ext import _json
from torch_xla_ext.trace.report import html, perfetto, render
from torch_xla_ext.trace.report.build import build
from torch_xla_ext.trace.report.load import load_dir, load_run, startup_errors
from torch_xla_ext.trace.report.model import Report

__all__ = ["FILES", "Report", "build_dir", "write"]

FILES = ("report.json", "report.md", "report.html", "trace.perfetto.json")


def build_dir(directory: str) -> Report:
    """The report of a trace directory (its rank files, run.json and start-up errors)."""
    return _build(directory, load_dir(directory))


def _build(directory: str, traces: list[Any]) -> Report:
    run, run_problem = load_run(directory)
    return build(traces, run=run, directory=directory, startup=startup_errors(directory),
                 problems=[run_problem] if run_problem else [])


def write(directory: str) -> dict[str, Any]:
    """Builds the report of ``directory`` and writes its files there; returns it as plain data."""
    traces = load_dir(directory)
    report = _build(directory, traces)
    outputs = {
        "report.json": lambda: _json.dumps(report, indent=1),
        "report.md": lambda: render.to_markdown(report),
        "report.html": lambda: html.render(report),
        "trace.perfetto.json": lambda: _json.dumps(perfetto.events(traces)),
    }
    for name, make in outputs.items():
        tmp = os.path.join(directory, name + ".tmp")
        with open(tmp, "w") as f:
            f.write(make())
        os.replace(tmp, os.path.join(directory, name))
    return _json.encode(report)
