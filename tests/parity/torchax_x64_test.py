"""JAX's x64 mode off under frontend="torchax": a model that builds sinusoidal positions in float64
at offset 200,000 is explained as "x64 off", naming the torch calls, the model's line and the fix;
with x64 on, the same model is not.

The oracle is the model in numpy (``torchax_models.sinusoidal_numpy``): in float64 throughout it
is the reference; with its positional table in float32 it is what x64 off computes. The run's
error against the fp64 golden must be of the size numpy's float32 table gives, far beyond CPU
eager's."""

import inspect

import jax
import numpy as np
import torch

from tests.parity import torchax_models
from torch_xla_ext import parity
from torch_xla_ext.parity.report import X64_OFF


def _positions_line(model) -> str:
    lines, start = inspect.getsourcelines(type(model).forward)
    k = next(i for i, l in enumerate(lines) if "# positions line" in l)
    return f"{inspect.getsourcefile(type(model))}:{start + k}"


def test_float64_positions_explained_as_x64_off():
    assert not jax.config.jax_enable_x64  # JAX's default, which this test is about
    model, (x,) = torchax_models.sinusoidal()
    wide = torchax_models.sinusoidal_numpy(model, x, np.float64)
    narrow = torchax_models.sinusoidal_numpy(model, x, np.float32)
    narrowing = float(np.abs(narrow - wide).max())
    scale = float(np.abs(wide).max())
    assert narrowing > 1e3 * 2.0 ** -24 * scale  # the narrowing matters: far beyond a float32 rounding

    r = parity.verify(model, (x,), frontend="torchax")
    (o,) = r.outputs
    assert o.cause == X64_OFF, r.summary
    # the run errs as numpy's float32 table does (the same positions; the rest of the math is f32 rounding)
    assert 0.1 * narrowing <= o.xla_error <= 10 * narrowing, (o.xla_error, narrowing)
    assert o.cpu_error < 1e-2 * narrowing and o.wide_error <= 2 * o.cpu_error
    lead = r.summary
    assert lead.startswith("FAIL:") and "x64 mode off" in lead and "float64 as float32" in lead
    assert _positions_line(model) in lead and "torch.arange" in lead
    assert 'jax.config.update("jax_enable_x64", True)' in lead and "torchax.enable_accuracy_mode()" in lead
    assert {n.dtype for n in r.narrowed} == {"float64"} and all(n.module == "" for n in r.narrowed)


def test_with_x64_on_the_same_model_is_not_x64_off():
    model, (x,) = torchax_models.sinusoidal()
    jax.config.update("jax_enable_x64", True)
    try:
        r = parity.verify(model, (x,), frontend="torchax")
    finally:
        jax.config.update("jax_enable_x64", False)
    (o,) = r.outputs
    assert o.cause != X64_OFF and not r.narrowed, r.summary
    assert o.xla_error <= 2 * o.cpu_error + 1e-6, (o.xla_error, o.cpu_error)
