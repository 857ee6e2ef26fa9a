"""One of two JAX processes (jax.distributed on the CPU; a local coordinator), each serving a small
torchax-compiled model on its own requests, as a multi-host server's processes do. The process named
by --diverge-process gets longer requests from --diverge-step on (4 tokens more each step), so it
compiles programs the other never does.

    python torchax_two_procs.py --coordinator 127.0.0.1:PORT --num-processes 2 --process-id 0 &
    python torchax_two_procs.py --coordinator 127.0.0.1:PORT --num-processes 2 --process-id 1
"""

import argparse

import jax
import torch
import torchax


class Tagger(torch.nn.Module):
    def __init__(self, vocab=64, dim=16, tags=8):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.proj = torch.nn.Linear(dim, tags)

    def forward(self, ids):
        return self.proj(torch.tanh(self.embed(ids)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--coordinator", required=True)
    p.add_argument("--num-processes", type=int, default=2)
    p.add_argument("--process-id", type=int, required=True)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--diverge-process", type=int, default=1)
    p.add_argument("--diverge-step", type=int, default=3)
    args = p.parse_args()

    jax.distributed.initialize(coordinator_address=args.coordinator, num_processes=args.num_processes,
                               process_id=args.process_id, initialization_timeout=120)
    me = jax.process_index()
    torch.manual_seed(0)
    with torchax.default_env():
        model = Tagger().to("jax")
        fast = torchax.compile(model)
        for step in range(1, args.steps + 1):
            extra = 4 * max(0, step - args.diverge_step + 1) if me == args.diverge_process else 0
            ids = torch.randint(0, 64, (2, 8 + extra), device="jax")
            tags = fast(ids).argmax(-1)
    print(f"process {me} of {jax.process_count()} done, last batch {tuple(tags.shape)}")
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
