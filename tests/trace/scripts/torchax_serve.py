"""Serve a tiny GPT-2 (transformers, built from a config, random weights) through torchax: the model
is compiled once with torchax.compile and called on requests of varying batch size and length; the
next token is picked outside the compiled function (op by op). Requests from --positions-from on
also pass position ids, as a server does once it packs or pads a batch."""

import argparse

import torch
import torchax
from transformers import GPT2Config, GPT2LMHeadModel


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--requests", default="1x8,1x8,2x8,1x12,2x8,4x16,1x8",
                   help="batch x length of each request")
    p.add_argument("--positions-from", type=int, default=0, help="pass position_ids from this request on (0: never)")
    args = p.parse_args()
    requests = [tuple(int(n) for n in r.split("x")) for r in args.requests.split(",")]

    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=256, n_positions=64,
                        use_cache=False, return_dict=False)
    model = GPT2LMHeadModel(config).eval()

    env = torchax.default_env()
    with env, torch.no_grad():
        model.to("jax")
        fast = torchax.compile(model)
        served = 0
        for i, (batch, length) in enumerate(requests, start=1):
            ids = torch.randint(0, config.vocab_size, (batch, length), device="jax")
            if args.positions_from and i >= args.positions_from:
                positions = torch.arange(length, device="jax").expand(batch, length)
                logits = fast(ids, position_ids=positions)[0]
            else:
                logits = fast(ids)[0]
            next_token = logits[:, -1].argmax(-1)
            served += next_token.shape[0]
    print(f"served {len(requests)} requests, {served} sequences")


if __name__ == "__main__":
    main()
