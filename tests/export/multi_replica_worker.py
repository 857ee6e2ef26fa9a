"""Runs models.two_all_reduces eagerly in torch_xla on N CPU devices (CPU_NUM_DEVICES=N, one
thread per device, torch_xla's own pjrt.run_multiprocess) and saves each replica's result.

Usage: CPU_NUM_DEVICES=N python multi_replica_worker.py INPUTS.npz OUT.npz [--concurrent-compile]

torch_xla 2.9 on the CPU compiles the graph in every device thread; when two threads compile
concurrently their executables disagree on the all-reduce's op_id and XLA's rendezvous never
completes (the process aborts after 10 s). So, unless --concurrent-compile, replica 0 compiles
first and the others start once the CompileTime metric moves, and reuse its executable.
"""

import copy
import os
import sys
import threading
import time

import numpy as np
import torch
import torch_xla
import torch_xla.debug.metrics as met
from torch_xla._internal import pjrt

from tests.export import models

N = int(os.environ["CPU_NUM_DEVICES"])
INPUTS = np.load(sys.argv[1])
CONCURRENT = "--concurrent-compile" in sys.argv
_ready = threading.Barrier(N)
_compiled_before = []
_started = threading.Event()
# Built once here: torch's global RNG is not per thread, so seeding inside replicas would race.
MODEL, _ = models.two_all_reduces()


def _compile_count():
    data = met.metric_data("CompileTime")
    return data[0] if data else 0


def replica():
    ordinal = torch_xla.runtime.global_ordinal()
    device = torch_xla.device()
    model = copy.deepcopy(MODEL).to(device)
    args = [torch.from_numpy(INPUTS[f"r{ordinal}_a{k}"]).to(device) for k in range(3)]
    torch_xla.sync()  # parameters and inputs on the device (no collective in this graph)
    out = model(*args)
    _ready.wait()
    if not CONCURRENT:
        if ordinal == 0:
            _compiled_before.append(_compile_count())
            _started.set()
        else:
            _started.wait()
            deadline = time.time() + 120
            while _compile_count() <= _compiled_before[0] and time.time() < deadline:
                time.sleep(0.01)
    torch_xla.sync()
    return out.detach().cpu().numpy(), torch_xla.runtime.world_size()


if __name__ == "__main__":
    results = pjrt.run_multiprocess(replica, start_method="fork")
    np.savez(sys.argv[2], **{f"r{k}": v[0] for k, v in results.items()},
             world_sizes=np.array([v[1] for _, v in sorted(results.items())]))
