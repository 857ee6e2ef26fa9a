"""Running the doctor: which sections run on which model, each timed and turned into a
:class:`~torch_xla_ext.doctor.report.Section` whatever happens, then report.md and report.json.
"""

from __future__ import annotations

import os
import time
import traceback
from typing import Any, Callable

import torch

from torch_xla_ext import _factory, _frontend, _plot, _versions
from torch_xla_ext.doctor.block import example_inputs, example_model, export_variant
from torch_xla_ext.doctor.plans import EXAMPLE_NAME, PLANS, Target
from torch_xla_ext.doctor.report import DoctorReport, Section, SectionFailed, json_safe
from torch_xla_ext.errors import InternalError, TorchXlaExtError, first_line

__all__ = ["run"]


def _made(spec: str) -> _factory.Made:
    """The --model factory's ``(model, args, kwargs)`` (the one contract of ``_factory``), with every
    tensor moved to the CPU (the doctor moves them to each device itself). Every section uses the
    module, args and kwargs; tensors may sit in tuples, lists and dicts, next to constants."""
    made = _factory.load_model(spec)

    def cpu(v: Any, where: str) -> Any:
        if isinstance(v, torch.Tensor):
            return v.cpu()
        if isinstance(v, (bool, int, float, str)) or v is None:
            return v
        if isinstance(v, (tuple, list)):
            return type(v)(cpu(x, f"{where}[{i}]") for i, x in enumerate(v))
        if isinstance(v, dict):
            return {k: cpu(x, f"{where}[{k!r}]") for k, x in v.items()}
        raise _factory.FactorySpecError(
            f"--model: {spec}() {where} is a {type(v).__name__}, not a torch.Tensor or a constant")

    return _factory.Made(made.model, tuple(cpu(t, f"args[{i}]") for i, t in enumerate(made.args)),
                         {k: cpu(v, f"kwargs[{k!r}]") for k, v in made.kwargs.items()})


def run(out_dir: str = "doctor-report", *, model: str | None = None, steps: int = 5,
        frontend: str = _frontend.DEFAULT, progress: Callable[[str], None] | None = None) -> DoctorReport:
    """Runs every section ``frontend`` has (:mod:`.plans`) on the embedded example (or a
    ``module:factory`` returning ``(nn.Module, args)`` or ``(nn.Module, args, kwargs)``) and writes
    report.md, report.json, PNGs and bundle/ under ``out_dir``.
    A section whose check fails on the model is a *finding* (its report is kept, e.g. a graph-break
    mode whose backend failed, named by node, op, source line and whose code raised); a section
    that cannot produce its report is an *error*; the others still run either way.
    ``report.exit_code`` is what the command returns (0 report written, 1 a section's error).
    An unknown ``frontend`` is an UnknownFrontendError; a frontend whose stack is missing an
    UnsupportedStackError naming the install line, both before anything runs."""
    frontend = _frontend.check(frontend)
    _versions.require(f"doctor.{frontend}")
    progress = progress or (lambda s: None)
    if model is None:
        target = Target(EXAMPLE_NAME, example_model, example_inputs(), {}, lambda: export_variant(example_model()),
                        "torch_xla_ext.doctor:example", block=example_model())
    else:
        made = _made(model)  # fail early, naming the spec
        # graph-break and trace workers (fresh processes) call the factory themselves
        target = Target(model, lambda: _made(model).model, made.args, made.kwargs, lambda: _made(model).model, model)
    os.makedirs(out_dir, exist_ok=True)
    plan = PLANS[frontend](target, out_dir, steps, progress)

    sections = []
    plots_skipped: list[str] = []
    _plot.take_skipped()  # only what this run skips
    for i, (sec, fn) in enumerate(plan, 1):
        progress(f"[{i}/{len(plan)}] {sec} ...")
        t0 = time.perf_counter()
        try:
            summary, md, data = fn()
            status = "ok"
        except SectionFailed as f:  # the check failed on the model; its figures stay in the report
            summary, md, data, status = f.summary, f.markdown, f.data, "finding"
        except Exception as e:
            # The others still run. A typed error of ours (not an InternalError) is the component
            # naming what in this model it cannot handle: a finding. Anything else is a bug of
            # ours or of a library: an error, with its traceback, and the command exits 1.
            finding = isinstance(e, TorchXlaExtError) and not isinstance(e, InternalError)
            summary = first_line(e, with_type=True)
            if not finding:
                summary = f"unexpected {summary}"
            md = "```\n" + traceback.format_exc() + "```"
            data = {"error": summary, "error_type": f"{type(e).__module__}.{type(e).__qualname__}",
                    "code": getattr(e, "code", None)}
            status = "finding" if finding else "error"
        dt = time.perf_counter() - t0
        skipped = _plot.take_skipped()
        if skipped:
            md = md.rstrip() + "\n\n" + "\n".join(f"> {m}" for m in skipped)
            data = {**data, "plots_skipped": skipped}
            plots_skipped += skipped
            for m in skipped:
                progress(f"[{i}/{len(plan)}] {sec}: {m}")
        progress(f"[{i}/{len(plan)}] {sec}: {summary} ({dt:.1f} s)")
        sections.append(Section(sec, status, summary, md, json_safe(data), dt))

    files = sorted(os.path.relpath(os.path.join(d, f), out_dir) for d, _, fs in os.walk(out_dir) for f in fs)
    files = sorted(set(files) | {"report.md", "report.json"})
    report = DoctorReport(target.name, out_dir, sections, files, plots_skipped)
    with open(os.path.join(out_dir, "report.md"), "w") as f:
        f.write(report.to_markdown())
    with open(os.path.join(out_dir, "report.json"), "w") as f:
        f.write(report.to_json(indent=2))
    return report
