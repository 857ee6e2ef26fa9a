"""Trace a torch_xla training script as it is: why it compiles again, and where it syncs.

``torch-xla-ext trace --out DIR -- python train.py`` (or ``torchrun ...``, or any command)
runs the command unchanged and records, in every Python process it starts, each XLA compile
(step, graph hash, what triggered it and at which line of the user's code, compile time, and for
a graph compiled at a site that compiled before, what differs from the earlier graph there), each
step marker and the executions of each step, and Dynamo's compiles, graph breaks, recompiles and
bridge partitions. Each process streams its own rank file (``rank-<r>.jsonl``), so a crash or a
kill loses nothing written; ``report.md``, ``report.json`` (schema in docs/trace.md),
``report.html`` and ``trace.perfetto.json`` cover all ranks, and name the first step where the
ranks' graphs differ. ``TORCH_XLA_EXT_TRACE=DIR`` does the same for launchers that cannot be
wrapped.

Importing this package imports neither torch nor torch_xla: the recorder starts in the traced
processes (``trace/site/sitecustomize.py``, :mod:`~torch_xla_ext.trace.startup`) and its Dynamo
half needs torch alone.

Example (shell):
    torch-xla-ext trace --out trace_out -- python train.py --epochs 1
    torch-xla-ext trace --report trace_out        # render again from the rank files
"""

from torch_xla_ext.trace.schema import SCHEMA_VERSION, TraceError

__all__ = ["SCHEMA_VERSION", "TraceError", "render", "run"]


def run(command, out, *, overwrite=False, capture="auto", torch_trace=True):
    """Runs ``command`` (a list of strings) traced into ``out``, writes the report, and returns
    (the command's exit status as a shell gives it, the report or None when there is no rank
    file). See :func:`torch_xla_ext.trace.launch.run`."""
    # This package is imported at start-up in every traced process (its recorder), which never
    # runs a command nor writes a report: the launcher and the report are imported where used.
    from torch_xla_ext.trace import launch

    status, path = launch.run(command, out, overwrite=overwrite, capture=capture, torch_trace=torch_trace)
    if path is None:
        return status, None
    try:
        return status, render(path)
    except TraceError:
        return status, None


def render(directory):
    """Writes ``report.md``, ``report.json``, ``report.html`` and ``trace.perfetto.json`` of a
    trace directory from its rank files; returns the report (plain data)."""
    from torch_xla_ext.trace import report  # Jinja2 and pydantic: not at every traced process's start (above)

    return report.write(directory)
