"""A learning-rate schedule and gradient accumulation: the optimizer steps every --accum
micro-batches, the schedule warms the rate up from 0, and every micro-batch ends in
xm.mark_step(), as many training scripts are written."""

import argparse

import torch
import torch_xla.core.xla_model as xm


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--micro", type=int, default=8)
    p.add_argument("--accum", type=int, default=2)
    args = p.parse_args()

    torch.manual_seed(0)
    device = xm.xla_device()
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    warmup = 2
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, s / warmup))
    xm.mark_step()

    for i in range(args.micro):
        x = torch.randn(8, 16).to(device)
        loss = model(x).pow(2).mean() / args.accum
        loss.backward()
        if (i + 1) % args.accum == 0:
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        xm.mark_step()
    print("lr", scheduler.get_last_lr())


if __name__ == "__main__":
    main()
