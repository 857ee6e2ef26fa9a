"""One rank of a data-parallel job started by torchrun (RANK, WORLD_SIZE from the launcher).
Every rank trains the same model on its own batches; the rank named by --diverge-rank gets longer
sequences from --diverge-step on (a rank whose data loader pads differently), so it compiles a
graph the others never do."""

import argparse
import os

import torch
import torch_xla


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--diverge-rank", type=int, default=1)
    p.add_argument("--diverge-step", type=int, default=3)
    p.add_argument("--stop-rank", type=int, default=-1, help="this rank stops after --stop-step")
    p.add_argument("--stop-step", type=int, default=2)
    args = p.parse_args()
    rank = int(os.environ["RANK"])

    torch.manual_seed(0)
    device = torch_xla.device()
    model = torch.nn.Sequential(torch.nn.Embedding(64, 16), torch.nn.Linear(16, 64)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    torch_xla.sync()
    for step in range(1, args.steps + 1):
        length = 12 if rank == args.diverge_rank and step >= args.diverge_step else 8
        ids = torch.randint(0, 64, (4, length)).to(device)
        logits = model(ids)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 64), ids.reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        torch_xla.sync()
        if rank == args.stop_rank and step == args.stop_step:
            break
    print(f"rank {rank} done")


if __name__ == "__main__":
    main()
