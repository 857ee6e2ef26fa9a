"""One process of a multi-process job for the ranks tests (run as a script, not collected).

    python rank_worker.py ranks OUT_DIR      # RANK / WORLD_SIZE / DIVERGE_RANK from the environment
    python rank_worker.py replicas OUT_DIR   # CPU_NUM_DEVICES=3: torch_xla's thread-per-device replicas

ranks: a compiled training step of a tiny MLP, 3 steps, report saved as gb-rank{rank}.json. The
rank named by DIVERGE_RANK takes an extra graph break and runs its last step on a bigger batch
(a recompile, another XLA graph). Dynamo's own counters go to counters-rank{rank}.json.

replicas: xmp.spawn runs one thread per CPU device in one process; one region (opened by
replica 0) accounts all of them. Replica 1 runs one extra step; replica 2 uses a bigger batch.
Each thread's own count of its syncs goes to syncs.json.
"""

import json
import os
import sys
import threading

os.environ.setdefault("PJRT_DEVICE", "CPU")

import torch  # noqa: E402
import torch_xla  # noqa: E402

from torch_xla_ext import graph_breaks as gb  # noqa: E402


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def ranks(out_dir: str) -> None:
    from torch._dynamo.utils import counters

    rank, diverge = int(os.environ["RANK"]), int(os.environ.get("DIVERGE_RANK", "-1"))
    dev = torch_xla.device()
    model = _mlp().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch_xla.sync()
    odd = rank == diverge

    def step(x):
        opt.zero_grad()
        h = model(x)
        if odd:
            torch._dynamo.graph_break()  # only this rank: a break the others do not take
        loss = h.pow(2).mean()
        loss.backward()
        opt.step()
        return loss.detach() * 1.0

    compiled = torch.compile(step, backend="openxla")
    start = {"unique_graphs": counters["stats"]["unique_graphs"], "graph_breaks": sum(counters["graph_break"].values())}
    with gb.account() as ledger:
        for i in range(3):
            batch = 6 if (odd and i == 2) else 4
            compiled(torch.randn(batch, 8, device=dev))
            torch_xla.sync()
            ledger.step()
    ledger.report().save(os.path.join(out_dir, "gb-rank{rank}.json"))
    with open(os.path.join(out_dir, f"counters-rank{rank}.json"), "w") as f:
        json.dump({"unique_graphs": counters["stats"]["unique_graphs"] - start["unique_graphs"],
                   "graph_breaks": sum(counters["graph_break"].values()) - start["graph_breaks"]}, f)


_REPLICAS = 3
_barrier = threading.Barrier(_REPLICAS)
_region: dict = {}
_syncs: dict = {}


def _replica(index: int, out_dir: str) -> None:
    import torch_xla.runtime as xr

    ordinal = xr.global_ordinal()
    dev = torch_xla.device()
    model = _mlp().to(dev)
    torch_xla.sync()
    _barrier.wait()  # every replica's set-up sync is done before the region opens
    if ordinal == 0:
        _region["ledger"] = gb.account().__enter__()
    _barrier.wait()
    steps = 4 if ordinal == 1 else 3
    batch = 6 if ordinal == 2 else 4
    for _ in range(steps):
        model(torch.randn(batch, 8, device=dev)).sum()
        torch_xla.sync()
    _syncs[str(ordinal)] = steps
    _barrier.wait()
    if ordinal == 0:
        ledger = _region["ledger"]
        ledger.__exit__(None, None, None)
        ledger.report().save(os.path.join(out_dir, "replicas.json"))
        with open(os.path.join(out_dir, "syncs.json"), "w") as f:
            json.dump(_syncs, f)


def replicas(out_dir: str) -> None:
    import torch_xla.distributed.xla_multiprocessing as xmp

    xmp.spawn(_replica, args=(out_dir,))


if __name__ == "__main__":
    {"ranks": ranks, "replicas": replicas}[sys.argv[1]](sys.argv[2])
