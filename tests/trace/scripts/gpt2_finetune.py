"""Fine-tune a tiny GPT-2 (transformers, built from a config) on batches whose sequence length
varies, logging loss.item() every step before the step's sync, as training scripts do."""

import argparse

import torch
import torch_xla
from transformers import GPT2Config, GPT2LMHeadModel


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lengths", default="16,16,24,16")
    p.add_argument("--batch", type=int, default=2)
    args = p.parse_args()
    lengths = [int(n) for n in args.lengths.split(",")]

    torch.manual_seed(0)
    device = torch_xla.device()
    config = GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=128, n_positions=64, use_cache=False)
    model = GPT2LMHeadModel(config).to(device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    for step, length in enumerate(lengths):
        ids = torch.randint(0, config.vocab_size, (args.batch, length)).to(device)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        print(f"step {step} length {length} loss {loss.item():.4f}")
        torch_xla.sync()


if __name__ == "__main__":
    main()
