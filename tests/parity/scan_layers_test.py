"""scan_layers(): per-layer comparison of torch_xla's scan_layers with a Python loop on XLA and
with CPU eager. A layer perturbed on purpose at index k is the first divergent layer; the
#8747 stack in bf16 mismatches CPU in every layer, all of it rounding placement."""

import pytest
import torch

from torch_xla_ext import parity


class Offset(torch.nn.Module):
    """A Linear whose output moves by `offset` on XLA only: a lowering bug made on purpose.
    Every layer has the buffer (scan_layers needs one structure); only layer k's is non-zero."""

    def __init__(self, offset):
        super().__init__()
        self.lin = torch.nn.Linear(32, 32)
        self.register_buffer("offset", torch.tensor(float(offset)))

    def forward(self, x):
        y = self.lin(x)
        return y + self.offset if x.device.type == "xla" else y


def _stack(k, n=5, offset=0.5):
    torch.manual_seed(1)
    return [Offset(offset if i == k else 0.0) for i in range(n)], torch.randn(4, 32)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("k", [0, 2, 4])
def test_perturbed_layer_is_the_first_divergent(k, dtype):
    layers, x = _stack(k)
    r = parity.scan_layers(layers, x, dtype=dtype)
    assert r.first_divergent_layer == k
    assert r.verdict == parity.Verdict.FAIL
    assert all(l.scan_vs_loop.passed for l in r.layers)  # both XLA paths carry the perturbation
    assert r.layers[k].cause == "unexplained" and not r.layers[k].rounding_explained
    assert f"layer {k}" in r.explanation
    assert all(not l.diverges for l in r.layers[:k])


def test_unperturbed_fp32_stack_agrees_everywhere():
    layers, x = _stack(k=None)
    r = parity.scan_layers(layers, x, dtype="fp32")
    assert r.verdict == parity.Verdict.PASS
    assert r.first_divergent_layer is None and r.first_mismatched_layer is None
    assert len(r.layers) == 5 and all(l.xla_vs_cpu.ulp_histogram["0"] == 128 for l in r.layers)


def test_issue_8747_bf16_every_layer_is_rounding_not_divergence():
    layers, reference, x = parity.scan_patched_linear_example("bf16")
    r = parity.scan_layers(layers, x, dtype="bf16", reference_layers=reference)
    assert r.emulation == "matches" and r.hlo_math == "same"
    assert all(l.scan_vs_loop.passed for l in r.layers)  # scan == loop bit for bit in bf16
    assert r.first_mismatched_layer is not None  # CPU eager disagrees...
    assert all(l.cause == "rounding placement" for l in r.layers)  # ...only by rounding placement
    assert r.first_divergent_layer is None
    assert "no layer diverges beyond rounding" in r.explanation


def test_issue_8747_fp32_per_layer_exact():
    layers, reference, x = parity.scan_patched_linear_example("fp32")
    r = parity.scan_layers(layers, x, dtype="fp32", reference_layers=reference)
    assert r.passed and r.first_divergent_layer is None
    assert all(l.xla_vs_cpu.ulp_histogram["0"] == 7680 and l.scan_vs_loop.passed for l in r.layers)


def test_arguments_are_checked():
    with pytest.raises(parity.ParityError, match="layers"):
        parity.scan_layers([], torch.ones(2))
    with pytest.raises(parity.ParityError, match="reference_layers"):
        parity.scan_layers([torch.nn.Linear(2, 2)], torch.ones(2), reference_layers=[])


def test_fp32_long_dots_are_reassociation_not_divergence():
    torch.manual_seed(0)
    layers = [torch.nn.Linear(1024, 1024) for _ in range(3)]
    r = parity.scan_layers(layers, torch.randn(16, 1024) * 100, dtype="fp32")
    assert r.first_mismatched_layer is not None  # fp32 CPU eager and XLA sum in different orders
    assert all(l.scan_vs_loop.passed for l in r.layers)
    assert [l.cause for l in r.layers if not l.xla_vs_cpu.passed] == ["reassociation"] * sum(
        not l.xla_vs_cpu.passed for l in r.layers)
    assert r.first_divergent_layer is None
    assert "reassociation" in r.explanation
