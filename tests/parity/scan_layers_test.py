"""scan_layers(): per-layer comparison of torch_xla's scan_layers with a Python loop on XLA and
with CPU eager. A layer perturbed on purpose at index k is the first divergent layer; the #8747
stack in bf16 mismatches CPU in every layer, all of it rounding placement; torch_xla's own scan
test configuration gets a verdict its explanation agrees with."""

import copy

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


@pytest.mark.parametrize("dtype, k", [("fp32", 0), ("fp32", 4), ("bf16", 2)])
def test_perturbed_layer_is_the_first_divergent(k, dtype):
    layers, x = _stack(k)
    r = parity.scan_layers(layers, x, dtype=dtype)
    assert r.first_divergent_layer == k
    assert r.verdict == parity.Verdict.FAIL
    assert all(l.scan_vs_loop.passed for l in r.layers)  # both XLA paths carry the perturbation
    assert r.layers[k].cause == "real difference" and not r.layers[k].rounding_explained
    assert r.explanation.startswith(f"FAIL: layer {k} of 5 is the first divergent layer")
    assert all(not l.diverges for l in r.layers[:k])


def test_unperturbed_fp32_stack_agrees_everywhere():
    layers, x = _stack(k=None)
    r = parity.scan_layers(layers, x, dtype="fp32")
    assert r.verdict == parity.Verdict.PASS and r.explanation.startswith("PASS:")
    assert r.first_divergent_layer is None and r.first_mismatched_layer is None
    assert len(r.layers) == 5 and all(l.xla_vs_cpu.passed for l in r.layers)


def test_issue_8747_bf16_every_layer_is_rounding_not_divergence():
    layers, reference, x = parity.scan_patched_linear_example("bf16")
    r = parity.scan_layers(layers, x, dtype="bf16", reference_layers=reference)
    assert r.reproduced and r.hlo_math == "same"
    # scan == loop bit for bit in bf16
    assert all(l.scan_vs_loop.ulp_histogram["0"] == l.scan_vs_loop.total for l in r.layers)
    assert r.first_mismatched_layer is not None  # CPU eager disagrees...
    assert all(l.cause == "rounding placement" for l in r.layers)  # ...only by rounding placement
    assert r.first_divergent_layer is None
    assert r.verdict == parity.Verdict.FAIL  # the final output fails the comparator
    assert r.explanation.startswith("FAIL: the stack's final output mismatches CPU eager")
    assert "no layer diverges beyond rounding" in r.explanation


def test_torch_xla_scan_test_configuration_verdict_agrees_with_its_explanation():
    # test/scan/test_scan_layers.py::test_linear_layers: 10 x Linear(64, 64), a 1-D input, fp32.
    torch.manual_seed(42)
    layers = [torch.nn.Linear(64, 64) for _ in range(10)]
    x = torch.randn(64)
    r = parity.scan_layers(layers, x, dtype="fp32")
    assert r.explanation.startswith(r.verdict.value + ":")
    # Scan and loop are not bit-identical in fp32 here, but agree within tolerances, and XLA
    # matches CPU eager: nothing diverges, so the verdict is PASS.
    assert all(l.scan_vs_loop.passed for l in r.layers)
    assert all(l.xla_vs_cpu.passed for l in r.layers)
    assert r.verdict == parity.Verdict.PASS and r.first_divergent_layer is None
    assert "every layer matches CPU eager" in r.explanation


def test_arguments_are_checked():
    with pytest.raises(parity.ParityError, match="layers"):
        parity.scan_layers([], torch.ones(2))
    with pytest.raises(parity.ParityError, match="reference_layers"):
        parity.scan_layers([torch.nn.Linear(2, 2)], torch.ones(2), reference_layers=[])
    with pytest.raises(TypeError, match=r"x\[0\]"):
        parity.scan_layers([torch.nn.Linear(2, 2)], [1.0, 2.0])
    with pytest.raises(TypeError, match=r"x\['step'\]"):
        parity.scan_layers([torch.nn.Linear(2, 2)], {"h": torch.ones(2), "step": 3})
    with pytest.raises(TypeError, match="floating-point"):
        parity.scan_layers([torch.nn.Linear(2, 2)], (torch.ones(2, dtype=torch.long),))


def test_fp32_long_dots_are_reassociation_not_divergence():
    torch.manual_seed(0)
    layers = [torch.nn.Linear(1024, 1024) for _ in range(3)]
    r = parity.scan_layers(layers, torch.randn(16, 1024) * 100, dtype="fp32")
    assert r.first_mismatched_layer is not None  # fp32 CPU eager and XLA sum in different orders
    assert all(l.scan_vs_loop.passed for l in r.layers)
    mismatched = [l for l in r.layers if not l.xla_vs_cpu.passed]
    assert mismatched and all(l.cause == "reassociation" for l in mismatched)
    assert r.first_divergent_layer is None
    assert "reassociation" in r.explanation.lower()


class TwoStreams(torch.nn.Module):
    """A layer with a tuple carry (scan_layers calls it with the tuple as its arguments); layer k's
    ``offset`` moves its second output on XLA only."""

    def __init__(self, offset=0.0):
        super().__init__()
        self.a = torch.nn.Linear(16, 16)
        self.b = torch.nn.Linear(16, 16)
        self.register_buffer("offset", torch.tensor(float(offset)))

    def forward(self, x, h):
        h2 = self.b(h) * 0.5 + torch.tanh(x)
        if h.device.type == "xla":
            h2 = h2 + self.offset
        return torch.tanh(self.a(x) + h), h2


class DictCarry(torch.nn.Module):
    """A layer with a dict carry holding a tuple (any pytree is one argument)."""

    def __init__(self, offset=0.0):
        super().__init__()
        self.inner = TwoStreams(offset)

    def forward(self, carry):
        x, h = self.inner(*carry["streams"])
        return {"streams": (x, h), "scale": carry["scale"] * 0.5}


def _carry_stack(cls, k, n=4, offset=0.25):
    torch.manual_seed(3)
    return [cls(offset if i == k else 0.0) for i in range(n)]


def _cpu_loop(layers, carry):
    with torch.no_grad():
        for layer in layers:
            carry = layer(*carry) if isinstance(carry, tuple) else layer(carry)
    return carry


@pytest.mark.parametrize("cls", [TwoStreams, DictCarry])
def test_pytree_carries_run_as_torch_xla_scan_layers_runs_them(cls):
    """Oracle: torch_xla's own scan_layers on the same layers and carry, and the loop on the CPU."""
    import torch_xla
    from torch.utils._pytree import tree_flatten, tree_map
    from torch_xla.experimental.scan_layers import scan_layers as torch_xla_scan_layers

    layers = _carry_stack(cls, k=None)
    x, h = torch.randn(4, 16), torch.randn(4, 16)
    carry = (x, h) if cls is TwoStreams else {"streams": (x, h), "scale": torch.ones(3)}
    dev = torch_xla.device()
    with torch.no_grad():
        theirs = torch_xla_scan_layers([copy.deepcopy(l).to(dev) for l in layers],
                                       tree_map(lambda t: t.to(dev), carry))
    theirs = tree_map(lambda t: t.cpu(), theirs)
    loop = _cpu_loop(layers, carry)
    t_leaves, t_spec = tree_flatten(theirs)
    l_leaves, l_spec = tree_flatten(loop)
    assert t_spec == l_spec
    for a, b in zip(t_leaves, l_leaves):
        torch.testing.assert_close(a, b)  # the configuration is valid for torch_xla's scan_layers

    r = parity.scan_layers(layers, carry, dtype="fp32")
    assert r.verdict == parity.Verdict.PASS, r.explanation
    assert len(r.layers) == 4 and all(l.scan_vs_loop.passed for l in r.layers)
    # the report's outputs are the carry's leaves, as torch_xla's scan_layers returns them
    assert len(r.outputs) == len(t_leaves)


@pytest.mark.parametrize("cls, dtype, k", [(TwoStreams, "fp32", 2), (DictCarry, "bf16", 1)])
def test_perturbed_layer_in_a_pytree_carry_is_the_first_divergent(cls, dtype, k):
    layers = _carry_stack(cls, k)
    x, h = torch.randn(4, 16), torch.randn(4, 16)
    carry = (x, h) if cls is TwoStreams else {"streams": (x, h), "scale": torch.ones(3)}
    r = parity.scan_layers(layers, carry, dtype=dtype)
    assert r.first_divergent_layer == k, r.explanation
    assert all(not l.diverges for l in r.layers[:k])
    assert r.layers[k].cause == "real difference"
