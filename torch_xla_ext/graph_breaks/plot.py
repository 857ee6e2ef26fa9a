"""A PNG of a comparison: breaks, partitions, compiles and ms/step per mode, side by side.

Example:
    >>> from torch_xla_ext.graph_breaks import compare
    >>> cmp = compare("torch_xla_ext.graph_breaks:example", warmup=1, steps=1, isolation="in-process")
    >>> plot_comparison(cmp, "breaks.png")            # matplotlib is pinned in the project's venv
    'breaks.png'
"""

from __future__ import annotations

import os
from typing import Any

from torch_xla_ext import _plot

__all__ = ["plot_comparison"]


def plot_comparison(cmp: Any, path: str) -> str | None:
    """Writes the PNG for a :class:`~torch_xla_ext.graph_breaks.compare.Comparison`; returns ``path``,
    or None when matplotlib is not installed (the skip is recorded by ``torch_xla_ext._plot``)."""
    plt, _why = _plot.pyplot(os.path.basename(path))
    if plt is None:
        return None
    from matplotlib.ticker import MaxNLocator  # matplotlib is optional: _plot said it is there

    names = list(cmp.modes)
    panels = [
        ("graph breaks (logged)", [cmp.modes[n].report.num_fx_breaks for n in names]),
        ("AOT graphs", [cmp.modes[n].report.num_aot_graphs for n in names]),
        ("XLA partitions", [cmp.modes[n].report.xla_partitions for n in names]),
        ("XLA compiles (uncached)", [cmp.modes[n].report.compiles for n in names]),
        ("ms / step (median)", [cmp.modes[n].median_ms for n in names]),
    ]
    colors = ["#4C72B0", "#DD8452", "#55A868", "#C44E52"][: len(names)]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.0 * len(panels), 3.4))
    for ax, (title, values) in zip(axes, panels):
        bars = ax.bar(names, values, color=colors)
        ax.set_title(title, fontsize=10)
        for b, v in zip(bars, values):
            ax.annotate(f"{v:.2f}" if isinstance(v, float) else str(v), (b.get_x() + b.get_width() / 2, b.get_height()),
                        ha="center", va="bottom", fontsize=9)
        ax.margins(y=0.2)
        if not isinstance(values[0], float):
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.spines[["top", "right"]].set_visible(False)
    what = "training step" if cmp.train else "forward pass"
    fig.suptitle(f"torch_xla graph breaks: {' vs '.join(names)}, {what} ({cmp.steps} timed steps)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
