"""The doctor's compiles section (torchax): the model's compiled forward called ``steps`` times
under ``torch-xla-ext trace`` (:mod:`torch_xla_ext.doctor.torchax_steps`, in its own process): what
JAX compiled, for which function and at which call, what ran op by op, and whether it stopped
compiling; the trace's report.md, report.html and Perfetto file sit in ``trace/``."""

from __future__ import annotations

import os
import subprocess
import sys

from torch_xla_ext.doctor.report import SectionFailed

__all__ = ["TIMEOUT_S", "compiles_section"]

TIMEOUT_S = 900  # the traced run: importing torchax and JAX, one compile, ``steps`` calls


def compiles_section(model_spec: str, out_dir: str, steps: int) -> tuple[str, str, dict]:
    # each section imports its component: one this stack refuses is that section's finding
    from torch_xla_ext.trace.report import load as trace_report

    trace_dir = os.path.join(out_dir, "trace")
    command = [sys.executable, "-m", "torch_xla_ext", "trace", "--overwrite", "--out", trace_dir, "--",
               sys.executable, "-m", "torch_xla_ext.doctor.torchax_steps", model_spec, str(steps)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S)
    report = trace_report.read_report(os.path.join(trace_dir, "report.json"))
    fns = report.functions
    compiled = sum(f.compiles for f in fns)
    op_by_op = report.op_by_op
    parts = [f"{compiled} compile(s) of {len(fns)} compiled function(s) over {steps} call(s)"]
    parts += [f"{f.name}: {f.steady}" for f in fns if f.steady]
    if op_by_op:
        parts.append(f"{sum(g.compiles for g in op_by_op)} computation(s) for ops run op by op at "
                     f"{len({g.site for g in op_by_op})} line(s)")
    if report.findings:
        parts.append(f"{len(report.findings)} finding(s): " + "; ".join(f"{x.kind} at {x.site}" for x in report.findings))
    summary = "; ".join(parts)
    with open(os.path.join(trace_dir, "report.md")) as f:
        md = f.read()
    md += ("\n\nFull report: [trace/report.html](trace/report.html); Perfetto/Chrome trace in `trace/`. "
           f"Traced: `{' '.join(command[6:])}`")
    data = {"trace_dir": "trace", "exit_code": proc.returncode, "compiles": compiled,
            "functions": [{"name": f.name, "calls": f.calls, "compiles": f.compiles, "steady": f.steady} for f in fns],
            "op_by_op_compiles": sum(g.compiles for g in op_by_op), "findings": len(report.findings)}
    if proc.returncode != 0 or report.findings:  # the model's loop failed or read a traced value
        tail = (proc.stderr or "").strip().splitlines()[-20:]
        raise SectionFailed(summary + (f"; the traced run exited {proc.returncode}" if proc.returncode else ""),
                            md + ("\n\n```\n" + "\n".join(tail) + "\n```" if tail else ""), data)
    return summary, md, data
