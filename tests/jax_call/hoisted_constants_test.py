"""Closed-over constants under both settings of JAX's `jax_use_simplified_jaxpr_constants`.

JAX 0.7.1 reads the flag's default for LoweringParameters.hoist_constants_as_args once, when jax
is imported, so this file turns it on through the environment before the import: then
`jax.config.update(..., True)` hoists non-scalar constants into leading HLO parameters and
`False` embeds them in the module. (Turning the flag on at runtime after importing jax with it
off does not hoist; call_jax_test.py covers that default.)"""

import os

OWN_PROCESS = "JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS must be set before jax is imported"
os.environ["JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS"] = "true"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import torch_xla  # noqa: E402

from tests.jax_call.jax_reference import assert_bit_equal, run_in_jax

from torch_xla_ext import jax_call  # noqa: E402
from torch_xla_ext._ext import jax_call as _core  # noqa: E402

# Fails (rather than skips) when jax was imported before this file set the variable: every runner
# of this file gives it its own process (Bazel, and tests/conftest.py for plain pytest).
assert jax._src.interpreters.mlir.LoweringParameters().hoist_constants_as_args, \
    "jax was imported before JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS was set: run this file in its own process"

TABLE = jnp.asarray(np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(3, 4))
BIAS = jnp.asarray(np.arange(4, dtype=np.float32)).astype(jnp.bfloat16)


def f(x, unused, y):
    # Two closed-over non-scalar constants (one bf16) and a scalar one (never hoisted).
    return (x @ TABLE + BIAS.astype(jnp.float32)) * 0.5, y.sum()


def args():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(2, 3, generator=g).to("xla"), torch.randn(5, generator=g).to("xla"),
            torch.randn(4, generator=g).to("xla"))


@pytest.fixture(params=[True, False], ids=["simplified_constants_on", "simplified_constants_off"])
def simplified(request):
    previous = jax.config.jax_use_simplified_jaxpr_constants
    jax.config.update("jax_use_simplified_jaxpr_constants", request.param)
    yield request.param
    jax.config.update("jax_use_simplified_jaxpr_constants", previous)


def test_closed_over_constants_are_supplied(simplified):
    a = args()
    out = jax_call.call_jax(f, a)
    assert_bit_equal(out, run_in_jax(f, a))
    m = jax_call.explain(f, a)
    assert [r.kept for r in m.rows] == [True, False, True]
    if simplified:
        # JAX's calling convention: the hoisted constants lead, then the kept leaves.
        assert [(c.hlo_param, c.shape, c.dtype) for c in m.constants] == [(0, (3, 4), "float32"), (1, (4,), "bfloat16")]
        assert [r.hlo_param for r in m.rows] == [2, None, 3]
        assert m.num_hlo_params == 4
        assert "<constant 1>" in str(m)
    else:
        assert m.constants == ()
        assert [r.hlo_param for r in m.rows] == [0, None, 1]
        assert m.num_hlo_params == 2


def test_flag_is_part_of_the_cache_key():
    a = args()
    jax_call.clear_cache()
    base = jax_call.cache_info()
    for flag in (True, False, True, False):
        jax.config.update("jax_use_simplified_jaxpr_constants", flag)
        jax_call.call_jax(f, a)
    jax.config.update("jax_use_simplified_jaxpr_constants", False)
    after = jax_call.cache_info()
    # One lowering per setting, then each setting hits its own entry.
    assert (after.lowerings - base.lowerings, after.hits - base.hits, after.entries) == (2, 2, 2)


def test_stock_keep_unused_lowering_has_an_extra_leading_argument():
    # Why torch_xla 2.9's call_jax fails on arity with the flag on: its module takes the hoisted
    # constants before the leaves it passes.
    jax.config.update("jax_use_simplified_jaxpr_constants", True)
    try:
        specs = [jax.ShapeDtypeStruct((2, 3), jnp.float32), jax.ShapeDtypeStruct((5,), jnp.float32),
                 jax.ShapeDtypeStruct((4,), jnp.float32)]
        proto = jax.jit(f, keep_unused=True).lower(*specs).compiler_ir("hlo").as_serialized_hlo_module_proto()
        params = _core.read_hlo_signature(proto).parameters
        assert [str(p) for p in params] == ["f32[3,4]", "bf16[4]", "f32[2,3]", "f32[5]", "f32[4]"]
    finally:
        jax.config.update("jax_use_simplified_jaxpr_constants", False)
