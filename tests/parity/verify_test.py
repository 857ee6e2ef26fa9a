"""verify() on real torch_xla (PJRT CPU): the pytorch/xla#8747 configuration (scan over 4
nn.Linear(128, 128) patched with apply_xla_patch_to_nn_linear, input (3, 4, 5, 128)) is exact in
fp32 and, in bf16, explained as rounding placement with XLA within the rounded replay's bound (their
bit-equality is a printed figure: torch_xla's and jaxlib's XLA are two builds);
a different program is a real difference; reassociation; a nondeterministic reference; the
user's exception; bad input raising; pytree outputs and keyword inputs."""

import collections
import copy
import dataclasses
import json
import os

import ml_dtypes
import numpy as np
import pytest
import torch

from torch_xla_ext import parity
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


def test_fp32_passes(issue_8747):
    fn, reference, x = issue_8747
    r = parity.verify(fn, (x,), dtype="fp32", reference=reference)
    assert r.verdict == parity.Verdict.PASS and r.passed
    (o,) = r.outputs
    assert o.xla_vs_cpu.total == 3 * 4 * 5 * 128
    # XLA's Eigen and CPU eager's sgemm sum K=128 dots in orders that depend on the CPU: bit-equality
    # (7680/7680 on the first machine) is a figure; a difference can only be summation order.
    print(f"fp32 XLA vs CPU eager: {o.xla_vs_cpu.ulp_histogram.get('0', 0)}/{o.xla_vs_cpu.total} bit-identical")
    assert o.cause in (None, "reassociation")
    assert r.rounding_points == ()  # nothing is stored in a narrow float
    assert r.hlo_math == "same" and r.emulation in ("matches", "differs") and r.reproduced
    assert r.explanation.startswith("PASS: XLA matches CPU eager")


def test_bf16_mismatch_is_rounding_placement_with_the_run_within_the_replays_bound(bf16_report):
    r = bf16_report
    (o,) = r.outputs
    assert r.verdict == parity.Verdict.FAIL and o.xla_vs_cpu.mismatched > 0
    # XLA equals its program replayed with XLA:CPU's roundings within what evaluation order can
    # change (the #8747 numbers); bit for bit is a figure (two XLA builds, two CPUs).
    assert r.reproduced and o.reproduced and o.replay_distance <= o.replay_bound
    assert o.emulated.total == 7680
    print(f"XLA vs rounded replay: {o.emulated.total - o.emulated.mismatched}/7680 bit-equal, greatest difference "
          f"{o.replay_distance:.3g}, bound {o.replay_bound:.3g}")
    # The bound is far below a real difference: a bf16 rounding's worth of the output, not more.
    assert o.replay_bound <= 4 * o.xla_error
    # ...and the program without roundings is the reference's math. It rounds to bf16, so that
    # replay ran in f32: 16 more mantissa bits than bf16, so its error against the fp64 golden
    # must sit far below the rounded replay's (2^8 of slack on that 2^16).
    assert r.hlo_math == "same" and o.same_math and r.unrounded_replay == "f32"
    assert 0 < o.unrounded_error <= 2.0 ** -8 * o.emulated_error, (o.unrounded_error, o.emulated_error)
    assert "run exact f64 replay" not in r.seconds  # nothing to confirm
    doubles = [p for p in r.rounding_points if p.after]
    assert ("dot_general", "add") in {(p.after_opcode, p.opcode) for p in doubles}
    assert all(p.element_type == "bf16" for p in r.rounding_points)
    assert o.cause == "rounding placement" and r.causes == {"": "rounding placement"}
    assert r.explanation.startswith(f"FAIL: {o.xla_vs_cpu.mismatched}/7680 elements mismatch")
    assert "Rounding placement explains output(s) <root>" in r.explanation
    assert "within what evaluation order can change between two XLA builds" in r.explanation
    assert f"XLA's greatest error is {o.xla_error:.3g}" in r.explanation
    assert f"CPU eager's is {o.cpu_error:.3g}" in r.explanation


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
    assert o.scale == pytest.approx(float(h64.abs().max()), rel=1e-12)
    assert o.xla_error > o.cpu_error and o.closer == "cpu"
    # The replay's error is XLA's up to their distance (equal when they are bit-equal).
    assert abs(o.emulated_error - o.xla_error) <= o.replay_distance


def test_report_renders_and_serialises(bf16_report):
    text = str(bf16_report)
    assert text.startswith("Parity verdict: FAIL (bfloat16)")
    rounding = text.split("== Rounding ==")[1].split("== ")[0]  # the replay table: XLA - rounded replay
    assert "XLA - rounded replay" in rounding and "bound" in rounding
    d = json.loads(bf16_report.to_json())
    assert d["verdict"] == "FAIL" and d["reproduced"] is True and d["hlo_math"] == "same"
    # rules="auto" by default: on this CPU, XLA:CPU's own rules, read from the device.
    assert d["emulation"] in ("matches", "differs") and d["rules"] == "xla-cpu"
    assert d["rules_source"].startswith("read from the device (CPU)")
    assert d["outputs"][0]["emulated"]["total"] == 7680 and d["outputs"][0]["cause"] == "rounding placement"
    assert d["seconds"]["total"] > 0 and "compile rounded replay" in d["seconds"]


def test_a_different_program_is_a_real_difference():
    x = torch.randn(64)
    r = parity.verify(lambda t: t * 1.001, (x,), reference=lambda t: t, dtype="fp32")
    assert r.verdict == parity.Verdict.FAIL
    assert r.reproduced  # XLA runs its program faithfully...
    assert r.hlo_math == "differs"  # ...but the program is not the reference's math
    assert r.outputs[0].cause == "real difference"
    assert "the program XLA ran is not the reference's math" in r.explanation
    assert "Rounding placement" not in r.explanation


def test_a_different_bf16_program_is_confirmed_by_the_exact_f64_replay():
    """In bf16 the replay without rounding runs in f32; an output it finds off the golden is only
    called a real difference after the exact f64 replay confirms it."""
    x = torch.randn(64)
    r = parity.verify(lambda t: t * 1.1, (x,), reference=lambda t: t, dtype="bf16")
    assert r.verdict == parity.Verdict.FAIL and r.rounding_points  # the multiply rounds to bf16
    assert "run exact f64 replay" in r.seconds and r.unrounded_replay == "f64"
    assert r.hlo_math == "differs" and r.outputs[0].cause == "real difference"
    # Oracle: the golden is x (the reference), the program's math x * 1.1 (the scalar stays wider
    # than bf16 in the program: f32's 1.1 and the exact 1.1 differ by 2.4e-8), in fp64.
    xb = x.bfloat16().double()
    want = float((xb * 1.1 - xb).abs().max())
    assert r.outputs[0].unrounded_error == pytest.approx(want, rel=1e-6)
    assert "Replayed in fp64 without rounding" in r.explanation


def test_an_output_of_another_shape_on_xla_is_a_fail_not_an_error():
    """torch_xla 2.9 lowers sum(x, dim=()) as no reduction (PyTorch: every dimension): the same
    function returns other shapes on the two backends, which is XLA's failure, not bad input."""
    import torch_xla

    x = torch.randn(4, 8)
    fn = lambda t: (t * 2).sum(dim=())  # noqa: E731
    on_xla, on_cpu = fn(x.to(torch_xla.device())).cpu(), fn(x)
    assert on_xla.shape != on_cpu.shape  # the oracle: both backends run directly
    r = parity.verify(fn, (x,), dtype="fp32")
    assert r.verdict == parity.Verdict.FAIL
    assert f"XLA {list(on_xla.shape)}, CPU eager {list(on_cpu.shape)}" in r.explanation
    assert "real difference" in r.explanation
    # With a reference of its own, a shape that differs is the caller's mismatch: an error.
    with pytest.raises(parity.ParityError, match="returns shape"):
        parity.verify(lambda t: t * 2, (x,), reference=lambda t: (t * 2).sum(), dtype="fp32")


def test_fp32_long_reduction_is_reassociation_not_rounding():
    # K = 4096 with large inputs: XLA:CPU and CPU eager sum the dot in different orders.
    torch.manual_seed(0)
    lin = torch.nn.Linear(4096, 64)
    r = parity.verify(lin, (torch.randn(64, 4096) * 100,), dtype="fp32")
    (o,) = r.outputs
    assert r.verdict == parity.Verdict.FAIL and o.xla_vs_cpu.mismatched > 0
    assert r.rounding_points == ()  # nothing narrow: not rounding placement
    assert r.hlo_math == "same" and o.cause == "reassociation"
    assert "Reassociation explains output(s) <root>" in r.explanation
    assert o.xla_error <= 2 * o.cpu_error


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
    assert r.explanation.startswith("NONDETERMINISTIC_REFERENCE: two CPU eager runs") and r.outputs == ()


def test_the_second_cpu_eager_run_is_made_where_an_output_is_off():
    # The reference's own calls are the oracle: the first CPU eager run and the fp64 golden, and a
    # third call only where XLA's outputs leave CPU eager's beyond the tolerances.
    def counted(calls):
        def reference(t):
            calls.append(t.dtype)
            return t * 1.0
        return reference

    x = torch.randn(16)
    within, off = [], []
    r = parity.verify(lambda t: t * 1.0, (x,), reference=counted(within), dtype="fp32")
    assert r.verdict == parity.Verdict.PASS and "second cpu" not in r.seconds
    assert within == [torch.float32, torch.float64]
    r = parity.verify(lambda t: t * 1.01, (x,), reference=counted(off), dtype="fp32")
    assert r.verdict == parity.Verdict.FAIL and "second cpu" in r.seconds
    assert off == [torch.float32, torch.float64, torch.float32]


def test_seeded_randomness_is_not_nondeterminism():
    # The RNG is reset before each run, as pytorch/xla's verifier does.
    r = parity.verify(torch.nn.Dropout(0.5).train(), (torch.ones(64),), dtype="fp32")
    assert r.verdict != parity.Verdict.NONDETERMINISTIC_REFERENCE


def test_the_users_exception_is_a_verdict_naming_the_stage():
    def broken_on_xla(t):
        if t.device.type == "xla":
            raise RuntimeError("boom on xla")
        return t + 1

    r = parity.verify(broken_on_xla, (torch.randn(4),), dtype="fp32")
    assert r.verdict == parity.Verdict.EXCEPTION and r.stage == "XLA"
    assert "boom on xla" in r.exception and r.explanation.startswith("EXCEPTION: the XLA run raised")


def test_bad_input_raises_instead_of_becoming_a_verdict():
    with pytest.raises(parity.ParityError, match="dtype"):
        parity.verify(lambda t: t, (torch.ones(2),), dtype="int7")
    with pytest.raises(parity.ParityError, match="rtol and atol"):
        parity.verify(lambda t: t, (torch.ones(2),), rtol=1e-3)
    with pytest.raises(TypeError, match="fn"):
        parity.verify(3, (torch.ones(2),))
    with pytest.raises(TypeError, match="kwargs"):
        parity.verify(lambda t: t, (torch.ones(2),), kwargs=[1])
    with pytest.raises(parity.ParityError, match="no floating-point tensor"):
        parity.verify(lambda t: t.long(), (torch.ones(2),))
    with pytest.raises(parity.ParityError, match="different floating-point outputs"):
        parity.verify(lambda t: {"a": t}, (torch.ones(2),), reference=lambda t: {"b": t})
    assert issubclass(parity.ParityError, ValueError) and issubclass(parity.ParityTypeError, TypeError)


@dataclasses.dataclass
class Out:
    hidden: torch.Tensor
    extra: dict


Pair = collections.namedtuple("Pair", "lo hi")


class PytreeModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x, *, scale, mask=None):
        h = self.lin(x) * scale
        return Out(h, {"pair": Pair(h.min(-1).values, h.max(-1).values), "ids": mask, "none": None})


def test_pytree_outputs_and_keyword_inputs():
    torch.manual_seed(0)
    r = parity.verify(PytreeModel(), (torch.randn(4, 8),), {"scale": torch.tensor(2.0), "mask": torch.ones(4).long()},
                      dtype="fp32")
    assert [o.path for o in r.outputs] == [".hidden", ".extra['pair'].lo", ".extra['pair'].hi"]
    assert r.verdict == parity.Verdict.PASS and r.reproduced


def test_bf16_elementwise_chains_reductions_and_norms_are_reproduced():
    torch.manual_seed(0)
    programs = {
        "scalar_chain": lambda t: (t * 1.7 + 0.3) * t - 0.1,  # excess precision on the add
        "gelu": torch.nn.GELU(),  # erf
        "layer_norm": torch.nn.LayerNorm(64),  # batch-norm-training
        "softmax": lambda t: torch.softmax(t, -1),  # reduces in bf16, every step rounded
        "sum": lambda t: t.sum(-1),
        "tanh_div": lambda t: torch.tanh(t) / (t.abs() + 1),
    }
    x = torch.randn(8, 64)
    for name, fn in programs.items():
        r = parity.verify(fn, (x,), dtype="bf16")
        assert r.reproduced, (name, r)
        assert r.hlo_math == "same", name
        assert r.explanation.startswith(r.verdict.value + ":"), name


def test_a_pass_says_when_the_replays_were_unavailable_and_why():
    r = parity.verify(torch.nn.Linear(4, 4), (torch.randn(2, 4),), dtype="fp32", emulate=False)
    assert r.verdict == parity.Verdict.PASS and r.emulation == "unavailable: emulate=False"
    assert "unavailable" in r.explanation and "emulate=False" in r.explanation


def test_callers_rng_state_is_left_alone():
    import torch_xla.core.xla_model as xm

    torch.manual_seed(123)
    lin, x = torch.nn.Linear(4, 4), torch.randn(2, 4)
    xm.set_rng_state(77)
    state = torch.get_rng_state()
    parity.verify(lin, (x,), dtype="fp32", seed=5)
    assert torch.equal(torch.get_rng_state(), state)
    assert xm.get_rng_state() == 77


def test_assert_parity_raises_with_the_explanation(issue_8747):
    fn, reference, x = issue_8747
    report = parity.assert_parity(fn, (x,), dtype="fp32", reference=reference)
    assert report.passed
    with pytest.raises(AssertionError) as info:
        parity.assert_parity(fn, (x,), dtype="bf16", reference=reference)
    assert "Rounding placement" in str(info.value) and "Parity verdict: FAIL" in str(info.value)


def test_model_explorer_node_data(tmp_path):
    torch.manual_seed(0)
    lin = torch.nn.Linear(32, 16)
    x = torch.randn(4, 32)
    out = str(tmp_path / "explorer")
    parity.verify(lin, (x,), dtype="bf16", explorer_dir=out)
    with open(os.path.join(out, "node_data.json")) as f:
        data = json.load(f)
    with open(os.path.join(out, "node_names.json")) as f:
        names = json.load(f)
    results = data["main"]["results"]
    edges = [t["value"] for t in data["main"]["thresholds"]]
    assert edges == sorted(edges) and edges[0] == 2.0 ** -8  # white up to bf16's unit roundoff
    assert results and all(set(v) == {"value"} and v["value"] >= 0 for v in results.values())
    program = open(os.path.join(out, "program.mlir")).read()
    assert "stablehlo.dot" in program
    # The node ids are Model Explorer's (the real adapter checks them in model_explorer_test.py).
    from torch_xla_ext.parity import explorer

    assert set(results) <= set(explorer.node_ids(program)["main"])
    # The dot's value, independently: |bf16(dot) - dot| / max|dot| from the bf16 operands in fp64.
    (dot_id,) = [k for k, v in names.items() if v.startswith("dot")]
    xb = x.bfloat16().double().numpy()
    wb = lin.weight.detach().bfloat16().double().numpy()
    exact = xb @ wb.T
    rounded = exact.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)
    want = np.abs(rounded - exact).max() / np.abs(exact).max()
    assert results[dot_id]["value"] == pytest.approx(want, rel=0.05)


def test_doctor_shows_an_exception_verdict_as_an_error_row(tmp_path):
    from torch_xla_ext import doctor

    class FailsOnXla(torch.nn.Module):
        def forward(self, x):
            if x.device.type == "xla":
                raise RuntimeError("no lowering here")
            return x * 2

    with pytest.raises(doctor.SectionFailed) as info:
        doctor.parity_section(FailsOnXla, (torch.randn(4),), {}, str(tmp_path))
    assert "EXCEPTION" in info.value.summary
    assert info.value.data["fp32"]["verdict"] == "EXCEPTION"


def test_model_copies_are_cast_tensor_by_tensor_like_module_to():
    # verify copies the model per run without a float32 copy of the whole model first; the copy
    # must be what torch's own deepcopy + Module.to gives: same values and dtypes (integer
    # buffers kept), tied weights still tied, the user's model untouched.
    from torch_xla_ext.parity import casts

    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)
            self.b.weight = self.a.weight
            self.register_buffer("positions", torch.arange(8))
            self.register_buffer("scale", torch.rand(8))

    torch.manual_seed(0)
    model = Tied()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    for via in (None, torch.bfloat16):
        got = casts.prepare(model, "cpu", torch.float64, via=via)
        want = copy.deepcopy(model).to(via or torch.float32).to(torch.float64)
        assert got.b.weight is got.a.weight and got.a.weight.requires_grad
        for (k, g), (_, w) in zip(got.state_dict().items(), want.state_dict().items()):
            assert g.dtype == w.dtype and torch.equal(g, w), k
    assert all(torch.equal(v, before[k]) and v.dtype == before[k].dtype for k, v in model.state_dict().items())


def test_the_replays_read_the_weights_the_device_held_even_when_the_run_updates_buffers_in_place():
    """verify does not copy the XLA run's weights back before torch_xla runs: the replays cast
    them again from the user's model. Oracles: torch_xla's own device data (read before the run,
    bit for bit) and the run itself (the rounded replay matches it only with the right arguments).
    A train-mode BatchNorm updates its running stats in place, so torch_xla donates those buffers."""
    import torch_xla

    from torch_xla_ext._compat import hlo
    from torch_xla_ext.parity import casts
    from torch_xla_ext.parity.program.replay import LazyArgs
    from torch_xla_ext.parity.stages import xla_run

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.GELU(),
                                torch.nn.Linear(16, 4)).train()
    x = torch.randn(6, 8)
    user_stats = model[1].running_mean.clone()
    run = xla_run.run_xla(model, (x,), {}, torch.bfloat16, 0, True)
    assert isinstance(run.program.args, LazyArgs)
    # The same program traced again; its device data read before torch_xla runs it.
    with torch.no_grad():
        device_model = casts.prepare(model, torch_xla.device(), torch.bfloat16)
        out = device_model(casts.move(x, torch_xla.device(), torch.bfloat16))
    expected = [casts.to_numpy(t.cpu()) for t in hlo.graph_inputs([out])]
    torch_xla.sync()
    assert len(run.program.args) == len(expected)
    for k, (got, want) in enumerate(zip(run.program.args, expected)):
        assert got.dtype == want.dtype and got.shape == want.shape, k
        assert got.tobytes() == want.tobytes(), f"argument {k} differs from the device's"
    report = parity.verify(model, (x,), dtype="bf16")
    assert report.reproduced, report.explanation
    assert torch.equal(model[1].running_mean, user_stats)  # the user's model is never run


def test_verifys_collections_pass_over_the_objects_that_existed_before_it(monkeypatch):
    """verify's garbage collections scan what it made, not the process: the objects that existed
    before are frozen while it runs (gc.freeze), and handed back after. Oracle: weak references."""
    import gc
    import weakref

    from torch_xla_ext.parity import memory

    class Node:
        pass

    before = Node()
    before.self = before  # a cycle: only the collector frees it
    was_before = weakref.ref(before)
    with memory.collector_skips_existing_objects():
        assert gc.get_freeze_count() > 0
        made = Node()
        made.self = made
        was_made = weakref.ref(made)
        del made, before
        gc.collect()
        assert was_made() is None  # made inside: collected inside
        assert was_before() is not None  # frozen: passed over
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert was_before() is None  # handed back

    frozen = []
    real = memory.release

    def counting(level="collect"):
        frozen.append(gc.get_freeze_count())
        return real(level)

    monkeypatch.setattr(memory, "release", counting)
    parity.verify(torch.nn.Linear(4, 4), (torch.randn(2, 4),), dtype="fp32")
    assert frozen and min(frozen) > 0
    assert gc.get_freeze_count() == 0


FROZEN_AFTER_INNER: list[int] = []  # outside the module: verify runs copies of it


class Nested(torch.nn.Module):
    """A reference that runs a whole verify of its own each time it is called (a nested run), and
    notes how many objects were frozen right after it."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        import gc

        inner = parity.verify(torch.nn.Linear(4, 4), (torch.randn(2, 4),), dtype="fp32", emulate=False)
        assert inner.verdict == parity.Verdict.PASS
        FROZEN_AFTER_INNER.append(gc.get_freeze_count())
        return self.lin(x)


def test_a_nested_verify_leaves_the_outer_runs_and_the_callers_frozen_objects_frozen():
    """The collector policy never unfreezes what it did not freeze: a verify inside another (here,
    inside the reference's CPU runs) leaves the outer run's frozen objects frozen, and a caller
    that froze objects of its own (gc.freeze, as servers do after start-up) finds them still frozen
    after verify. Oracles: gc.get_freeze_count and a weak reference to a frozen cycle."""
    import gc
    import weakref

    class Node:
        pass

    model = Nested()
    outer = gc.get_freeze_count()
    r = parity.verify(model.lin, (torch.randn(2, 4),), reference=model, dtype="fp32", emulate=False)
    assert r.verdict == parity.Verdict.PASS
    assert len(FROZEN_AFTER_INNER) == 2  # CPU eager and the fp64 golden each ran one (a PASS: no second run)
    assert min(FROZEN_AFTER_INNER) > outer  # the outer run's freeze held
    assert gc.get_freeze_count() == outer

    mine = Node()
    mine.self = mine
    was_mine = weakref.ref(mine)
    gc.freeze()  # the caller's own frozen objects (the cycle among them)
    try:
        count = gc.get_freeze_count()
        del mine
        parity.verify(torch.nn.Linear(4, 4), (torch.randn(2, 4),), dtype="fp32", emulate=False)
        assert gc.get_freeze_count() > 0.9 * count  # still frozen (less the few that died): nothing unfrozen
        gc.collect()
        assert was_mine() is not None  # frozen, so the collection passed over it
    finally:
        gc.unfreeze()
    gc.collect()
    assert was_mine() is None
