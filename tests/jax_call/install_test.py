"""install()/uninstall(): torch_xla's xla_builder.call_jax (which needs flax in 2.9) is routed to
ours, keeps torch_xla's signature (name, override_hash), and is restored exactly."""

import importlib.util
import os
import sys

import jax.numpy as jnp
import pytest
import torch
import torch_xla
import torch_xla.core.xla_builder as xb

sys.path.insert(0, os.path.dirname(__file__))
from jax_reference import assert_bit_equal, run_in_jax  # noqa: E402

from torch_xla_ext import jax_call  # noqa: E402

STOCK = xb.call_jax


def f(a, unused, scale):
    return {"y": jnp.tanh(a) * scale}


def args():
    return (torch.linspace(-2, 2, 6).to("xla"), torch.ones(3).to("xla"), 1.5)


def test_stock_call_jax_fails_without_flax():
    assert importlib.util.find_spec("flax") is None
    with pytest.raises(AssertionError, match="Jax is required for this feature"):
        xb.call_jax(f, args())


def test_install_routes_torch_xla_call_jax_and_uninstall_restores():
    jax_call.install()
    try:
        assert jax_call.is_installed()
        assert xb.call_jax is not STOCK
        jax_call.install()  # idempotent
        base = jax_call.cache_info().lowerings
        out = xb.call_jax(f, args())
        assert_bit_equal(out, run_in_jax(f, args()))
        # torch_xla's keyword arguments are accepted; override_hash replaces the identity.
        xb.call_jax(f, args(), {}, name="my_kernel", override_hash=1234)
        xb.call_jax(lambda *a: f(*a), args(), name="my_kernel", override_hash=1234)  # new closure, same hash
        assert jax_call.cache_info().lowerings - base == 2
    finally:
        jax_call.uninstall()
    assert xb.call_jax is STOCK
    assert not jax_call.is_installed()
    with pytest.raises(AssertionError, match="Jax is required"):
        xb.call_jax(f, args())


def test_install_patches_modules_that_imported_call_jax_by_name():
    module = type(sys)("torch_xla._txe_probe_module")
    module.call_jax = STOCK  # as `from torch_xla.core.xla_builder import call_jax` binds it
    sys.modules[module.__name__] = module
    try:
        jax_call.install()
        assert module.call_jax is xb.call_jax is not STOCK
        jax_call.uninstall()
        assert module.call_jax is STOCK
    finally:
        del sys.modules[module.__name__]
