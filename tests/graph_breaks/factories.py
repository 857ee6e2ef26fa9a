"""--model factories for the compare tests (imported by 'module:factory', also in worker processes)."""

import time

import torch


class TokenMlp(torch.nn.Module):
    """int64 token ids in, a keyword mask, a ModelOutput-like dict out: what HF models look like."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(64, 16)
        self.l1 = torch.nn.Linear(16, 16)
        self.head = torch.nn.Linear(16, 8)

    def forward(self, ids, *, mask):
        h = torch.relu(self.l1(self.emb(ids))) * mask.unsqueeze(-1)
        return {"logits": self.head(h), "hidden": h}


def token_mlp():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 64, (2, 8), generator=g, dtype=torch.int64)
    return TokenMlp(), (ids,), {"mask": torch.ones(2, 8)}


def sleepy():
    time.sleep(300)


def not_a_pair():
    return torch.nn.Linear(2, 2)


class RankMlp(torch.nn.Module):
    """The model of one rank of a data-parallel job; the rank named by DIVERGE_RANK takes a graph
    break the others do not and runs a CPU-fallback op (digamma) the others do not."""

    def __init__(self, diverge: bool):
        super().__init__()
        self.diverge = diverge
        self.l1 = torch.nn.Linear(8, 16)
        self.l2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        h = torch.relu(self.l1(x))
        if self.diverge:
            torch._dynamo.graph_break()
            h = torch.digamma(h + 1.0)
        return self.l2(h)


def rank_mlp():
    import os

    torch.manual_seed(0)
    diverge = os.environ.get("RANK") is not None and os.environ.get("RANK") == os.environ.get("DIVERGE_RANK")
    return RankMlp(diverge), (torch.randn(4, 8, generator=torch.Generator().manual_seed(1)),)
