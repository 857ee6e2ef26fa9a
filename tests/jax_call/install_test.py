"""install()/uninstall(): torch_xla's xla_builder.call_jax (which needs torchax, and in 2.9 flax) is routed to
ours, keeps torch_xla's signature (name, override_hash), and is restored exactly."""

import sys

import jax.numpy as jnp
import pytest
import torch
import torch_xla
import torch_xla.core.xla_builder as xb

from tests.jax_call.jax_reference import assert_bit_equal, run_in_jax
from tests.jax_call.without_torchax import without_torchax

from torch_xla_ext import jax_call  # noqa: E402

STOCK = xb.call_jax


def f(a, unused, scale):
    return {"y": jnp.tanh(a) * scale}


def args():
    return (torch.linspace(-2, 2, 6).to("xla"), torch.ones(3).to("xla"), 1.5)


def test_stock_call_jax_fails_without_flax():
    with without_torchax(), pytest.raises(AssertionError, match="Jax is required for this feature"):
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
    with without_torchax(), pytest.raises(AssertionError, match="Jax is required"):
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


def test_torch_xla_cache_counter_counts_our_cache():
    """torch_xla's own counter of its call_jax cache (what its interop tests read) counts our
    signatures while installed: one per function, shape, pytree structure, static value and JAX
    config; a repeated call is a hit. Clearing torch_xla's cache dict clears ours."""
    import jax

    count = xb._jax_to_xla_computation_cache_elements
    stock_dict = xb._JAX_TO_XLA_COMPUTATION_CACHE
    x33, x22 = torch.ones(3, 3).to("xla"), torch.ones(2, 2).to("xla")

    def sin_add(a, b):
        return a + jnp.sin(b)

    def cos_add(a, b):
        return a + jnp.cos(b)

    def matmul(d):
        return d["a"] @ d["b"]

    jax_call.install()
    try:
        xb._JAX_TO_XLA_COMPUTATION_CACHE.clear()
        assert count() == 0 and jax_call.cache_info().entries == 0
        for fn in (sin_add, sin_add, cos_add, cos_add):
            xb.call_jax(fn, (x33, x33))
        assert count() == 2                                       # two functions, each once
        xb.call_jax(sin_add, (x22, x22))
        assert count() == 3                                       # a new shape
        xb.call_jax(matmul, ({"a": x33, "b": x33},))
        xb.call_jax(matmul, ({"a": x33, "b": torch.ones(3, 2).to("xla")},))
        assert count() == 5                                       # a new leaf in the same structure
        for scale in (1.0, 2.0, 2.0):
            xb.call_jax(lambda a, s: a * s, (x33, scale), override_hash="scaled")
        assert count() == 7                                       # static values are in the key
        before = jax.config.jax_default_matmul_precision
        try:
            jax.config.update("jax_default_matmul_precision", "highest")
            xb.call_jax(sin_add, (x33, x33))
        finally:
            jax.config.update("jax_default_matmul_precision", before)
        xb.call_jax(sin_add, (x33, x33))
        assert count() == 8                                       # JAX's config is in the key
        assert count() == jax_call.cache_info().entries
        torch.testing.assert_close(xb.call_jax(sin_add, (x33, x33)).cpu(), 1 + torch.sin(torch.ones(3, 3)))
        xb._JAX_TO_XLA_COMPUTATION_CACHE.clear()                  # torch_xla's way to drop its cache
        assert count() == 0 and jax_call.cache_info().entries == 0
    finally:
        jax_call.uninstall()
    assert xb._JAX_TO_XLA_COMPUTATION_CACHE is stock_dict and type(stock_dict) is dict
    assert count() == 0
