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

def small_convnext():
    """torchvision's ConvNeXt architecture in a small config (2 stages of 1 block): like
    convnext_tiny, its forward pass and training step fail under torch.compile(backend="openxla")
    in torch_xla 2.9 at the final adaptive_avg_pool2d, and run in lazy mode."""
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt

    torch.manual_seed(0)
    model = ConvNeXt([CNBlockConfig(16, 32, 1), CNBlockConfig(32, None, 1)]).eval()
    return model, (torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(1)),)


def small_swin():
    """torchvision's Swin Transformer in a small config; fails like swin_t."""
    from torchvision.models.swin_transformer import SwinTransformer

    torch.manual_seed(0)
    model = SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[1, 1], num_heads=[1, 2],
                            window_size=[2, 2]).eval()
    return model, (torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(1)),)


class _Segfault(torch.nn.Module):
    def forward(self, x):
        import os
        import signal
        import sys

        print("about to crash in native code", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGSEGV)  # what a crash inside torch_xla's C++ looks like from outside
        return x


def segfault():
    return _Segfault(), (torch.ones(2),)
