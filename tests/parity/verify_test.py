"""verify() on real torch_xla (PJRT CPU): the pytorch/xla#8747 configuration (scan over 4
nn.Linear(128, 128) patched with apply_xla_patch_to_nn_linear, input (3, 4, 5, 128)) is exact
in fp32 and, in bf16, explained as rounding placement; a nondeterministic reference, an
exception and a genuinely different program each get their verdict."""

import copy

import numpy as np
import pytest
import torch

from torch_xla_ext import numerics, parity
from torch_xla_ext._compat.scan import scan_layers


class Stack(torch.nn.Module):
    """scan_layers on XLA when `scan`, a Python loop otherwise (as the upstream test's model)."""

    def __init__(self, layers, scan):
        super().__init__()
        self.layers = torch.nn.ModuleList(layers)
        self.scan = scan

    def forward(self, x):
        if self.scan and x.device.type == "xla":
            return scan_layers(list(self.layers), x)
        for layer in self.layers:
            x = layer(x)
        return x


@pytest.fixture(scope="module")
def issue_8747():
    layers, reference, x = parity.scan_patched_linear_example()
    assert all(type(l).__name__ == "EinsumLinear" for l in layers)  # the patch is applied
    assert all(type(l) is torch.nn.Linear for l in reference)
    return Stack(layers, scan=True), Stack(reference, scan=False), x


@pytest.fixture(scope="module")
def bf16_report(issue_8747):
    fn, reference, x = issue_8747
    return parity.verify(fn, (x,), dtype="bf16", reference=reference)


def test_fp32_is_bit_identical(issue_8747):
    fn, reference, x = issue_8747
    r = parity.verify(fn, (x,), dtype="fp32", reference=reference)
    assert r.verdict == parity.Verdict.PASS and r.passed
    (o,) = r.outputs
    assert o.xla_vs_cpu.total == 3 * 4 * 5 * 128
    assert o.xla_vs_cpu.ulp_histogram["0"] == o.xla_vs_cpu.total  # bit for bit, not just close
    assert o.closer == "tie" and o.xla_error == o.cpu_error
    assert r.rounding_points == ()  # nothing is stored in a narrow float
    assert r.hlo_math == "same"
    assert "XLA matches CPU eager" in r.explanation


def test_bf16_mismatch_is_explained_as_rounding_placement(bf16_report):
    r = bf16_report
    (o,) = r.outputs
    assert r.verdict == parity.Verdict.FAIL
    assert o.xla_vs_cpu.mismatched > 0
    # XLA equals the reference rebuilt from its own HLO with its roundings, on every element...
    assert r.emulation == "matches"
    assert o.emulated.mismatched == 0 and o.emulated.total == 7680
    # ...and the HLO without roundings is the reference's math.
    assert r.hlo_math == "same" and o.unrounded.passed
    doubles = [p for p in r.rounding_points if p.after]
    assert {(p.after_opcode, p.opcode) for p in doubles} == {("dot", "add")}
    assert all(p.element_type == "bf16" for p in doubles)
    # The explanation says so and gives both errors against fp64.
    assert "rounding placement" in r.explanation
    assert "XLA matches the rounding-emulated reference" in r.explanation
    assert "7680/7680" in r.explanation
    assert f"XLA's greatest error is {o.xla_error:.3g}" in r.explanation
    assert f"CPU eager's is {o.cpu_error:.3g}" in r.explanation
    assert f"{o.xla_vs_cpu.mismatched}/7680 elements mismatch" in r.explanation


def test_bf16_errors_against_an_independent_golden_and_double_rounding(issue_8747, bf16_report):
    _, reference, x = issue_8747
    (o,) = bf16_report.outputs
    # Golden: the reference's math in fp64 on the bf16 values both sides received.
    h64 = x.bfloat16().double()
    h = x.bfloat16()
    for lin in reference.layers:
        w, b = lin.weight.detach().bfloat16(), lin.bias.detach().bfloat16()
        h64 = h64 @ w.double().T + b.double()
        # XLA's placement, written out by hand: round the dot to bf16, then round the add.
        h = ((h.float() @ w.float().T).bfloat16().float() + b.float()).bfloat16()
    assert o.xla_error == pytest.approx(float((h.double() - h64).abs().max()), rel=1e-9)
    assert o.xla_error > o.cpu_error and o.closer == "cpu"
    assert o.emulated_error == o.xla_error


def test_report_renders_and_serialises(bf16_report):
    text = str(bf16_report)
    assert text.startswith("Parity verdict: FAIL (bfloat16)")
    assert "XLA vs rounding-emulated reference: 7680/7680 bit-identical" in text
    import json

    d = json.loads(bf16_report.to_json())
    assert d["verdict"] == "FAIL" and d["emulation"] == "matches" and d["hlo_math"] == "same"
    assert d["outputs"][0]["emulated"]["mismatched"] == 0


def test_a_different_program_is_not_called_rounding():
    x = torch.randn(64)
    r = parity.verify(lambda t: t * 1.001, (x,), reference=lambda t: t, dtype="fp32")
    assert r.verdict == parity.Verdict.FAIL
    assert r.emulation == "matches"  # XLA runs its HLO faithfully...
    assert r.hlo_math == "differs"  # ...but the HLO is not the reference's math
    assert "it is not rounding" in r.explanation
    assert "rounding placement, not a lowering bug" not in r.explanation


class Drifting(torch.nn.Module):
    """A reference that changes between calls: nondeterministic on purpose."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return x * (1 + 1e-3 * self.calls)


def test_nondeterministic_reference():
    drifting = Drifting()
    r = parity.verify(lambda t: t * 1.0, (torch.randn(16),), reference=lambda t: drifting(t), dtype="fp32")
    assert r.verdict == parity.Verdict.NONDETERMINISTIC_REFERENCE
    path, report = r.nondeterminism
    assert report.mismatched == 16
    assert "Two CPU eager runs" in r.explanation and r.outputs == ()


def test_seeded_randomness_is_not_nondeterminism():
    # The RNG is reset before each run, as pytorch/xla's verifier does.
    r = parity.verify(torch.nn.Dropout(0.5).train(), (torch.ones(64),), dtype="fp32")
    assert r.verdict != parity.Verdict.NONDETERMINISTIC_REFERENCE


def test_exception_names_the_stage():
    def broken_on_xla(t):
        if t.device.type == "xla":
            raise RuntimeError("boom on xla")
        return t + 1

    r = parity.verify(broken_on_xla, (torch.randn(4),), dtype="fp32")
    assert r.verdict == parity.Verdict.EXCEPTION and r.stage == "XLA"
    assert "boom on xla" in r.exception and "boom on xla" in r.explanation


def test_assert_parity_raises_with_the_explanation(issue_8747):
    fn, reference, x = issue_8747
    report = parity.assert_parity(fn, (x,), dtype="fp32", reference=reference)
    assert report.passed
    with pytest.raises(AssertionError) as info:
        parity.assert_parity(fn, (x,), dtype="bf16", reference=reference)
    assert "rounding placement" in str(info.value)
    assert "Parity verdict: FAIL" in str(info.value)


def test_arguments_are_checked():
    with pytest.raises(parity.ParityError, match="dtype"):
        parity.verify(lambda t: t, (torch.ones(2),), dtype="int7")
    with pytest.raises(parity.ParityError, match="rtol and atol"):
        parity.verify(lambda t: t, (torch.ones(2),), rtol=1e-3)
    with pytest.raises(parity.ParityError, match="fn"):
        parity.verify(3, (torch.ones(2),))


def test_fp32_long_reduction_is_reassociation_not_rounding():
    # K = 4096 with large inputs: XLA:CPU and CPU eager sum the dot in different orders.
    torch.manual_seed(0)
    lin = torch.nn.Linear(4096, 64)
    r = parity.verify(lin, (torch.randn(64, 4096) * 100,), dtype="fp32")
    (o,) = r.outputs
    assert r.verdict == parity.Verdict.FAIL and o.xla_vs_cpu.mismatched > 0
    assert r.rounding_points == ()  # nothing narrow: not rounding placement
    assert r.hlo_math == "same" and r.emulation == "differs"
    assert "reassociation" in r.explanation
    assert "rounding placement, not a lowering bug" not in r.explanation
    assert o.xla_error <= 2 * o.cpu_error


def test_callers_rng_state_is_left_alone():
    import torch_xla.core.xla_model as xm

    torch.manual_seed(123)
    lin, x = torch.nn.Linear(4, 4), torch.randn(2, 4)
    xm.set_rng_state(77)
    state = torch.get_rng_state()
    parity.verify(lin, (x,), dtype="fp32", seed=5)
    assert torch.equal(torch.get_rng_state(), state)
    assert xm.get_rng_state() == 77


BF16_PROGRAMS = {
    # (x * 1.7 + 0.3) * x - 0.1: torch_xla lowers the scalars through f32 converts; XLA keeps the
    # bf16 add in f32 (excess precision), which the replay must model to be bit-identical.
    "scalar_chain": lambda: (lambda t: (t * 1.7 + 0.3) * t - 0.1),
    "gelu": lambda: torch.nn.GELU(),  # erf
    "layer_norm": lambda: torch.nn.LayerNorm(64),  # batch-norm-training
    "mlp": lambda: torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64)),
    "tanh_div": lambda: (lambda t: torch.tanh(t) / (t.abs() + 1)),
}


@pytest.mark.parametrize("name", sorted(BF16_PROGRAMS))
def test_bf16_replay_is_bit_identical_to_xla(name):
    torch.manual_seed(0)
    fn = BF16_PROGRAMS[name]()
    r = parity.verify(fn, (torch.randn(8, 64),), dtype="bf16")
    assert r.emulation == "matches", r
    assert r.outputs[0].emulated.total == r.outputs[0].emulated.total - r.outputs[0].emulated.mismatched
    assert r.hlo_math == "same"


def test_bf16_reductions_are_not_bit_identical_and_say_so():
    # XLA:CPU's summation order inside a bf16 reduce is not modelled: the replay is close, not
    # exact, and the verdict must not call that a lowering bug.
    torch.manual_seed(0)
    r = parity.verify(lambda t: t.sum(-1), (torch.randn(8, 64),), dtype="bf16")
    assert r.emulation == "differs" and r.hlo_math == "same"
    assert "lowering bug" not in r.explanation
    assert "reduces in bf16" in r.explanation or "reassociation" in r.explanation
