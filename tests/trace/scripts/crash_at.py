"""A training loop that dies at --step: raises (--how raise), or is killed with SIGKILL the way the
kernel's OOM killer does it (--how kill). Steps before it ran and compiled as usual."""

import argparse
import os
import signal

import torch
import torch_xla


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--step", type=int, default=3)
    p.add_argument("--how", choices=("raise", "kill"), default="raise")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch_xla.device()
    model = torch.nn.Linear(8, 8).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    torch_xla.sync()
    for step in range(1, 100):
        batch = 4 if step < args.step else 6  # the step that dies compiles a new graph first
        loss = model(torch.randn(batch, 8).to(device)).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        print(f"step {step} loss {loss.item():.4f}", flush=True)
        if step == args.step:
            if args.how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError(f"diverged at step {step}")
        torch_xla.sync()


if __name__ == "__main__":
    main()
