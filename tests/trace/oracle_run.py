"""Runs a script as ``python script.py ARGS`` would, and writes upstream's own records of the run
to the JSON file ``ORACLE_OUT`` names (``{rank}`` in it becomes the process's ``RANK``, ``{pid}``
its pid) when the interpreter exits, also after the script raised. The tests run it *inside* the traced command
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
  so ``len(break_reasons)`` is ``explain()``'s figure for exactly the compiles the trace saw;
* ``jax_log``: with ``JAX_LOG_COMPILES=1`` and ``JAX_EXPLAIN_CACHE_MISSES=1`` in the environment
  (JAX's own flags), JAX's own words about its compiles, in the order it logged them: every
  "Finished XLA compilation of jit(f) in t sec" (one per XLA compile) and every "TRACING CACHE MISS
  ..." explanation (why a jitted function traced again), captured by a ``logging.Handler`` on the
  ``jax`` logger, added before the script imports JAX (loggers exist by name). The handler shares
  nothing with the trace's recorder; the tests parse the text themselves;
* ``jax_process_index``: ``jax.process_index()`` at exit, where the script imported JAX.

torch_xla's ``PT_XLA_DEBUG_LEVEL=2`` analysis of the process is the file the trace asked torch_xla
to write (``D/xla-debug/``), read by the tests with a regex of their own (``runs.analysis``);
Dynamo's recompiles are ``TORCH_LOGS=recompiles`` on stderr.

    ORACLE_OUT=o.json python oracle_run.py scripts/gpt2_finetune.py --lengths 16,24
"""

import atexit
import json
import logging
import os
import runpy
import sys
import threading

_explainers = []
_jax_log = []
_JAX_MESSAGES = ("Finished XLA compilation of ", "TRACING CACHE MISS")


class _JaxLog(logging.Handler):
    def emit(self, record):
        message = record.getMessage()
        if message.startswith(_JAX_MESSAGES):
            _jax_log.append({"logger": record.name, "thread": threading.get_ident(), "message": message})


def _write():
    out = {"compile_time": None, "fallback_ops": None, "unique_graphs": None, "graph_breaks": None, "explain": [],
           "jax_log": list(_jax_log), "pid": os.getpid()}
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
    if "jax" in sys.modules:
        jax = sys.modules["jax"]
        try:
            out["jax_process_index"] = jax.process_index()  # JAX's own answer: which process this was
        except Exception as e:  # noqa: BLE001 - at exit, after the script's jax.distributed.shutdown(): recorded in the file
            out["jax_process_index"] = f"{type(e).__name__}: {e}"
    path = os.environ["ORACLE_OUT"].replace("{rank}", os.environ.get("RANK", "0")).replace("{pid}", str(os.getpid()))
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
    if os.environ.get("JAX_LOG_COMPILES") == "1":
        logging.getLogger("jax").addHandler(_JaxLog(level=logging.DEBUG))
    if os.environ.get("ORACLE_EXPLAIN") == "1":
        _explain_every_compile()
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")
