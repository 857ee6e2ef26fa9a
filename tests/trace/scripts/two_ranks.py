"""One rank of a data-parallel job started by torchrun (RANK, WORLD_SIZE from the launcher).
Every rank trains the same model on batches of 8 tokens; the rank named by --diverge-rank gets
longer sequences from --diverge-step on, 4 tokens more at each step (a rank whose data loader does
not pad), so it compiles graphs the others never do, one per step."""

import argparse
import os

import torch
import torch_xla


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--diverge-rank", type=int, default=1)
    p.add_argument("--diverge-step", type=int, default=3)
    args = p.parse_args()
    rank = int(os.environ["RANK"])

    torch.manual_seed(0)
    device = torch_xla.device()
    model = torch.nn.Sequential(torch.nn.Embedding(64, 16), torch.nn.Linear(16, 64)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    torch_xla.sync()
    for step in range(1, args.steps + 1):
        length = 8 + 4 * max(0, step - args.diverge_step + 1) if rank == args.diverge_rank else 8
        ids = torch.randint(0, 64, (4, length)).to(device)
        logits = model(ids)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 64), ids.reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        torch_xla.sync()
    print(f"rank {rank} done")


if __name__ == "__main__":
    main()
