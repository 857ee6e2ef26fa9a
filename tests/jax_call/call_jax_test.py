"""call_jax on real torch_xla (CPU) against the same function run in JAX: kept-parameter mapping,
pytrees, statics and the cache, the C++ signature check, and the errors that name leaf paths."""


import jax
import jax.numpy as jnp
from jax import export as jax_export
import numpy as np
import pytest
import torch
import torch_xla

from tests.jax_call.jax_reference import assert_bit_equal, run_in_jax

from torch_xla_ext import jax_call  # noqa: E402
from torch_xla_ext._ext import jax_call as _core  # noqa: E402
from torch_xla_ext.errors import InvalidArgumentError  # noqa: E402


def xla(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype).to("xla")


def hlo_params_of_keep_unused(fn, specs):
    """How many parameters torch_xla 2.9's call_jax gives the module (it lowers keep_unused=True)."""
    proto = jax.jit(fn, keep_unused=True).lower(*specs).compiler_ir("hlo").as_serialized_hlo_module_proto()
    return len(_core.read_hlo_signature(proto).parameters)


def check_against_jax(fn, args, kwargs=None):
    out = jax_call.call_jax(fn, args, kwargs)
    assert_bit_equal(out, run_in_jax(fn, args, kwargs))
    return out


def test_ignored_argument_is_not_a_parameter():
    def f(a, ignored, b):
        return a * 2.0 + jnp.cos(b)

    args = (xla(4, 3), xla(5), xla(4, 3, seed=1))
    check_against_jax(f, args)
    m = jax_call.explain(f, args)
    assert [r.kept for r in m.rows] == [True, False, True]
    assert [r.hlo_param for r in m.rows] == [0, None, 1]
    assert m.num_hlo_params == 2
    specs = [jax.ShapeDtypeStruct(tuple(a.shape), jnp.float32) for a in args]
    assert hlo_params_of_keep_unused(f, specs) == 3  # what torch_xla's keep_unused=True passes


def test_grad_wrt_subset_of_params_8794():
    # pytorch/xla#8794: the gradient of a loss linear in `w` does not depend on `w`, so JAX drops
    # `w`; `b` is not differentiated and only feeds the loss value.
    def step(w, b, x):
        loss, grad_w = jax.value_and_grad(lambda w: jnp.sum(w * x) + jnp.sum(b))(w)
        return loss, grad_w

    args = (xla(8), xla(8, seed=1), xla(8, seed=2))
    loss, grad_w = check_against_jax(step, args)
    np.testing.assert_array_equal(grad_w.cpu().numpy(), args[2].cpu().numpy())
    m = jax_call.explain(step, args)
    assert [r.kept for r in m.rows] == [True, True, True]  # the loss still reads w

    def grad_only(w, b, x):
        return jax.grad(lambda w, b: jnp.sum(w * x), argnums=0)(w, b)

    check_against_jax(grad_only, args)
    m = jax_call.explain(grad_only, args)
    assert [r.kept for r in m.rows] == [False, False, True]
    assert m.num_hlo_params == 1


def test_nested_pytrees_with_unused_leaves():
    def f(params, batch, *, cfg):
        h = batch["x"] @ params["layers"][0]["w"] + params["layers"][0]["b"]
        h = jnp.tanh(h) @ params["layers"][1][0]
        return {"out": h * cfg["scale"], "aux": [h.mean(), (batch["x"].sum(),)]}

    params = {"layers": [{"w": xla(4, 6), "b": xla(6, seed=1), "unused": xla(2, seed=2)},
                         (xla(6, 3, seed=3), xla(9, seed=4))]}
    batch = {"x": xla(5, 4, seed=5), "mask": xla(5, seed=6)}
    kwargs = {"cfg": {"scale": 0.5, "name": "run-1"}}
    check_against_jax(f, (params, batch), kwargs)
    m = jax_call.explain(f, (params, batch), kwargs)
    kept = {r.path: r.kept for r in m.rows if r.kind == "tensor"}
    assert kept == {
        "args[0]['layers'][0]['b']": True,
        "args[0]['layers'][0]['unused']": False,
        "args[0]['layers'][0]['w']": True,
        "args[0]['layers'][1][0]": True,
        "args[0]['layers'][1][1]": False,
        "args[1]['mask']": False,
        "args[1]['x']": True,
    }
    statics = {r.path: r.value for r in m.rows if r.kind == "static"}
    assert statics == {"kwargs['cfg']['name']": "'run-1'", "kwargs['cfg']['scale']": "0.5"}
    assert m.num_hlo_params == 4
    assert sorted(r.hlo_param for r in m.rows if r.kept) == [0, 1, 2, 3]
    table = str(m)
    assert "args[1]['mask']" in table and "= 'run-1'" in table and "4 parameters" in table


def test_64_arguments_of_which_4_are_used():
    used = (3, 17, 40, 63)

    def f(*xs):
        return xs[3] * xs[17] + xs[40] - xs[63]

    args = tuple(xla(16, seed=i) for i in range(64))
    check_against_jax(f, args)
    m = jax_call.explain(f, args)
    assert m.num_hlo_params == 4
    assert [r.hlo_param for r in m.rows if r.kept] == [0, 1, 2, 3]
    assert [i for i, r in enumerate(m.rows) if r.kept] == list(used)
    specs = [jax.ShapeDtypeStruct((16,), jnp.float32)] * 64
    assert hlo_params_of_keep_unused(f, specs) == 64


def test_kept_mapping_matches_jax_export_public_kept_var_idx():
    def f(a, b, c, d):
        return a + d, jnp.sum(c)

    args = (xla(3), xla(3), xla(2), xla(3))
    m = jax_call.explain(f, args)
    specs = [jax.ShapeDtypeStruct(tuple(a.shape), jnp.float32) for a in args]
    exported = jax_export.export(jax.jit(f, keep_unused=False))(*specs)
    assert tuple(i for i, r in enumerate(m.rows) if r.kept) == exported.module_kept_var_idx


def test_cached_call_does_not_trace_or_lower_again():
    traces = []

    def f(a, b):
        traces.append(1)
        return a - b

    a, b = xla(3), xla(3, seed=1)
    before = jax_call.cache_info()
    for _ in range(5):
        check_against_jax(f, (a, b))  # the reference jits its own closure: counted separately
    after = jax_call.cache_info()
    assert after.lowerings - before.lowerings == 1
    assert after.hits - before.hits == 4
    # One trace for call_jax, one per run_in_jax closure (5): ours traced once.
    assert len(traces) == 1 + 5
    # A new shape is a new signature.
    jax_call.call_jax(f, (xla(4), xla(4)))
    assert jax_call.cache_info().lowerings - before.lowerings == 2


def test_static_argument_that_changes_lowers_again():
    traces = []

    def f(a, power, mode):
        traces.append((power, mode))
        y = a ** power
        return y if mode == "plain" else jnp.abs(y)

    a = xla(6)
    base = jax_call.cache_info().lowerings
    for power, mode in [(2, "plain"), (2, "plain"), (3, "plain"), (3, "abs"), (2, "plain"), (2.0, "plain")]:
        check_against_jax(f, (a, power, mode))
    # (2, 'plain') and (2.0, 'plain') compare equal but differ in type: both are lowered.
    assert jax_call.cache_info().lowerings - base == 4
    assert len(traces) == 4 + 6  # 4 traces by call_jax + one per reference run
    m = jax_call.explain(f, (a, 3, "abs"))
    assert [r.kind for r in m.rows] == ["tensor", "static", "static"]
    assert [r.value for r in m.rows[1:]] == ["3", "'abs'"]


def test_torch_dtype_static_is_converted_and_keyed():
    def f(a, dtype):
        return a.astype(dtype)

    a = xla(5)
    out = jax_call.call_jax(f, (a, torch.bfloat16))
    assert out.dtype == torch.bfloat16
    assert_bit_equal(out, run_in_jax(f, (a, jnp.bfloat16)))
    assert jax_call.call_jax(f, (a, torch.int32)).dtype == torch.int32


def test_dtypes_round_trip_bit_equal():
    def f(a, b, c, d):
        return a * 3, jnp.logical_not(b), c + 1, d.astype(jnp.float32) * 2

    args = (xla(4, dtype=torch.bfloat16), torch.tensor([True, False], device="xla"),
            torch.arange(5, dtype=torch.int32).to("xla"), torch.arange(3, dtype=torch.uint8).to("xla"))
    out = check_against_jax(f, args)
    assert [o.dtype for o in out] == [torch.bfloat16, torch.bool, torch.int32, torch.float32]


def test_cpp_signature_reader_agrees_with_jaxlib():
    fns_specs = [
        (lambda a, b: (a + 1, b), [jax.ShapeDtypeStruct((2, 3), jnp.bfloat16), jax.ShapeDtypeStruct((), jnp.bool_)]),
        (lambda a: a.sum(), [jax.ShapeDtypeStruct((7,), jnp.int8)]),
        (lambda a, b: [a, b, a], [jax.ShapeDtypeStruct((1, 2, 3, 4), jnp.float16), jax.ShapeDtypeStruct((0,), jnp.uint32)]),
    ]
    for fn, specs in fns_specs:
        hlo = jax.jit(fn).lower(*specs).compiler_ir("hlo")
        sig = _core.read_hlo_signature(hlo.as_serialized_hlo_module_proto())
        ps = hlo.program_shape()
        assert [tuple(p.dims) for p in sig.parameters] == [tuple(s.dimensions()) for s in ps.parameter_shapes()]
        # jaxlib prints with layouts ("f32[3]{0}"); ours without.
        strip = lambda s: str(s).split("{")[0]  # noqa: E731
        assert [str(p) for p in sig.parameters] == [strip(s) for s in ps.parameter_shapes()]
        assert [p.element_type for p in sig.parameters] == [strip(s).split("[")[0] for s in ps.parameter_shapes()]
        res = ps.result_shape()
        expected = [strip(s) for s in res.tuple_shapes()] if res.is_tuple() else [strip(res)]
        assert [str(r) for r in sig.results] == expected
        assert sig.module_name == hlo.as_hlo_module().name


def test_cpp_check_rejects_a_module_that_disagrees_with_the_leaves():
    proto = jax.jit(lambda a, b: a + b).lower(
        jax.ShapeDtypeStruct((3,), jnp.float32), jax.ShapeDtypeStruct((3,), jnp.float32)
    ).compiler_ir("hlo").as_serialized_hlo_module_proto()
    leaves = [("args[0]", "tensor", "float32", [3], ""), ("args[1]['w']", "tensor", "float32", [4], "")]
    with pytest.raises(InvalidArgumentError, match=r"args\[1\]\['w'\]: HLO parameter 1 is f32\[3\] but the leaf is f32\[4\]") as e:
        _core.build_param_mapping(leaves, [], [0, 1], proto)
    assert isinstance(e.value, ValueError) and e.value.code == "INVALID_ARGUMENT"
    with pytest.raises(ValueError, match=r"has 2 parameters but 1 inputs are kept \[args\[0\]\]"):
        _core.build_param_mapping(leaves, [], [0], proto)
    good = [("args[0]", "tensor", "float32", [3], ""), ("args[1]['w']", "tensor", "float32", [3], "")]
    assert _core.build_param_mapping(good, [], [0, 1], proto, [("output", "float32", [3])]).num_hlo_params == 2
    with pytest.raises(ValueError, match=r"^output: HLO output 0 is f32\[3\] but the traced output is s32\[3\]"):
        _core.build_param_mapping(good, [], [0, 1], proto, [("output", "int32", [3])])


def test_int64_leaf_without_x64_is_named():
    # JAX lowers int64 as int32 while jax_enable_x64 is off; the C++ check catches the mismatch.
    assert not jax.config.jax_enable_x64
    with pytest.raises(InvalidArgumentError, match=r"args\[0\]\['ids'\]: HLO parameter 0 is s32\[4\] but the leaf is s64\[4\]") as e:
        jax_call.call_jax(lambda d: d["ids"] + 1, ({"ids": torch.arange(4).to("xla")},))
    assert e.value.__notes__ == ["jax_enable_x64 is off, so JAX lowers 64-bit leaves as 32-bit"]


def test_cpu_tensor_is_named():
    with pytest.raises(jax_call.JaxCallArgumentError, match=r"^args\[1\]\['b'\]: expected an XLA tensor, got a tensor on 'cpu'"):
        jax_call.call_jax(lambda a, d: a + d["b"], (xla(3), {"b": torch.ones(3)}))


def test_unsupported_dtype_is_named():
    with pytest.raises(jax_call.JaxCallArgumentError, match=r"^kwargs\['q'\]: dtype torch.complex32 is not supported"):
        jax_call.explain(lambda a, q: a, (torch.ones(2),), {"q": torch.ones(2, dtype=torch.complex32)})


def test_arrays_and_unhashable_statics_are_named():
    with pytest.raises(jax_call.JaxCallArgumentError, match=r"^args\[1\]\[0\]: a ndarray is not a call_jax argument"):
        jax_call.call_jax(lambda a, b: a, (xla(2), [np.ones(2)]))

    class Unhashable:
        __hash__ = None

    with pytest.raises(jax_call.JaxCallArgumentError, match=r"^kwargs\['opt'\]: static argument of type Unhashable is not hashable"):
        jax_call.call_jax(lambda a, opt: a, (xla(2),), {"opt": Unhashable()})


def test_function_raising_while_tracing():
    def bad(a, b):
        return a @ b  # (3,) @ (4,): shapes do not match

    with pytest.raises(jax_call.JaxCallTraceError, match=r"bad raised TypeError while being traced and lowered for cpu with \(args\[0\]: float32\[3\], args\[1\]: float32\[4\]\)") as e:
        jax_call.call_jax(bad, (xla(3), xla(4)))
    assert isinstance(e.value.__cause__, TypeError)


def test_non_array_output_is_named():
    with pytest.raises(jax_call.JaxCallOutputError, match=r"^output\['meta'\]\[1\]: the JAX function returned a str"):
        jax_call.call_jax(lambda a: {"y": a, "meta": (a, "label")}, (xla(2),))


def test_no_kept_inputs_at_all():
    # JAX keeps nothing, but torch_xla's user computation rejects zero inputs ("Check failed:
    # !inputs.empty()"): the first tensor leaf stays as an unread parameter.
    def f(a, b):
        return jnp.arange(4.0) * 2

    out = check_against_jax(f, (xla(3), xla(2)))
    assert out.device.type == "xla"
    m = jax_call.explain(f, (xla(3), xla(2)))
    assert (m.num_hlo_params, [r.kept for r in m.rows]) == (1, [True, False])
    with pytest.raises(jax_call.JaxCallArgumentError, match="at least one tensor leaf"):
        jax_call.call_jax(lambda s: jnp.arange(4.0) * s, (2.0,))


def test_explain_accepts_cpu_tensors_and_shape_dtype_structs():
    def f(a, b):
        return a.sum() + b

    m1 = jax_call.explain(f, (torch.ones(2, 3), jax.ShapeDtypeStruct((), jnp.float32)))
    assert [(r.shape, r.dtype, r.hlo_param) for r in m1.rows] == [((2, 3), "float32", 0), ((), "float32", 1)]
    assert m1.outputs == ("f32[]",)
    assert m1.constants == ()


def test_closed_over_constant_with_flag_turned_on_after_import_stays_embedded():
    # jax 0.7.1 fixes LoweringParameters.hoist_constants_as_args when jax is imported (flag off
    # here), so turning the flag on later does not hoist; hoisted_constants_test.py covers both.
    table = jnp.arange(12.0).reshape(3, 4)

    def f(x):
        return x @ table

    previous = jax.config.jax_use_simplified_jaxpr_constants
    jax.config.update("jax_use_simplified_jaxpr_constants", True)
    try:
        check_against_jax(f, (xla(2, 3),))
        m = jax_call.explain(f, (xla(2, 3),))
        assert (m.constants, m.num_hlo_params) == ((), 1)
    finally:
        jax.config.update("jax_use_simplified_jaxpr_constants", previous)


def test_jit_decorated_function_and_bound_method():
    @jax.jit
    def inner(a, unused):
        return a * 2

    args = (xla(3), xla(4))
    check_against_jax(inner, args)
    assert [r.kept for r in jax_call.explain(inner, args).rows] == [True, False]

    class Model:
        def __init__(self, k):
            self.k = k

        def apply(self, a, unused):
            return a * self.k

    m = Model(3.0)
    base = jax_call.cache_info().lowerings
    check_against_jax(m.apply, args)
    check_against_jax(m.apply, args)  # a fresh bound method each time, equal and equally hashed
    assert jax_call.cache_info().lowerings - base == 1
