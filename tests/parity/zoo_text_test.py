"""verify() on the zoo's transformers models with keyword inputs and ModelOutput outputs (GPT-2,
BERT, CLIP): bf16 verdicts explained by fp64 figures with the rounded replay as close to fp64 as
XLA; outputs named by pytree path; fp32 mismatches reported relative to the output's scale."""


import pytest
import torch


from tests import zoo  # noqa: E402
from torch_xla_ext import parity  # noqa: E402
from torch_xla_ext.parity import causes  # noqa: E402
from tests.parity.zoo_checks import bf16_case_fixture, check_report

NAMES = ("gpt2", "bert", "clip")

case = bf16_case_fixture(NAMES)


def test_bf16_verdict_is_explained_by_fp64_figures(case):
    name, model, args, kwargs, report = case
    check_report(report, model, args, kwargs)


def test_outputs_are_named_by_pytree_path(case):
    name, model, args, kwargs, report = case
    with torch.no_grad():
        out = model(*args, **kwargs)  # a transformers ModelOutput
    expected = [k for k, v in out.items() if isinstance(v, torch.Tensor)]
    paths = [o.path for o in report.outputs]
    for key in expected:
        assert f".{key}" in paths
    if name == "clip":  # nested ModelOutputs of each tower
        assert ".text_model_output.last_hidden_state" in paths
        assert ".vision_model_output.pooler_output" in paths


@pytest.fixture(scope="module")
def gpt2_fp32():
    model, args, kwargs = zoo.build("gpt2")
    return model, args, kwargs, parity.verify(model, args, kwargs, dtype="fp32")


def test_fp32_ulps_near_zero_are_put_in_scale(gpt2_fp32):
    model, args, kwargs, r = gpt2_fp32
    (o,) = r.outputs
    # The golden, independently: the output's scale and the magnitude where the ULP distance peaks.
    with torch.no_grad():
        ref = model.double()(*args, **{k: v for k, v in kwargs.items()}).logits
    assert o.scale == pytest.approx(float(ref.abs().max()), rel=1e-9)
    assert o.max_ulp_magnitude == pytest.approx(float(ref[o.xla_vs_cpu.max_ulp_index].abs()), rel=1e-9)
    assert o.max_diff_to_scale == pytest.approx(o.xla_vs_cpu.max_abs_diff / o.scale)
    if o.xla_vs_cpu.max_ulp > 4 and o.max_ulp_magnitude < 1e-3 * o.scale:
        assert "ULP distances near zero mislead" in r.explanation
        assert f"greatest ULP distance ({o.xla_vs_cpu.max_ulp})" in r.explanation
        # Above 1e-3 of the scale the ULP distances are small: fp32 summation order only.
        assert o.significant is not None and o.significant.max_ulp < o.xla_vs_cpu.max_ulp
    assert r.explanation.startswith(r.verdict.value + ":")
    # the replay ran (bit-equality with XLA is a figure: see zoo_checks.check_report); no narrow float
    assert r.emulation in ("matches", "differs") and r.rounding_points == ()
    assert o.emulated_error <= causes.REASSOCIATION_FACTOR * max(o.xla_error, o.cpu_error)
    assert o.cause in (None, "reassociation")
