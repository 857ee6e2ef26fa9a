"""A capture from a device whose f32 dots and convolutions run on bf16 operands, compared on a CPU
host under that device's rules.

No TPU here, so the device is made: XLA:CPU runs zoo models (GPT-2's dots, resnet18's
convolutions) in fp32 under a TorchDispatchMode, written below, that rounds every f32 ``mm``,
``addmm``, ``bmm``, ``baddbmm`` and ``convolution`` operand to bf16 (the independent oracle of what a
TPU at precision DEFAULT multiplies: torch ops on the XLA tensors), and the capture keeps the
program such a device is given (torch_xla's own for the plain model, precision DEFAULT in every
dot's precision_config, torch_xla's default) with the device named TPU. On the CPU:

* under ``tpu-default``, and ``auto`` (the capture's device and the program's precision_config),
  every output is explained as the TPU's matmul precision, with the setting that changes it, and
  no module is flagged;
* under ``xla-cpu`` (f32 matmuls), the same capture is a real difference;
* a 2% bug planted in the middle linear/conv weight of the device run (tests/parity/planted.py)
  is found at its module under ``tpu-default``.
"""

import dataclasses

import pytest
import torch

from tests import zoo
from tests.parity import planted
from torch_xla_ext import parity
from torch_xla_ext._compat.dispatch import TorchDispatchMode

_aten = torch.ops.aten


def _bf16(t):
    return t.to(torch.bfloat16).to(torch.float32)


class BF16Operands(TorchDispatchMode):
    """The made device: f32 matrix products and convolutions multiply bf16-rounded operands and
    accumulate in f32 (a TPU's one-pass DEFAULT precision)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (_aten.mm.default, _aten.bmm.default) and args[0].dtype == torch.float32:
            return func(_bf16(args[0]), _bf16(args[1]))
        if func in (_aten.addmm.default, _aten.baddbmm.default) and args[1].dtype == torch.float32:
            return func(args[0], _bf16(args[1]), _bf16(args[2]), **kwargs)
        if func == _aten.convolution.default and args[0].dtype == torch.float32:
            return func(_bf16(args[0]), _bf16(args[1]), *args[2:], **kwargs)
        return func(*args, **kwargs)


def device_capture(model, args, kwargs):
    """What a TPU at precision DEFAULT would capture: its values, and the program it was given."""
    import torch_xla.backends

    assert torch_xla.backends.get_mat_mul_precision() == "default"  # torch_xla 2.9's own default
    program = parity.capture(model, args, kwargs, dtype="fp32")
    with BF16Operands():
        values = parity.capture(model, args, kwargs, dtype="fp32")
    assert [(c.path, c.call) for c in values.calls] == [(c.path, c.call) for c in program.calls]
    return dataclasses.replace(values, program=program.program, program_args=program.program_args,
                               device_type="TPU")


@pytest.fixture(scope="module", params=["gpt2", "resnet18"])
def case(request):
    model, args, kwargs = zoo.build(request.param)
    return request.param, model, args, kwargs, device_capture(model, args, kwargs)


def test_the_difference_is_the_tpus_matmul_precision_read_from_the_capture(case):
    """rules="auto": the capture's device (TPU) and its program's precision_config (DEFAULT) make
    tpu-default (as rules="tpu-default" would: rules_test checks the resolution)."""
    name, model, args, kwargs, cap = case
    r = parity.compare_capture(cap, model, args, kwargs, rules="auto")
    assert r.rules == "tpu-default"
    assert r.rules_source.startswith("read from the program's precision_config (DEFAULT on ")
    assert r.rules_source.endswith(" f32 dot(s) and convolution(s)) and the device (TPU)")
    assert r.reproduced and r.hlo_math == "same"
    assert all(o.cause == "matmul precision" and o.xla_cpu_reproduced is False for o in r.outputs), r.causes
    if r.verdict == parity.Verdict.FAIL:
        lead = r.summary
        assert "matmul precision" in lead and "torch_xla.backends.set_mat_mul_precision('highest')" in lead
        assert "on bf16 operands in one pass (precision DEFAULT)" in lead
    assert "The device's matmul precision explains output(s)" in r.explanation
    assert "read from the program's precision_config" in r.explanation
    assert r.first_divergent_module is None, r.module_table()  # every module's rounding is the device's


def test_under_xla_cpus_rules_the_same_capture_is_a_real_difference(case):
    name, model, args, kwargs, cap = case
    r = parity.compare_capture(cap, model, args, kwargs, rules="xla-cpu")
    assert r.reproduced is False and set(r.causes.values()) == {"real difference"}
    assert "rerun with rules='auto'" in r.explanation  # the way out: the device's own rules


def test_a_planted_two_percent_weight_bug_is_found_at_its_module_under_tpu_default(case):
    name, model, args, kwargs, _ = case
    planted.check_found_on_a_device(model, args, kwargs, device_capture, rules="tpu-default")
