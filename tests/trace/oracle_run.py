"""Runs a script as ``python script.py ARGS`` would, untraced, and writes torch_xla's and Dynamo's
own records of the run to the JSON file named by ``ORACLE_OUT`` when the interpreter exits (also
after the script raised): the ``CompileTime`` metric's sample count and Dynamo's counters. Run as
a script by the tests (with ``PT_XLA_DEBUG_LEVEL=2`` for torch_xla's analysis on stderr, and
``TORCH_LOGS=recompiles`` for Dynamo's); not collected.

    ORACLE_OUT=o.json python oracle_run.py scripts/gpt2_finetune.py --lengths 16,24
"""

import atexit
import json
import os
import runpy
import sys


def _write():
    out = {"compile_time": None, "unique_graphs": None, "graph_breaks": None}
    if "torch_xla" in sys.modules:
        import torch_xla.debug.metrics as met

        data = met.metric_data("CompileTime")
        out["compile_time"] = int(data[0]) if data else 0
    if "torch._dynamo" in sys.modules:
        from torch._dynamo.utils import counters

        out["unique_graphs"] = counters["stats"]["unique_graphs"]
        out["graph_breaks"] = sum(counters["graph_break"].values())
    with open(os.environ["ORACLE_OUT"], "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    atexit.register(_write)
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")
