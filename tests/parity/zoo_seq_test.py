"""verify() on the zoo's Llama (GQA, RoPE, RMSNorm in f32) and T5 (encoder-decoder) in bf16, and
localisation: a weight perturbed on the XLA side only is found at its nn.Module path, while the
shadow error of the untouched modules stays at CPU eager's rounding level."""

import copy

import pytest
import torch


from tests import zoo  # noqa: E402
from torch_xla_ext import parity  # noqa: E402
from torch_xla_ext.parity.stages import localization  # noqa: E402
from tests.parity.zoo_checks import bf16_case_fixture, check_report, independent_cpu_errors

NAMES = ("llama", "t5")

case = bf16_case_fixture(NAMES)


def test_bf16_verdict_is_explained_by_fp64_figures(case):
    name, model, args, kwargs, report = case
    check_report(report, model, args, kwargs)


PLANTED = "model.layers.1.mlp.down_proj"


@pytest.fixture(scope="module")
def planted():
    model, args, kwargs = zoo.build("llama")
    perturbed = copy.deepcopy(model)
    with torch.no_grad():
        dict(perturbed.named_modules())[PLANTED].weight.mul_(1.25)
    report = parity.verify(perturbed, args, kwargs, dtype="bf16", reference=model, localize=True)
    return report


def test_planted_divergence_is_found_at_its_module(planted):
    r = planted
    assert r.verdict == parity.Verdict.FAIL
    assert r.first_divergent_module == PLANTED
    assert f"the first divergent module is {PLANTED}" in r.explanation
    (o,) = r.outputs
    assert o.cause == "real difference" and o.same_math is False  # the program is not the reference's
    first = next(m for m in r.modules if m.name == PLANTED)
    assert first.diverges and first.own_to_rounding > first.threshold == localization.divergence_factor(torch.bfloat16)


def test_untouched_modules_stay_at_rounding_level(planted):
    r = planted
    first = next(m for m in r.modules if m.name == PLANTED)
    untouched = [m for m in r.modules if m.path != PLANTED and not PLANTED.startswith(m.path + ".") and m.path]
    assert len(untouched) > 20
    for m in untouched:
        # CPU eager's own rounding error on the same inputs is the yardstick.
        assert m.own_error <= 4 * m.rounding_level + 1e-12, (m.name, m.own_error, m.rounding_level)
    # The final norm, after the planted module, carries its error without adding to it.
    (norm,) = [m for m in untouched if m.path == "model.norm"]
    assert norm.order > first.order and norm.total_error > 4 * norm.own_error


def test_module_table_and_plot(planted, tmp_path):
    table = planted.module_table()
    assert PLANTED in table and "<- first divergent" in table
    path = parity.plot_modules(planted, str(tmp_path / "modules.png"))
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_unperturbed_model_has_no_divergent_module():
    model, args, kwargs = zoo.build("llama")
    r = parity.verify(model, args, kwargs, dtype="bf16", localize=True, emulate=False)
    assert r.first_divergent_module is None
    assert all(not m.diverges for m in r.modules)
    assert "no module's own error exceeds" in r.explanation


def test_fp32_upcasts_in_the_model_are_not_a_real_difference():
    """T5 upcasts on purpose (RMSNorm's ``.to(torch.float32)``, softmax's ``.float()``); the fp64
    golden must not round there, or the exact replay (every float f64) leaves it and the same math
    reads as a real difference. Oracle: the golden written apart in zoo_checks, at fp64 tolerance."""
    model, args, kwargs = zoo.build("t5")
    r = parity.verify(model, args, kwargs, dtype="fp32")
    assert r.verdict == parity.Verdict.PASS
    cpu_errors = independent_cpu_errors(model, args, kwargs, torch.float32)
    assert set(cpu_errors) == {o.path for o in r.outputs}
    for o in r.outputs:
        assert o.unrounded.passed, (o.path, o.unrounded_error)
        assert o.cause != "real difference", o.path
        # The report's fp64 errors are against the same golden the oracle builds.
        assert o.cpu_error == pytest.approx(cpu_errors[o.path], rel=1e-9, abs=1e-15)
    assert "real difference" not in r.explanation
