"""Stage 6, the explanation: the report, from the run record.

Each output's cause follows from its figures (:mod:`..causes`), the verdict from the comparator,
and the words from both (:mod:`..wording`); the document (lead sentence and sections,
:mod:`..sections`) is written last, from the finished report. A run that ended early gets its
own verdict: EXCEPTION (the user's code raised at a stage), NONDETERMINISTIC_REFERENCE, or FAIL
for outputs of other shapes.

Example:
    >>> import torch
    >>> from torch_xla_ext import parity
    >>> r = parity.verify(torch.nn.Linear(4, 4), (torch.randn(2, 4),), dtype="fp32")
    >>> r.document.lead == r.summary and r.explanation.startswith(r.summary)
    True
"""

from __future__ import annotations

import dataclasses

from torch_xla_ext import _device
from torch_xla_ext.parity import sections, wording
from torch_xla_ext.parity.causes import output_cause
from torch_xla_ext.parity.record import RunRecord
from torch_xla_ext.parity.report import ParityReport, Verdict

__all__ = ["finished", "report", "unfinished"]


def report(record: RunRecord) -> ParityReport:
    """The report of a finished run (:func:`~torch_xla_ext.parity.pipeline.run`'s record)."""
    return finished(unfinished(record))


def finished(report: ParityReport) -> ParityReport:
    """``report`` with its document (lead sentence and sections) written from its figures."""
    return dataclasses.replace(report, document=sections.document(report))


def _seconds(record: RunRecord) -> dict[str, float]:
    """Each stage's seconds (the runner's), the replays' steps (converting, compiling and running
    each replay) right after the replays' own."""
    steps = record.replayed.seconds if record.replayed is not None else {}
    out: dict[str, float] = {}
    for key, value in record.seconds.items():
        out[key] = value
        if key == "replays":
            out.update(steps)
    for key, value in steps.items():  # a step outside the replays' stage (the f64 confirmation)
        out.setdefault(key, value)
    if "total" in out:
        out["total"] = out.pop("total")
    return out


def unfinished(record: RunRecord) -> ParityReport:
    """The report's figures and explanation, without its document (a caller that adds to the
    report, such as scan_layers' layers, finishes it)."""
    r = record.request
    base = dict(dtype=r.dtype_name, rtol=r.rtol, atol=r.atol, seconds=_seconds(record), frontend=r.frontend,
                device=record.device or _device.current())
    if record.failure is not None:
        f = record.failure
        text = f"{type(f.error).__name__}: {f.error}"
        return ParityReport(Verdict.EXCEPTION, wording.exception_words(f.stage, text), exception=text, stage=f.stage,
                            **base)
    if record.nondeterminism is not None:
        path, cmp = record.nondeterminism
        return ParityReport(Verdict.NONDETERMINISTIC_REFERENCE, wording.nondeterminism_words(r.seed, path, cmp),
                            nondeterminism=record.nondeterminism, stage="CPU eager", **base)
    if record.shapes_differ is not None:
        return ParityReport(Verdict.FAIL, wording.shapes_words(record.shapes_differ), stage="XLA", **base)
    replayed = record.replayed
    program = replayed.program if replayed is not None else None
    points = program.rounding_points if program is not None else ()
    audit = record.op_audit
    lowering = audit is not None and audit.found is not None  # the op audit blamed an op's lowering
    outputs = [dataclasses.replace(o, cause=output_cause(o, narrow=bool(points), lowering=lowering))
               for o in record.outputs]
    status, hlo_math, reproduced, unrounded = "unavailable: emulate=False", "unavailable", None, None
    if replayed is not None:
        status = replayed.status
        if status == "ok":
            status = "matches" if all(o.emulated.mismatched == 0 for o in outputs) else "differs"
            hlo_math = "same" if all(o.same_math for o in outputs) else "differs"
            reproduced = all(o.reproduced for o in outputs)
            unrounded = replayed.precision
    verdict = Verdict.of(outputs)
    modules = record.modules
    rules = replayed.rules if replayed is not None else None
    report = ParityReport(
        verdict, "", outputs=tuple(outputs), emulation=status, hlo_math=hlo_math, rounding_points=tuple(points),
        hlo_text=program.text if program is not None else None, unrounded_replay=unrounded, reproduced=reproduced,
        rules=rules.name if rules is not None else "xla-cpu", rules_source=rules.source if rules is not None else "given",
        modules=modules.modules if modules is not None else (),
        first_divergent_module=modules.first.name if modules is not None and modules.first else None,
        narrowed=record.xla.wide.narrowed if record.xla.wide is not None else (), op_audit=audit, **base)
    words = [wording.explain(report)]
    if modules is not None:
        words.append(wording.modules_words(modules.modules, modules.first, modules.floor_ulps))
    words += record.notes
    return dataclasses.replace(report, explanation=" ".join(w for w in words if w))
