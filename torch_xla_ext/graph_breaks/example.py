"""The embedded example: a 3-layer MLP with the three classic breaks, each switchable.

A ``print`` (a Dynamo graph break), a data-dependent ``if`` (a graph break in Dynamo, a host
round trip in lazy mode) and ``digamma`` (no XLA lowering: a CPU fallback, so the openxla
bridge splits the graph around it).

Example:
    >>> model, args = example()
    >>> model(*args).shape
    torch.Size([4, 16])
"""

from __future__ import annotations

from typing import Any

__all__ = ["DISCARD", "example", "example_inputs", "example_model"]


def example_model(print_break: bool = True, data_dependent_if: bool = True, digamma: bool = True, width: int = 16):
    """The example MLP (seeded weights) with the chosen breaks."""
    import torch

    class ExampleModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.l1 = torch.nn.Linear(width, width)
            self.l2 = torch.nn.Linear(width, width)
            self.l3 = torch.nn.Linear(width, width)

        def forward(self, x):
            h = torch.relu(self.l1(x))
            if print_break:
                print("graph_breaks example: after layer 1", file=DISCARD)
            h = self.l2(h)
            if data_dependent_if:
                if h.sum() > 0:
                    h = h * 2
                else:
                    h = h - 1
            if digamma:
                h = torch.digamma(h.abs() + 1)
            return self.l3(h)

    torch.manual_seed(0)
    return ExampleModel()


def example_inputs(batch: int = 4, width: int = 16):
    """``(x,)``: one seeded CPU batch for :func:`example_model`."""
    import torch

    g = torch.Generator().manual_seed(1)
    return (torch.randn(batch, width, generator=g),)


def example() -> tuple[Any, tuple]:
    """``(model, args)``: the example with every break, as a ``--model`` factory returns it
    (``torch-xla-ext graph-breaks`` without ``--model`` runs this)."""
    return example_model(), example_inputs()


class _Discard:
    """A text stream that drops what is written: where the examples' prints go (a print is a
    graph break whatever its file)."""

    def write(self, s: str) -> int:
        return len(s)

    def flush(self) -> None:
        pass


DISCARD = _Discard()
