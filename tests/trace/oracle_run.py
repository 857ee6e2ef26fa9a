"""Runs a script as ``python script.py ARGS`` would, and writes upstream's own records of the run
to the JSON file ``ORACLE_OUT`` names (``{rank}`` in it becomes the process's ``RANK``) when the
interpreter exits, also after the script raised. The tests run it *inside* the traced command
(``torch-xla-ext trace --out D -- python oracle_run.py SCRIPT ARGS``), so the oracle and the
trace observe the same compiles of one process; not collected.

What it writes, each read from torch, torch_xla or Dynamo themselves (never from the trace):

* ``compile_time``: torch_xla's ``CompileTime`` metric's sample count;
* ``fallback_ops``: torch_xla's ``executed_fallback_ops()`` (ops run on the CPU);
* ``unique_graphs`` and ``graph_breaks``: Dynamo's ``counters["stats"]["unique_graphs"]`` and
  ``sum(counters["graph_break"].values())``;
* ``explain``: with ``ORACLE_EXPLAIN=1``, one entry per ``torch.compile`` call, in call order:
  the backend is wrapped in ``torch._dynamo.backends.debugging.ExplainWithBackend``, the
  accumulator ``torch._dynamo.explain`` reports through (``_explain_graph_detail``: every graph
  Dynamo hands the backend, and each one's ``compile_subgraph_reason`` when it is a graph break),
  so ``len(break_reasons)`` is ``explain()``'s figure for exactly the compiles the trace saw.

torch_xla's ``PT_XLA_DEBUG_LEVEL=2`` analysis of the process is the file the trace asked torch_xla
to write (``D/xla-debug/``), read by the tests with a regex of their own (``runs.analysis``);
Dynamo's recompiles are ``TORCH_LOGS=recompiles`` on stderr.

    ORACLE_OUT=o.json python oracle_run.py scripts/gpt2_finetune.py --lengths 16,24
"""

import atexit
import json
import os
import runpy
import sys

_explainers = []


def _write():
    out = {"compile_time": None, "fallback_ops": None, "unique_graphs": None, "graph_breaks": None, "explain": []}
    if "torch_xla" in sys.modules:
        import torch_xla.debug.metrics as met

        data = met.metric_data("CompileTime")
        out["compile_time"] = int(data[0]) if data else 0
        out["fallback_ops"] = sorted(met.executed_fallback_ops())
    if "torch._dynamo" in sys.modules:
        from torch._dynamo.utils import counters

        out["unique_graphs"] = counters["stats"]["unique_graphs"]
        out["graph_breaks"] = sum(counters["graph_break"].values())
    for eb in _explainers:
        reasons = [str(r.reason).splitlines()[0] for r in eb.break_reasons]
        out["explain"].append({"graph_count": len(eb.graphs), "break_reasons": reasons})
    path = os.environ["ORACLE_OUT"].replace("{rank}", os.environ.get("RANK", "0"))
    with open(path, "w") as f:
        json.dump(out, f)


def _explain_every_compile():
    import torch
    from torch._dynamo.backends.debugging import ExplainWithBackend

    original = torch.compile

    def compile_explained(model=None, *args, backend="inductor", **kwargs):
        eb = ExplainWithBackend(backend)
        _explainers.append(eb)
        return original(model, *args, backend=eb, **kwargs)

    torch.compile = compile_explained


if __name__ == "__main__":
    atexit.register(_write)
    if os.environ.get("ORACLE_EXPLAIN") == "1":
        _explain_every_compile()
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")
