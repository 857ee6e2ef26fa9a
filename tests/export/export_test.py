"""export(): the manifest from the C++ analysis on real torch_xla exports, run() against torch_xla's
own execution of the same export, save/load, torch_xla's save_as_stablehlo dirs, the all_reduce
wrapper's scale and hook records, strip_tokens and inline_constants."""

import dataclasses
import json
import os

import numpy as np
import pytest
import torch
import torch_xla
import torch_xla.core.xla_model as xm
from torch_xla import stablehlo as txla_stablehlo

from tests.export import bounds
from tests.export import models

from torch_xla_ext import collectives, export  # noqa: E402
from torch_xla_ext._compat import collectives as xla_collectives  # noqa: E402
from torch_xla_ext._compat import stablehlo as compat  # noqa: E402


def _np(args):
    return [a.numpy() for a in args]


@pytest.fixture(scope="module")
def two():
    model, args = models.two_all_reduces()
    return model, args, export.export(model, args)


def test_manifest_of_two_all_reduces(two):
    model, args, bundle = two
    m = bundle.manifest
    kinds = [(i.kind, i.name, i.position) for i in m.inputs]
    # torch_xla's order: the token (device data), then state sorted by name, then user inputs.
    assert sorted(kinds, key=str) == sorted([
        ("collective_token", None, None),
        ("parameter", "lin.weight", None), ("parameter", "lin.bias", None),
        ("buffer", "offset", None),
        ("constant", "k", None),
        ("user_input", "x", 0), ("user_input", "y", 2),   # named by forward's parameters
    ], key=str)
    token = next(i for i in m.inputs if i.kind == "collective_token")
    assert token.shape == [] and token.dtype == "float32" and token.value == 0.0 and token.file is None
    const = next(i for i in m.inputs if i.kind == "constant")
    assert const.value == 3.0 and const.shape == []
    assert m.unused_inputs == [{"position": 1, "shape": [5], "dtype": "float32", "name": "unused"}]
    assert [o["name"] for o in m.outputs] == ["output"]  # the return value itself
    assert m.num_user_inputs == 3
    assert [(c.op, c.reduce, c.scale, c.requested_scale) for c in m.collectives] == [
        ("all_reduce", "sum", 0.5, 0.5), ("all_reduce", "max", 1.0, 1.0)]
    for c in m.collectives:
        assert c.token_input == token.index  # one token threaded through both
        assert c.replica_groups == []
        assert c.lowering in ("all_reduce", "all_reduce+multiply")
    by_index = {i.index: i for i in m.inputs}
    first = {(by_index[k].kind, by_index[k].name) for k in m.collectives[0].operand_inputs}
    assert first == {("parameter", "lin.weight"), ("parameter", "lin.bias"), ("buffer", "offset"), ("user_input", "x")}
    second = {by_index[k].kind for k in m.collectives[1].operand_inputs}
    assert "constant" in second and "collective_token" not in second
    d = json.loads(m.to_json())
    assert d["format_version"] == export.FORMAT_VERSION
    assert export.Manifest.from_dict(d) == m


def test_token_found_by_structure_not_value(two):
    """A token with a nonzero value is still a token; a lifted scalar 0.0 that feeds arithmetic is not."""
    _, _, bundle = two
    tx = bundle.torch_xla_export
    tok_pos = next(loc.position for loc in tx.input_locations if loc.type == "constant")
    tx.additional_constants[tok_pos] = np.float32(7.0)
    try:
        b = export.bundle.from_torch_xla(tx, {"offset": "buffer", "k": "constant"}, None, [])
    finally:
        tx.additional_constants[tok_pos] = np.float32(0.0)
    assert [i.kind for i in b.manifest.inputs].count("collective_token") == 1
    assert next(i for i in b.manifest.inputs if i.kind == "collective_token").value == 7.0

    class ZeroConst(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.z = torch.tensor(0.0)

        def forward(self, x):
            return x + self.z

    b = export.export(ZeroConst(), (torch.randn(3),))
    assert [i.kind for i in b.manifest.inputs] == ["constant", "user_input"]
    assert b.manifest.collectives == []


def test_run_equals_torch_xla_execution(two):
    """The same StableHLO module compiled by the XLA CPU compiler in torch_xla and in jaxlib, on the
    same inputs: within the summation-order bound (bounds.py); bit-equality is a figure."""
    model, args, bundle = two
    ours = export.run(bundle, *_np(args))
    theirs = compat.run_with_torch_xla(bundle.torch_xla_export.graph_module, *args)
    assert len(ours) == len(theirs) == 1
    bounds.assert_same_program(ours, theirs, "run vs torch_xla")
    # and close to eager CPU PyTorch (a different compiler: tanh and the dot may differ by ulps)
    x, _, y = args
    with torch.no_grad():
        eager = torch.tanh((model.lin(x) + model.offset) * 0.5 * model.k) + y  # world size 1
    np.testing.assert_allclose(ours[0], eager.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("factory,scale", [("one_all_reduce", 1.0), ("one_all_reduce_half", 0.5)])
def test_one_all_reduce_scales(factory, scale):
    model, args = getattr(models, factory)()
    bundle = export.export(model, args)
    kinds = sorted(i.kind for i in bundle.manifest.inputs)
    assert kinds == ["collective_token", "parameter", "parameter", "user_input"]
    (c,) = bundle.manifest.collectives
    assert (c.op, c.reduce, c.scale, c.requested_scale) == ("all_reduce", "sum", scale, scale)
    ours = export.run(bundle, *_np(args))[0]
    bounds.assert_same_program([ours], compat.run_with_torch_xla(bundle.torch_xla_export.graph_module, *args)[:1],
                               "run vs torch_xla")
    np.testing.assert_allclose(ours, (model.lin(args[0]) * scale).detach().numpy(), rtol=1e-6, atol=1e-6)


def test_wrapper_applies_scale_at_world_size_1_where_xm_drops_it(monkeypatch):
    device = torch_xla.device()
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    start = collectives.next_sequence()
    ours = collectives.all_reduce("sum", x.to(device), scale=0.25).cpu()
    theirs = xm.all_reduce(xm.REDUCE_SUM, x.to(device), scale=0.25).cpu()
    assert torch_xla.runtime.world_size() == 1
    torch.testing.assert_close(ours, x * 0.25, rtol=0, atol=0)
    torch.testing.assert_close(theirs, x, rtol=0, atol=0)  # pytorch/xla#9670: scale dropped
    (call,) = collectives.recorded_calls(start)
    assert call.requested_scale == call.applied_scale == 0.25
    assert call.world_size == 1 and call.reduce == "sum" and call.lowering == "all_reduce+multiply"

    # xm.all_reduce with scale != 1 does not export even when forced to lower at world size 1.
    class Xm(torch.nn.Module):
        def forward(self, t):
            return xm.all_reduce(xm.REDUCE_SUM, t, scale=0.5)

    monkeypatch.setenv("XLA_ALWAYS_ALLREDUCE", "1")
    with pytest.raises(RuntimeError, match="Expected XLA tensor"):
        torch.export.export(Xm(), (x,))
    monkeypatch.delenv("XLA_ALWAYS_ALLREDUCE")
    # ...and without forcing, the all-reduce vanishes from the export (a clone), scale and all.
    b = export.export(Xm(), (x,))
    assert b.manifest.collectives == []


def test_wrapper_argument_errors():
    x = torch.ones(3, device=torch_xla.device())
    with pytest.raises(TypeError, match="expected an XLA tensor"):
        collectives.all_reduce("sum", torch.ones(3))  # eager CPU: nothing to reduce with
    with pytest.raises(collectives.CollectiveArgumentError, match="reduce_type"):
        collectives.all_reduce("avg", x)
    with pytest.raises(collectives.CollectiveArgumentError, match="scale"):
        collectives.all_reduce("sum", torch.ones(3, dtype=torch.int32, device=x.device), scale=0.5)
    with pytest.raises(TypeError, match="tensor"):
        collectives.all_reduce("sum", [1.0])
    with pytest.raises(collectives.CollectiveArgumentError, match="groups"):
        collectives.all_reduce("sum", x, groups=[[0, 0]])


def test_xm_all_reduce_export_has_no_requested_scale(monkeypatch):
    """xm.all_reduce does not call the hook: the manifest shows the applied scale only."""
    monkeypatch.setenv("XLA_ALWAYS_ALLREDUCE", "1")

    class Xm(torch.nn.Module):
        def forward(self, t):
            return xm.all_reduce(xm.REDUCE_MAX, t * 2)

    b = export.export(Xm(), (torch.randn(3),))
    (c,) = b.manifest.collectives
    assert (c.reduce, c.scale, c.requested_scale, c.token_input) == ("max", 1.0, None, 0)
    assert b.manifest.inputs[0].kind == "collective_token"


def test_save_load_round_trip(two, tmp_path):
    model, args, bundle = two
    bundle.save(tmp_path)
    files = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert {"manifest.json", "module.mlir", "module.mlirbc"} <= set(files)
    assert all(f.endswith(".npy") for f in files if f not in ("manifest.json", "module.mlir", "module.mlirbc"))
    loaded = export.load(tmp_path)
    assert dataclasses.replace(loaded.manifest, portable_artifact_version=None) == bundle.manifest
    assert loaded.arrays.keys() == bundle.arrays.keys()
    for k in bundle.arrays:
        np.testing.assert_array_equal(loaded.arrays[k], bundle.arrays[k])
    np.testing.assert_array_equal(export.run(str(tmp_path), *_np(args))[0], export.run(bundle, *_np(args))[0])
    assert loaded.manifest.portable_artifact_version is not None
    # Without the text, the portable artifact (module.mlirbc) is read.
    os.remove(tmp_path / "module.mlir")
    from_artifact = export.load(tmp_path)
    np.testing.assert_array_equal(export.run(from_artifact, *_np(args))[0], export.run(bundle, *_np(args))[0])


def test_load_torch_xla_save_as_stablehlo_dir(two, tmp_path):
    model, args, bundle = two
    ep = torch.export.export(model, args)
    txla_stablehlo.save_as_stablehlo(ep, str(tmp_path))
    loaded = export.load(tmp_path)
    # torch_xla's directory does not say parameter vs buffer vs lifted constant: all "parameter".
    # ...nor the user inputs' names.
    got = [(i.kind, i.name) for i in loaded.manifest.inputs]
    want = [(i.kind if i.kind in ("user_input", "collective_token") else "parameter",
             None if i.kind == "user_input" else i.name) for i in bundle.manifest.inputs]
    assert got == want
    assert [(c.reduce, c.scale) for c in loaded.manifest.collectives] == [("sum", 0.5), ("max", 1.0)]
    np.testing.assert_array_equal(export.run(loaded, *_np(args))[0], export.run(bundle, *_np(args))[0])

    # Without the .mlir text, the VHLO portable artifact (functions/forward.bytecode) is read.
    os.remove(tmp_path / "functions" / "forward.mlir")
    from_bytecode = export.load(tmp_path)
    assert [i.kind for i in from_bytecode.manifest.inputs] == [i.kind for i in loaded.manifest.inputs]
    np.testing.assert_array_equal(export.run(from_bytecode, *_np(args))[0], export.run(bundle, *_np(args))[0])


def test_strip_tokens_and_inline_constants_run_equal(two, tmp_path):
    model, args, bundle = two
    want = export.run(bundle, *_np(args))[0]
    stripped = export.strip_tokens(bundle)
    assert "collective_token" not in [i.kind for i in stripped.manifest.inputs]
    assert len(stripped.manifest.inputs) == len(bundle.manifest.inputs) - 1
    assert [c.token_input for c in stripped.manifest.collectives] == [None, None]
    np.testing.assert_array_equal(export.run(stripped, *_np(args))[0], want)

    consts = export.inline_constants(stripped)
    assert sorted(i.kind for i in consts.manifest.inputs) == ["buffer", "parameter", "parameter", "user_input", "user_input"]
    np.testing.assert_array_equal(export.run(consts, *_np(args))[0], want)

    everything = export.inline_constants(consts, weights=True)
    assert [i.kind for i in everything.manifest.inputs] == ["user_input", "user_input"]
    assert everything.arrays == {}
    assert everything.manifest.transforms == ["strip_tokens", "inline_constants", "inline_constants(weights=True)"]
    np.testing.assert_array_equal(export.run(everything, *_np(args))[0], want)
    # a transformed bundle saves and loads like any other
    everything.save(tmp_path)
    np.testing.assert_array_equal(export.run(str(tmp_path), *_np(args))[0], want)

    # inline weights without stripping: the token stays an argument
    w = export.inline_constants(bundle, weights=True)
    assert sorted(i.kind for i in w.manifest.inputs) == ["collective_token", "user_input", "user_input"]
    np.testing.assert_array_equal(export.run(w, *_np(args))[0], want)


def test_run_input_errors(two):
    _, args, bundle = two
    with pytest.raises(export.RunInputError, match="expected 3 user inputs"):
        export.run(bundle, *_np(args)[:2])
    bad = _np(args)
    bad[2] = bad[2].astype(np.float64)
    with pytest.raises(export.RunInputError, match=r"user_inputs\[2\] \(y\): expected float32\[2, 4\], got float64"):
        export.run(bundle, *bad)
    with pytest.raises(export.RunInputError, match="num_replicas"):
        export.run(bundle, *_np(args), num_replicas=0)


def test_export_argument_errors():
    with pytest.raises(TypeError, match="args"):
        export.export(torch.nn.Linear(2, 2), torch.randn(2))


def test_kwargs_and_user_input_positions():
    """User inputs are positions in the flattened (args, kwargs); run() takes them in that order."""

    class Kw(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.full((3,), 2.0))

        def forward(self, a, b, *, c):
            return collectives.all_reduce("min", a * c) - b * self.w

    a, b, c = torch.randn(3), torch.randn(3), torch.randn(3)
    bundle = export.export(Kw(), (a, b), {"c": c})
    users = sorted((i.position, i.index) for i in bundle.manifest.inputs if i.kind == "user_input")
    assert [p for p, _ in users] == [0, 1, 2]
    assert bundle.manifest.num_user_inputs == 3
    (coll,) = bundle.manifest.collectives
    assert coll.reduce == "min"
    positions = {bundle.manifest.inputs[k].position for k in coll.operand_inputs}
    assert positions == {0, 2}  # a and c, not b
    assert [i.name for i in bundle.manifest.inputs if i.kind == "parameter"] == ["w"]
    got = export.run(bundle, a.numpy(), b.numpy(), c.numpy())[0]
    bounds.assert_same_program([got], compat.run_with_torch_xla(bundle.torch_xla_export.graph_module, a, b, c)[:1],
                               "run vs torch_xla")
    np.testing.assert_allclose(got, (a * c - b * 2).numpy(), rtol=1e-6)


def test_all_gather_token_mixed_into_operand(tmp_path):
    """torch_xla has no token operand on all_gather: it adds the zero token, broadcast, into the
    data operand (TokenHandler::GetInput). Recognised from that structure too."""

    class Gather(torch.nn.Module):
        def forward(self, x):
            g = torch.ops._c10d_functional.all_gather_into_tensor(x * 2, 1, "")
            return torch.ops._c10d_functional.wait_tensor(g)

    x = torch.randn(4, 3)
    bundle = export.export(Gather(), (x,))
    assert [i.kind for i in bundle.manifest.inputs] == ["collective_token", "user_input"]
    (c,) = bundle.manifest.collectives
    assert (c.op, c.reduce, c.token_input, c.token_mixed_into_operand, c.operand_inputs) == (
        "all_gather", None, 0, True, [1])
    assert c.replica_groups == [[0]]
    want = compat.run_with_torch_xla(bundle.torch_xla_export.graph_module, x)[0]
    np.testing.assert_array_equal(export.run(bundle, x.numpy())[0], want)
    stripped = export.strip_tokens(bundle)
    assert [i.kind for i in stripped.manifest.inputs] == ["user_input"]
    assert stripped.manifest.collectives[0].token_mixed_into_operand is False
    np.testing.assert_array_equal(export.run(stripped, x.numpy())[0], want)


def test_manifest_shows_a_dropped_scale():
    """A lowering that records its call through the hook but drops the scale (as xm.all_reduce
    does at world size 1) shows up as requested_scale 0.5 next to the applied scale 1.0."""

    class DroppingLowering(torch.nn.Module):
        def forward(self, x):
            collectives.record_all_reduce("sum", 0.5, 1.0, lowering="all_reduce (scale dropped)")
            return xla_collectives.c10d_all_reduce(x, "sum")

    bundle = export.export(DroppingLowering(), (torch.randn(3),))
    (c,) = bundle.manifest.collectives
    assert (c.scale, c.requested_scale, c.lowering) == (1.0, 0.5, "all_reduce (scale dropped)")
    assert "0.5" in bundle.manifest.table().splitlines()[-1]


def test_collectives_inside_regions_are_listed_not_missed():
    """The analysis describes main's top level; a collective in a while body is listed as such."""
    text = """
    func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
      %c0 = stablehlo.constant dense<0> : tensor<i32>
      %c3 = stablehlo.constant dense<3> : tensor<i32>
      %c1 = stablehlo.constant dense<1> : tensor<i32>
      %r:2 = stablehlo.while(%i = %c0, %v = %x) : tensor<i32>, tensor<4xf32>
        cond {
          %p = stablehlo.compare LT, %i, %c3 : (tensor<i32>, tensor<i32>) -> tensor<i1>
          stablehlo.return %p : tensor<i1>
        } do {
          %s = "stablehlo.all_reduce"(%v) <{replica_groups = dense<> : tensor<0x0xi64>}> ({
          ^bb0(%a: tensor<f32>, %b: tensor<f32>):
            %t = stablehlo.add %a, %b : tensor<f32>
            stablehlo.return %t : tensor<f32>
          }) : (tensor<4xf32>) -> tensor<4xf32>
          %j = stablehlo.add %i, %c1 : tensor<i32>
          stablehlo.return %j, %s : tensor<i32>, tensor<4xf32>
        }
      return %r#1 : tensor<4xf32>
    }
    """
    manifest = export.Manifest(inputs=[export.Input(0, "user_input", [4], "float32", position=0)],
                               collectives=[], outputs=[], unused_inputs=[], num_user_inputs=1)
    export.graph.analyze_into(text, manifest, [], "module.mlir")
    assert manifest.collectives == []
    assert manifest.nested_collectives == [{"op": "all_reduce", "inside": "stablehlo.while"}]
    assert "all_reduce in stablehlo.while" in manifest.table()
    bundle = export.Bundle(text, manifest, {})
    np.testing.assert_array_equal(export.run(bundle, np.ones(4, np.float32))[0], np.ones(4, np.float32))


def test_to_jax_round_trip_with_collectives(two, tmp_path):
    """The token-free program with its weights bound, through jax.export's own serialization: it
    takes the user inputs (the unused one dropped by module_kept_var_idx) and equals torch_xla's
    execution of the export with its token and all-reduces."""
    import jax
    import jax.export

    _, args, bundle = two
    exp = export.to_jax(bundle)
    assert [tuple(a.shape) for a in exp.in_avals] == [(2, 4), (5,), (2, 4)]
    n = len(exp.weights)  # the weights (and the lifted constant k) are the leading arguments, all kept
    state = [i.name for i in bundle.manifest.inputs if i.kind in ("parameter", "buffer", "constant")]
    assert sorted(exp.weight_names) == sorted(state) and set(bundle.weights) < set(exp.weight_names)
    e = exp.exported
    assert e.module_kept_var_idx == (*range(n), n, n + 2) and e.platforms == ("cpu",) and e.nr_devices == 1
    exp.save(tmp_path / "m.jax")
    again = export.load_jax(tmp_path / "m.jax")
    got = jax.jit(again.exported.call)(*again.weights, *_np(args))
    want = compat.run_with_torch_xla(bundle.torch_xla_export.graph_module, *args)
    bounds.assert_same_program([np.asarray(got[0])], want[:1], "to_jax vs torch_xla")
    text = again.exported.mlir_module()
    assert "stablehlo.all_reduce" in text and "optimization_barrier" in text  # the token, made inside


def test_export_an_exported_program(two):
    """An ExportedProgram is exported with its own example inputs (torch_xla traces with them)."""
    model, args, bundle = two
    ep = torch.export.export(model, args)
    b = export.export(ep)
    assert [(i.kind, i.name) for i in b.manifest.inputs if i.kind != "user_input"] == \
        [(i.kind, i.name) for i in bundle.manifest.inputs if i.kind != "user_input"]
    assert [u["name"] for u in b.manifest.user_inputs()] == ["args[0]", "args[1]", "args[2]"]
    np.testing.assert_array_equal(export.run(b, *_np(args))[0], export.run(bundle, *_np(args))[0])
    with pytest.raises(TypeError, match="an ExportedProgram is exported with its own example inputs"):
        export.export(ep, args)
