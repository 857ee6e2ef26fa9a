"""A training step compiled with torch.compile(backend="openxla") that prints inside the
compiled function (a graph break), computes a statistic with an op torch_xla runs on the CPU
(digamma) and gets a smaller batch at one step (a recompile); each step ends in torch_xla.sync()."""

import argparse

import torch
import torch_xla


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batches", default="8,8,6,8")
    args = p.parse_args()
    batches = [int(b) for b in args.batches.split(",")]

    torch.manual_seed(0)
    device = torch_xla.device()
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    torch_xla.sync()

    def train_step(x):
        optimizer.zero_grad()
        loss = model(x).pow(2).mean()
        print("batch", x.shape[0])
        loss.backward()
        optimizer.step()
        spread = torch.digamma(x.abs() + 1).mean()  # a statistic for the log; digamma runs on the CPU
        return loss.detach() * 1.0, spread

    step = torch.compile(train_step, backend="openxla")
    for b in batches:
        step(torch.randn(b, 16).to(device))
        torch_xla.sync()


if __name__ == "__main__":
    main()
