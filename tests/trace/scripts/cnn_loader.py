"""Train a small torchvision ResNet on a dataset whose size is not a multiple of the batch size:
the DataLoader's last batch of each epoch is short. Batches reach the device through
torch_xla's MpDeviceLoader, which marks the step at each batch."""

import argparse

import torch
import torch_xla
import torch_xla.distributed.parallel_loader as pl
from torchvision.models.resnet import BasicBlock, ResNet


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--samples", type=int, default=10)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--epochs", type=int, default=2)
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch_xla.device()
    images = torch.randn(args.samples, 3, 16, 16)
    labels = torch.randint(0, 10, (args.samples,))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(images, labels), batch_size=args.batch)
    model = ResNet(BasicBlock, [1, 1, 1, 1], num_classes=10).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    torch_xla.sync()

    for epoch in range(args.epochs):
        for x, y in pl.MpDeviceLoader(loader, device):
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} done")


if __name__ == "__main__":
    main()
