"""The doctor's graph_breaks section: ``graph_breaks.compare``, lazy vs dynamo, each in its own
process, with its plot, HTML report and Perfetto trace."""

from __future__ import annotations

import os

from torch_xla_ext.doctor.report import SectionFailed

__all__ = ["graph_breaks_section"]


def graph_breaks_section(model_spec, out_dir, progress, steps) -> tuple[str, str, dict]:
    # each section imports its component: one this stack refuses is that section's finding
    from torch_xla_ext import graph_breaks

    cmp = graph_breaks.compare(model_spec, modes=("lazy", "dynamo"), warmup=2, steps=steps, progress=progress)
    plotted = cmp.plot(os.path.join(out_dir, "graph_breaks.png"))
    cmp.write_html(os.path.join(out_dir, "graph_breaks.html"))
    graph_breaks.write_trace(os.path.join(out_dir, "graph_breaks.trace.json"),
                             [cmp.modes[m].report for m in cmp.modes], labels=list(cmp.modes))
    lazy, dyn = cmp.modes["lazy"], cmp.modes["dynamo"]
    parts = []
    if dyn.ok:
        parts.append(f"dynamo: {dyn.report.fx_graphs} graphs, {dyn.report.num_fx_breaks} breaks, "
                     f"{dyn.report.xla_partitions} XLA partitions")
    for m, f in cmp.failures.items():
        where = f" at {f['aten_op']}" if f.get("aten_op") else ""
        src = f.get("source")
        where += f" ({os.path.basename(src['file'])}:{src['line']})" if src else ""
        parts.append(f"{m} failed{where}: {f['exception']} [raised by {f['raised_by'].split(' (')[0]}]")
    parts.append("; ".join(f"{m.median_ms:.1f} ms/step {m.mode}" for m in (lazy, dyn) if m.ok) or "no mode ran")
    summary = "; ".join(parts)
    md = (cmp.to_markdown() + ("\n\n![graph breaks, lazy vs dynamo](graph_breaks.png)" if plotted else "") + "\n\n"
          "Full report (structured breaks, per compile id view, timeline): [graph_breaks.html](graph_breaks.html); "
          "Perfetto/Chrome trace: `graph_breaks.trace.json`")
    if cmp.failures:  # a mode that failed is a finding about the model; the other mode's figures stay
        raise SectionFailed(summary, md, cmp.to_dict(timeline=False))
    return summary, md, cmp.to_dict(timeline=False)
