"""Under frontend="torchax": a capture from a device whose f32 dots and convolutions run on bf16
operands, compared on a CPU host under that device's rules (the torchax twin of
device_precision_test.py).

No TPU here, so the device is made. A TorchDispatchMode cannot make it under torchax: torchax's
own Environment dispatches every aten op (and some torch functions, ``F.linear``, ``torch.einsum``)
to its JAX lowerings, inside its own modes, in its eager run and while ``jax.jit`` traces its
compiled forward alike. So the made device replaces those lowerings on torchax's environment, through
its public ``Environment.override_op_definition``, for the made-device run only (the
environment's own entries are restored after it: ``_compat.torchax_run``'s helper): every lowering
that multiplies (``F.linear``, ``aten.linear``, ``mm``, ``bmm``, ``matmul``, ``dot``, ``addmm``,
``addmv``, ``addbmm``, ``convolution``, ``conv2d``, ``einsum``; ``baddbmm`` and
``scaled_dot_product_attention`` reach ``bmm`` through torch's decomposition and torchax's torch-level
reference) rounds its f32 operands to bf16 with ``lax.reduce_precision`` (which XLA's
float-conversion simplifier cannot remove, as it may a convert pair under ``jit``) and runs
torchax's own lowering on them, which accumulates in f32: a TPU's one-pass DEFAULT precision.

The made device is checked before it is trusted, against an oracle of its own: one plain f32
matmul through ``parity.capture`` (torchax's eager run, the path the captures take) and through
``torchax.compile`` (its compiled run) equals numpy's fp64 product of the bf16-rounded operands
within f32 accumulation error (a derived bound, gamma_K * sum|a||b|), differs from the f32 product
beyond that bound, and equals the f32 product again once the override is undone.

The capture keeps the program such a device is given (torchax's plain lowering of the forward: no
precision_config but JAX's DEFAULT on every dot) with the device named TPU. On the CPU, for GPT-2
(the zoo's: addmm, bmm through attention, F.linear for the head) and a small CNN (convolutions and
a linear head):

* under ``auto`` (the capture's device and the program's precision_config: tpu-default, counted
  against the program's own dots and convolutions) every output is explained as the device's
  matmul precision, and no module is flagged;
* under ``xla-cpu`` (f32 matmuls), the same capture is a real difference;
* a 2% bug planted in the middle linear/conv weight of the made-device run
  (tests/parity/planted.py) is found at its module under ``tpu-default``.
"""

import contextlib
import dataclasses
import re

import jax
import numpy as np
import pytest
import torch
import torchax
from torchax.ops import ops_registry

from tests import zoo
from tests.parity import planted
from torch_xla_ext import parity
from torch_xla_ext._compat import torchax_run

_aten = torch.ops.aten

# Every torchax lowering that multiplies, by the key it is registered under, with the positions of
# its multiplied operands (None: every tensor argument, einsum's operands).
PRODUCTS = {
    torch.nn.functional.linear: (0, 1),
    _aten.linear: (0, 1),
    _aten.mm: (0, 1),
    _aten.bmm: (0, 1),
    _aten.matmul: (0, 1),
    _aten.dot: (0, 1),
    _aten.addmm: (1, 2),
    _aten.addmv: (1, 2),
    _aten.addbmm.default: (1, 2),
    _aten.convolution: (0, 1),
    _aten.conv2d: (0, 1),
    torch.einsum: None,
    _aten.einsum: None,
}


def _bf16(x):
    """An f32 JAX array rounded to bf16's 8 exponent and 7 mantissa bits, still f32; else as it is."""
    if isinstance(x, jax.Array) and x.dtype == np.float32:
        return jax.lax.reduce_precision(x, exponent_bits=8, mantissa_bits=7)
    return x


def _rounding(env, original, where):
    """torchax's own lowering ``original`` (a JAX function) on bf16-rounded operands ``where``."""

    def impl(*args, **kwargs):
        a, k = env.t2j_iso((args, kwargs))  # override_op_definition's functions get torchax tensors
        if where is None:
            a = jax.tree_util.tree_map(_bf16, a)
        else:
            a = tuple(_bf16(v) if i in where else v for i, v in enumerate(a))
        if original.needs_env:
            k = {**k, "env": env}
        return env.j2t_iso(original.func(*a, **k))

    return impl


@contextlib.contextmanager
def bf16_operands():
    """The made device (module docstring): torchax's environment with every multiplying lowering
    on bf16-rounded f32 operands, its own lowerings back after."""
    env = torchax.default_env()
    registry = {**ops_registry.all_torch_functions, **ops_registry.all_aten_ops}
    impls = {}
    for op, where in PRODUCTS.items():
        original = registry[op]  # KeyError: torchax no longer registers it under this key
        assert original.is_jax_function, op
        impls[op] = _rounding(env, original, where)
    with torchax_run.overridden(impls):
        yield


# ---- the made device against its own oracle ------------------------------------------------------


class MatMul(torch.nn.Module):
    def forward(self, x, w):
        return x @ w


def _exact(a, b):
    return a.double().numpy() @ b.double().numpy()


def _accumulation_bound(a, b):
    """|f32 sum of exact products - exact sum| <= gamma_K * sum_k |a_ik||b_kj| (K products, u = 2^-24)."""
    k, u = a.shape[1], 2.0 ** -24
    return (k * u / (1 - k * u)) * (np.abs(a.double().numpy()) @ np.abs(b.double().numpy()))


def _compiled_matmul(a, b):
    env = torchax.default_env()
    with env:
        fast = torchax.compile(MatMul())
        x, w = env.to_xla((a, b))
        return fast(x, w).torch().double().numpy()


def test_the_made_device_multiplies_bf16_operands_in_f32_in_the_eager_and_compiled_runs():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(64, 256, generator=g), torch.randn(256, 48, generator=g)
    ra, rb = a.bfloat16().float(), b.bfloat16().float()  # bf16 * bf16 is exact in f32 and in fp64
    made_ref, made_bound = _exact(ra, rb), _accumulation_bound(ra, rb)
    f32_ref, f32_bound = _exact(a, b), _accumulation_bound(a, b)
    with bf16_operands():
        eager = parity.capture(MatMul(), (a, b), dtype="fp32", frontend="torchax").outputs[""].double().numpy()
        compiled = _compiled_matmul(a, b)
    for made in (eager, compiled):
        assert np.all(np.abs(made - made_ref) <= made_bound)
        assert np.mean(np.abs(made - f32_ref) > f32_bound) > 0.5  # most elements: off the f32 product
    # undone: torchax's own lowering, the f32 product again
    plain = parity.capture(MatMul(), (a, b), dtype="fp32", frontend="torchax").outputs[""].double().numpy()
    for run in (plain, _compiled_matmul(a, b)):
        assert np.all(np.abs(run - f32_ref) <= f32_bound)


# ---- captures from the made device ------------------------------------------------------------------


class SmallCNN(torch.nn.Module):
    """Three convolutions (one strided), ReLUs, a global average and a linear head."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.conv3 = torch.nn.Conv2d(32, 32, 3, padding=1)
        self.head = torch.nn.Linear(32, 10)

    def forward(self, x):
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x))
        x = torch.relu(self.conv3(x))
        return self.head(x.mean(dim=(2, 3)))


def small_cnn():
    torch.manual_seed(0)
    return SmallCNN().eval(), (torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1)),), {}


BUILDERS = {"gpt2": lambda: zoo.build("gpt2"), "small_cnn": small_cnn}


def device_capture(model, args, kwargs):
    """What a TPU at precision DEFAULT would capture through torchax: its values (the made device),
    and the program it was given (torchax's plain lowering)."""
    program = parity.capture(model, args, kwargs, dtype="fp32", frontend="torchax")
    with bf16_operands():
        values = parity.capture(model, args, kwargs, dtype="fp32", frontend="torchax")
    assert [(c.path, c.call) for c in values.calls] == [(c.path, c.call) for c in program.calls]
    # the override reached the made run's trace at every dot and convolution: both operands rounded
    assert _matmuls(values.program) == _matmuls(program.program) > 0
    assert values.program.count("stablehlo.reduce_precision") == 2 * _matmuls(program.program)
    assert "stablehlo.reduce_precision" not in program.program
    return dataclasses.replace(values, program=program.program, program_args=program.program_args,
                               device_type="TPU")


def _matmuls(program: str) -> int:
    """The program's dots and convolutions, counted in its text (every function)."""
    return len(re.findall(r"\bstablehlo\.(?:dot_general|dot|convolution)\b", program))


@pytest.fixture(scope="module", params=list(BUILDERS))
def case(request):
    model, args, kwargs = BUILDERS[request.param]()
    return request.param, model, args, kwargs, device_capture(model, args, kwargs)


@pytest.fixture(scope="module")
def auto(case):
    name, model, args, kwargs, cap = case
    return parity.compare_capture(cap, model, args, kwargs, frontend="torchax", rules="auto")


def test_the_difference_is_the_devices_matmul_precision_read_from_the_capture(case, auto):
    """rules="auto": the capture's device (TPU) and its program's precision_config (JAX's DEFAULT)
    make tpu-default."""
    name, model, args, kwargs, cap = case
    r = auto
    assert r.frontend == "torchax"
    assert r.rules == "tpu-default"
    n = _matmuls(cap.program)
    assert r.rules_source == (f"read from the program's precision_config (DEFAULT on {n} f32 dot(s) and "
                              f"convolution(s)) and the device (TPU)")
    assert r.reproduced and r.hlo_math == "same"
    assert all(o.cause == "matmul precision" and o.xla_cpu_reproduced is False for o in r.outputs), r.causes
    assert r.verdict == parity.Verdict.FAIL  # bf16 operands move f32 outputs far past f32 tolerances
    assert "matmul precision" in r.summary and "on bf16 operands in one pass (precision DEFAULT)" in r.summary
    assert "The device's matmul precision explains output(s)" in r.explanation
    assert "read from the program's precision_config" in r.explanation
    assert r.first_divergent_module is None, r.module_table()  # every module's rounding is the device's


def test_the_fix_named_is_jaxs_matmul_precision_setting(auto):
    """torchax lowers through JAX: JAX's default matmul precision is what changes it, not torch_xla's."""
    assert "jax.config.update('jax_default_matmul_precision', 'highest')" in auto.summary
    assert "torch_xla" not in auto.summary


def test_under_xla_cpus_rules_the_same_capture_is_a_real_difference(case):
    name, model, args, kwargs, cap = case
    r = parity.compare_capture(cap, model, args, kwargs, frontend="torchax", rules="xla-cpu")
    assert r.reproduced is False and set(r.causes.values()) == {"real difference"}
    assert "rerun with rules='auto'" in r.explanation  # the way out: the device's own rules


def test_a_planted_two_percent_weight_bug_is_found_at_its_module_under_tpu_default(case):
    name, model, args, kwargs, _ = case
    planted.check_found_on_a_device(model, args, kwargs, device_capture, frontend="torchax", rules="tpu-default")
