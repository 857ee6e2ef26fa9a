"""Graph-break ledger: where a torch_xla program leaves the one-big-graph path, per layer.

Four layers break a program into pieces, and each is counted here in one report:
  * Dynamo: frame compiles (compile ids), graphs handed to the backend, graph breaks with
    Dynamo's structured record (gb_type, GB id, explanation, hints, user frame), recompiles and
    the guard that failed.
  * AOTAutograd: the forward, backward and inference graphs the openxla backend compiles.
  * the openxla bridge: per graph, its XLA partitions and the aten ops left to eager around
    CPU-fallback ops (``partition_fx_graph_for_cpu_fallback``).
  * XLA / lazy tensors: compiles (uncached and cached), executions, device->host transfers and
    their times, per graph hash where the bridge exposes it; syncs, and executions a host read
    forced outside a sync.
One report per region (``account()``), joined per compile id; a self-contained HTML page and a
Chrome/Perfetto trace of it; with ``TORCH_TRACE`` set, artifacts in torch's structured trace
under each Dynamo compile id, for tlparse (``graph_breaks.tlparse``); ``compare()`` of lazy vs
dynamo, each in a fresh process; and ``merge()`` of the per-rank reports (or per-rank
comparisons) of a multi-process job, naming the ranks that differ.

Example:
    >>> import torch, torch_xla
    >>> from torch_xla_ext import graph_breaks
    >>> def f(x):
    ...     x = torch.sin(x)
    ...     torch._dynamo.graph_break()               # one break: two graphs
    ...     return torch.cos(x)
    >>> with graph_breaks.account() as ledger:
    ...     y = torch.compile(f, backend="openxla")(torch.ones(3, device="xla")); torch_xla.sync()
    >>> report = ledger.report()
    >>> report.fx_graphs, report.num_counted_breaks, report.xla_partitions
    (2, 1, 2)
    >>> print(report.to_markdown().splitlines()[0]); graph_breaks.write_html("breaks.html", report)
    ### Graph-break report (rank 0)
    'breaks.html'

The counts go through the C++ ledger (``cc/graph_breaks``), the same one a torch_xla fork's
lowering writes to through ``cc/graph_breaks/hooks.h``; events from those hooks inside the region
appear under ``native_hooks``.
"""

from torch_xla_ext import _versions

_versions.require("graph_breaks")  # before anything here imports torch
# torch_xla's bridge and metrics ("graph_breaks.openxla") are checked where watch.py installs the
# bridge, once torch_xla is imported: Dynamo's half runs in a process without torch_xla.

from torch_xla_ext._ext import graph_breaks as _core
from torch_xla_ext.graph_breaks.compare import Comparison, ModeResult, compare
from torch_xla_ext.graph_breaks.example import DISCARD, example, example_inputs, example_model
from torch_xla_ext.graph_breaks.failures import KNOWN_FAILURES, describe_failure
from torch_xla_ext.graph_breaks.html import write_html
from torch_xla_ext.graph_breaks.ledger import GraphBreakLedger, account, native_ledger
from torch_xla_ext.graph_breaks.merge import MergedReport, merge
from torch_xla_ext.graph_breaks.report import GraphBreakError, GraphBreakReport, WorkerError, load_report
from torch_xla_ext.graph_breaks.trace import write_trace
from torch_xla_ext.graph_breaks.watch import TorchXlaBridgeBug
from torch_xla_ext.graph_breaks.worker import MODES, default_loss

__all__ = [
    "Comparison",
    "DISCARD",
    "GraphBreakError",
    "GraphBreakLedger",
    "GraphBreakReport",
    "KNOWN_FAILURES",
    "MODES",
    "MergedReport",
    "ModeResult",
    "TorchXlaBridgeBug",
    "WorkerError",
    "account",
    "compare",
    "default_loss",
    "describe_failure",
    "example",
    "example_inputs",
    "example_model",
    "load_report",
    "merge",
    "native_ledger",
    "write_html",
    "write_trace",
]
