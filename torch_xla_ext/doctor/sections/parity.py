"""The doctor's parity section: ``parity.verify`` in fp32 and bf16 (bf16 localised, with its
program for Model Explorer), ULP histograms and the per-module plot."""

from __future__ import annotations

import os

import torch

from torch_xla_ext import _frontend, _plot
from torch_xla_ext.doctor.report import SectionFailed

__all__ = ["parity_section"]


def parity_section(model_fn, inputs, kwargs, out_dir, *, frontend: str = _frontend.DEFAULT) -> tuple[str, str, dict]:
    # each section imports its component: one this stack refuses is that section's finding
    from torch_xla_ext import parity

    reports = {}
    for dt in ("fp32", "bf16"):
        model = model_fn()
        # bf16 also localises: which module's own error is beyond rounding, if any.
        localize = dt == "bf16" and isinstance(model, torch.nn.Module)
        # bf16 also writes its program and per-op error for Model Explorer (parity/explorer.py).
        explorer_dir = os.path.join(out_dir, "explorer") if dt == "bf16" else None
        # rules="auto": the device's own matmul precision (a GPU's TF32, a TPU's bf16 passes; XLA:CPU's on a CPU).
        reports[dt] = parity.verify(model, inputs, kwargs, dtype=dt, localize=localize, explorer_dir=explorer_dir,
                                    rules="auto", frontend=frontend)
    md, data = [], {}
    for dt, r in reports.items():
        md += [f"### {dt}: {r.verdict.value}", "", "```", str(r), "```", ""]
        data[dt] = r.to_dict()
    if _plot_ulps(reports, os.path.join(out_dir, "numerics_ulp.png")):
        md.append("![ULP distances of XLA vs CPU eager](numerics_ulp.png)")
    bf = reports["bf16"]
    if bf.modules and parity.plot_modules(bf, os.path.join(out_dir, "parity_modules.png")):
        md += ["", "![bf16 per-module errors by depth](parity_modules.png)"]
    if os.path.isfile(os.path.join(out_dir, "explorer", "program.mlir")):
        from torch_xla_ext.parity import explorer  # the section imports its component (see above)

        md += ["", "bf16 per-op error in Model Explorer (`pip install ai-edge-model-explorer`):", "",
               f"    {explorer.open_command(os.path.join(out_dir, 'explorer'))}"]

    def words(r) -> str:
        causes = sorted({o.cause for o in r.outputs if o.cause})
        return r.verdict.value + (f" ({', '.join(causes)})" if causes else "")

    summary = ", ".join(f"{dt} {words(r)}" for dt, r in reports.items())
    if bf.outputs:
        summary += f"; bf16 replay {bf.emulation.split(':')[0]}"
    if bf.modules:
        summary += f"; first divergent module: {bf.first_divergent_module or 'none'}"
    failed = [dt for dt, r in reports.items() if r.verdict == parity.Verdict.EXCEPTION]
    if failed:  # the model did not run: an error row, with the exception in the report
        raise SectionFailed(summary, "\n".join(md), data)
    return summary, "\n".join(md), data


def _plot_ulps(reports, path: str) -> str | None:
    """The ULP histogram PNG per dtype; None (nothing written) without matplotlib."""
    plt, _why = _plot.pyplot(os.path.basename(path))
    if plt is None:
        return None
    fig, axes = plt.subplots(1, len(reports), figsize=(5 * len(reports), 3.2))
    for ax, (dt, r) in zip(axes, reports.items()):
        if not r.outputs:
            ax.set_title(f"{dt}: {r.verdict.value} (no outputs)")
            ax.axis("off")
            continue
        # The output with the most mismatches (the first when none mismatch).
        o = max(r.outputs, key=lambda o: o.xla_vs_cpu.mismatched)
        hist = o.xla_vs_cpu.ulp_histogram
        labels = [k for k, v in hist.items() if v] or ["0"]
        ax.bar(labels, [hist.get(k, 0) for k in labels], color="#4c72b0")
        ax.set_yscale("log")
        ax.tick_params(axis="x", labelrotation=40)
        ax.set_title(f"{dt}: {o.path or 'output'} vs CPU eager, {r.verdict.value}", fontsize=9)
        ax.set_xlabel(f"ULP distance (in {o.xla_vs_cpu.ulp_dtype})")
        ax.set_ylabel("elements")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
