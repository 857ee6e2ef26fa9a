"""Localisation's CPU shadow runs each module with its weights cast to the run's dtype inside the
fp64 golden's own memory (no second copy of the model; docs/scale.md, "Where localize's memory
goes"). The figures it reads must still be those of CPU eager on the module's own inputs, the
golden must get its fp64 weights back after every call, and the user's model (tied weights, a
buffer registered in two modules, a non-contiguous weight) must come back untouched.

Oracles: torch's own ``F.linear`` / ``F.layer_norm`` run here in the run's dtype, in the exact
shadow's dtype (float64; float32 for a bf16/fp16 run) and in float64 on the inputs the XLA run gave
each module (read from the capture), and a copy of the user's state.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from torch_xla_ext import parity


class Tied(torch.nn.Module):
    """Two linears sharing one non-contiguous weight, a layer norm, a buffer registered in the
    root and in the norm, used by the root's own forward."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Linear(16, 16)
        self.norm = torch.nn.LayerNorm(16)
        self.b = torch.nn.Linear(16, 16)
        self.a.weight = torch.nn.Parameter(torch.randn(16, 16).t() / 4)
        self.b.weight = self.a.weight
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)
        self.register_buffer("shift", torch.randn(16))
        self.norm.register_buffer("shift", self.shift)

    def forward(self, x):
        return self.b(self.norm(torch.relu(self.a(x))) + self.shift)


def _rms(d):
    return math.sqrt(float(d.double().square().mean()))


def _state(model):
    return {k: v.detach().clone() for k, v in model.state_dict(keep_vars=True).items()}


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_cpu_shadow_reads_cpu_eager_in_the_run_dtype_and_the_golden_gets_fp64_back(dtype):
    model = Tied().eval()
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(1))
    before = _state(model)
    td = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    cap = parity.capture(model, (x,), dtype=dtype)
    report = parity.compare_capture(cap, model, (x,))
    calls = {c.path: c for c in cap.calls}
    rows = {m.path: m for m in report.modules}

    # The exact shadow: fp64, or fp32 for a bf16/fp16 run (2^13-2^16 finer than its roundings).
    wide = torch.float64 if dtype == "fp32" else torch.float32

    def agrees(figure, against, exact64, level):
        """A figure against the fp64 oracle: to 1e-9 with an fp64 shadow; with an fp32 one, within
        its own roundoff (|rms(v - e) - rms(v - e64)| <= rms(e - e64), a few float32 units of the
        output here), which must be far below the run's rounding level."""
        expected = _rms(against.double() - exact64)
        if wide == torch.float64:
            assert figure == pytest.approx(expected, rel=1e-9, abs=0)
        else:
            bound = 16 * torch.finfo(torch.float32).eps * _rms(exact64)
            assert abs(figure - expected) <= bound
            assert bound <= 1e-2 * level  # the divergence threshold is 3.6x the level

    checked = 0
    for path, fn, names in (("a", F.linear, [("a", "weight"), ("a", "bias")]),
                            ("b", F.linear, [("b", "weight"), ("b", "bias")]),
                            ("norm", lambda h, w, b: F.layer_norm(h, (16,), w, b), [("norm", "weight"),
                                                                                   ("norm", "bias")])):
        xin = calls[path].inputs["[0][0]"]  # what XLA gave the module, in dtype
        run = [getattr(getattr(model, m), t).detach().to(td) for m, t in names]  # CPU eager's weights
        cpu = fn(xin.to(td), *run)
        exact64 = fn(xin.double(), *[w.double() for w in run])  # the golden's weights: through dtype
        xla_out = calls[path].outputs[""]
        # rounding: CPU eager in dtype vs the shadow; own: XLA vs the shadow (after earlier calls
        # restored the golden)
        agrees(rows[path].cpu_rounding, cpu, exact64, rows[path].cpu_rounding)
        agrees(rows[path].own_error, xla_out, exact64, rows[path].cpu_rounding)
        checked += 1
    assert checked == 3
    # the root re-runs every module: its exact shadow reads the golden after all three calls put
    # their weights back, its CPU shadow every weight (and the shared buffer) in dtype
    def whole(h, w):
        h = F.linear(h, w["a.weight"], w["a.bias"])
        h = F.layer_norm(torch.relu(h), (16,), w["norm.weight"], w["norm.bias"]) + w["shift"]
        return F.linear(h, w["b.weight"], w["b.bias"])

    run = {k: v.to(td) for k, v in before.items()}
    xin = calls[""].inputs["[0][0]"]
    exact64 = whole(xin.double(), {k: v.double() for k, v in run.items()})
    agrees(rows[""].cpu_rounding, whole(xin.to(td), run), exact64, rows[""].cpu_rounding)
    agrees(rows[""].own_error, calls[""].outputs[""], exact64, rows[""].cpu_rounding)
    if dtype != "fp32":  # a shadow run in fp64 weights would round far less than one unit of dtype
        eps = torch.finfo(td).eps
        assert rows["b"].cpu_rounding > eps / 64 * _rms(calls["b"].outputs[""].double())
    # compare_capture keeps the caller's capture whole; the user's model is untouched
    assert all(c.inputs and c.outputs for c in cap.calls)
    after = _state(model)
    assert after.keys() == before.keys()
    for k in before:
        assert after[k].dtype == before[k].dtype and torch.equal(after[k], before[k]), k
    assert model.b.weight is model.a.weight and model.norm.shift is model.shift
    assert not model.a.weight.is_contiguous()


def test_verify_localize_leaves_the_model_as_it_was():
    model = Tied().eval()
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(2))
    before = _state(model)
    r = parity.verify(model, (x,), dtype="bf16", localize=True)
    assert [m.path for m in r.modules] == ["a", "norm", "b", ""]
    assert r.first_divergent_module is None  # nothing planted: rounding explains every module
    after = _state(model)
    for k in before:
        assert after[k].dtype == before[k].dtype and torch.equal(after[k], before[k]), k
    assert model.b.weight is model.a.weight and model.norm.shift is model.shift


class KeepsAView(torch.nn.Module):
    """Eight linears of one shape; the root reads the first one's weight through a view it keeps
    until every other layer has run (the golden's widened copies of the others then come and go)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(32, 32, bias=False) for _ in range(8))

    def forward(self, x):
        kept = self.layers[0].weight.t()  # a view of the golden's float64 copy of that weight
        h = x @ kept
        for layer in self.layers[1:]:
            h = torch.tanh(layer(h))
        return h @ kept


def test_the_golden_never_reuses_the_memory_of_a_weight_copy_still_in_view():
    """The golden holds a few widened weights and writes a new one into the memory of one that
    left (golden.py). A view kept across the other layers must still read its own weight. Oracle:
    the model in float64 on the bf16-rounded weights and input, run by torch directly."""
    from torch_xla_ext.parity.stages import localization

    model = KeepsAView().eval()
    x = torch.randn(4, 32, generator=torch.Generator().manual_seed(4))
    cap = parity.capture(model, (x,), dtype="bf16")
    found = localization.module_pass(cap, model, (x,), {}, 0)
    reference = KeepsAView().eval()
    reference.load_state_dict(model.state_dict())
    reference = reference.to(torch.bfloat16).to(torch.float64)
    with torch.no_grad():
        want = reference(x.to(torch.bfloat16).to(torch.float64))
    (path, golden), = found.golden
    assert torch.equal(golden, want), float((golden - want).abs().max())
    # The shadows of the seven layers called as modules ran too (each widened its weight again).
    assert sorted(m.path for m in found.modules) == sorted([""] + [f"layers.{i}" for i in range(1, 8)])
