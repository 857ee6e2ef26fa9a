"""The per-module localisation as a picture: each module call's own error against its rounding
level, and the greatest own/rounding ratio by module depth (a renderer of ``report.modules``).

Example:
    >>> import torch
    >>> from torch_xla_ext import parity
    >>> model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16))
    >>> plot_modules(parity.verify(model, (torch.randn(2, 16),), dtype="bf16", localize=True), "modules.png")
    'modules.png'
"""

from __future__ import annotations

import os

from torch_xla_ext import _plot
from torch_xla_ext.parity.errors import ParityError, ParityTypeError
from torch_xla_ext.parity.report import ParityReport

__all__ = ["plot_modules"]


def plot_modules(report: ParityReport, path: str) -> str | None:
    """A PNG of each module's errors by module depth (left: own error vs the rounding level per
    module call in completion order; right: own/rounding ratio by depth). Returns ``path``, or
    None (nothing written, the skip recorded by ``torch_xla_ext._plot``) without matplotlib.

    Example:
        >>> import torch
        >>> from torch_xla_ext import parity
        >>> model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16))
        >>> x = torch.randn(2, 16)
        >>> plot_modules(parity.verify(model, (x,), dtype="bf16", localize=True), "modules.png")
        'modules.png'
    """
    if not isinstance(report, ParityReport):
        raise ParityTypeError(f"report: expected a ParityReport, got {type(report).__name__}")
    if not report.modules:
        raise ParityError("report: has no per-module localisation (verify(..., localize=True))")
    plt, _why = _plot.pyplot(os.path.basename(path))
    if plt is None:
        return None
    ms = list(report.modules)
    tiny = 1e-12
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 4.2), gridspec_kw={"width_ratios": [3, 1]})
    xs = range(len(ms))
    ax.semilogy(xs, [max(m.total_error, tiny) for m in ms], ".-", color="#999999", label="total error (vs fp64)")
    ax.semilogy(xs, [max(m.inherited_error, tiny) for m in ms], ".", color="#dd8452", label="inherited (inputs)")
    ax.semilogy(xs, [max(m.own_error, tiny) for m in ms], "o", color="#4c72b0", label="own (shadow)")
    ax.semilogy(xs, [max(m.rounding_level, tiny) for m in ms], "_", color="#55a868", markersize=10,
                label="CPU eager's rounding, same inputs")
    for i, m in enumerate(ms):
        if m.diverges:
            ax.axvline(i, color="#c44e52", alpha=0.25 if m.name != report.first_divergent_module else 0.9)
    if len(ms) <= 60:
        ax.set_xticks(list(xs))
        ax.set_xticklabels([("  " * m.depth) + m.name.split(".")[-1] if m.path else "<root>" for m in ms],
                           rotation=90, fontsize=6)
    ax.set_xlabel("module call (completion order: children before parents)")
    ax.set_ylabel("greatest absolute error")
    title = report.first_divergent_module or "none"
    ax.set_title(f"{report.dtype}: first divergent module: {title}", fontsize=9)
    ax.legend(fontsize=7)
    depths = sorted({m.depth for m in ms})
    ratios = [max((min(m.own_to_rounding, 1e6) for m in ms if m.depth == d), default=0.0) for d in depths]
    ax2.bar([str(d) for d in depths], [max(r, tiny) for r in ratios], color="#4c72b0")
    ax2.axhline(ms[0].threshold, color="#c44e52", linestyle="--", label=f"divergence ({ms[0].threshold:g}x)")
    ax2.set_yscale("log")
    ax2.set_xlabel("module depth")
    ax2.set_ylabel("greatest own / rounding")
    ax2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
