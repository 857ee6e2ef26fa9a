"""A training loop that dies at --step, after printing that step's loss:

* ``--how oom``: the step builds a tensor far larger than the machine (an activation blown up by
  a wrong shape), and torch_xla raises its out-of-memory RuntimeError at the value read;
* ``--how kill``: the process is killed with SIGKILL, the way the kernel's OOM killer does it;
* ``--how wait``: the loop blocks (a rank waiting at a collective that never completes) until a
  signal ends it, such as the SIGTERM a scheduler sends.

The step that dies first compiles a new graph (a larger batch)."""

import argparse
import os
import signal
import time

import torch
import torch_xla


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--step", type=int, default=3)
    p.add_argument("--how", choices=("oom", "kill", "wait"), default="oom")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch_xla.device()
    model = torch.nn.Linear(8, 8).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    torch_xla.sync()
    for step in range(1, 100):
        batch = 4 if step < args.step else 6
        loss = model(torch.randn(batch, 8).to(device)).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        print(f"step {step} loss {loss.item():.4f}", flush=True)
        if step == args.step:
            if args.how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if args.how == "wait":
                while True:
                    time.sleep(1)
            activations = torch.zeros(1 << 38, device=device) + loss  # 1 TiB of float32
            torch_xla.sync()
            print("first activation", activations[0].item())
        torch_xla.sync()


if __name__ == "__main__":
    main()
