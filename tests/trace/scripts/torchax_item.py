"""Classify padded token batches with a small model compiled by torchax.compile. The model trims
the padding to the longest sequence with `lengths.max().item()` inside forward: fine in eager
PyTorch, a concretization error once JAX traces forward. The script crashes (non-zero exit)."""

import argparse

import torch
import torchax


class BagClassifier(torch.nn.Module):
    def __init__(self, vocab=100, dim=32, classes=4):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.head = torch.nn.Linear(dim, classes)

    def forward(self, ids, lengths):
        longest = int(lengths.max().item())
        h = self.embed(ids[:, :longest])
        return self.head(h.mean(dim=1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--pad-to", type=int, default=12)
    args = p.parse_args()

    torch.manual_seed(0)
    with torchax.default_env():
        model = BagClassifier().to("jax")
        ids = torch.randint(1, 100, (args.batch, args.pad_to), device="jax")
        lengths = torch.tensor([args.pad_to - i for i in range(args.batch)], device="jax")
        print("eager", model(ids, lengths).shape)
        fast = torchax.compile(model)
        print("compiled", fast(ids, lengths).shape)


if __name__ == "__main__":
    main()
