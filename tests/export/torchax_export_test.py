"""`export.export(..., frontend="torchax")`: the same bundle as torch_xla's route, through torchax's
lowering, checked against oracles that do not come from our code: torch.export's own graph
signature (roles by name, mutated buffers), CPU eager PyTorch, torchax's own run of the model
(``torchax.compile``), JAX's deserialized ``jax.export`` of torchax's own program, and float64
numpy reductions across N replicas for torchax's c10d collectives. Bad input: an unknown
frontend, torchax missing (the gate), a model torchax cannot lower or trace -> typed errors
naming them.
"""

import copy
import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.export
import numpy as np
import pytest
import torch

from tests.export import bounds, torchax_models
from torch_xla_ext import _frontend, export
from torch_xla_ext.errors import InvalidArgumentError
from torch_xla_ext.export import exporter

HERE = os.path.dirname(os.path.abspath(__file__))
EPS32 = float(np.finfo(np.float32).eps)


class Block(torch.nn.Module):
    """A transformer-ish block: linear, layer norm, GELU, a softmax over the features, a buffer."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.norm = torch.nn.LayerNorm(8)
        self.register_buffer("shift", torch.linspace(-0.5, 0.5, 8))

    def forward(self, x, mask):
        h = torch.nn.functional.gelu(self.norm(self.lin(x))) + self.shift
        return torch.softmax(h, dim=-1) * mask, h.sum(-1)


def _block():
    torch.manual_seed(0)
    return Block().eval(), (torch.randn(4, 8), torch.ones(4, 8))


@pytest.fixture(scope="module")
def block_bundle(tmp_path_factory):
    model, args = _block()
    bundle = export.export(model, args, frontend="torchax")
    path = tmp_path_factory.mktemp("block") / "bundle"
    bundle.save(path)
    return model, args, bundle, export.load(path)


def test_every_frontend_has_one_exporter():
    assert set(exporter.EXPORTERS) == set(_frontend.FRONTENDS)


def test_roles_by_name_are_torch_exports(block_bundle):
    model, args, bundle, loaded = block_bundle
    sig = torch.export.export(model, args).graph_signature  # the oracle: torch.export's own signature
    kinds = {i.name: i.kind for i in loaded.manifest.inputs}
    assert {k for k, v in kinds.items() if v == "parameter"} == set(sig.inputs_to_parameters.values())
    assert {k for k, v in kinds.items() if v == "buffer"} == set(sig.inputs_to_buffers.values())
    assert [(u["name"], u["position"]) for u in loaded.manifest.user_inputs()] == [("x", 0), ("mask", 1)]
    assert loaded.manifest.output_names == ["output[0]", "output[1]"]
    assert loaded.manifest.frontend == "torchax"
    assert {**loaded.manifest.to_dict(), "portable_artifact_version": None} == bundle.manifest.to_dict()  # save adds it
    for i in loaded.manifest.inputs:  # the weights file holds the model's own tensors
        if i.kind in ("parameter", "buffer"):
            want = dict(model.state_dict())[i.name].numpy()
            np.testing.assert_array_equal(loaded.arrays[i.file], want)


def test_run_against_eager_torchax_and_jax_export(block_bundle):
    import torchax
    import torchax.export as torchax_export

    model, args, bundle, loaded = block_bundle
    leaves = [a.numpy() for a in args]
    ours = export.run(loaded, *leaves)
    with torch.no_grad():
        eager = [t.numpy() for t in model(*args)]
    # CPU eager is another compiler: the same float32 math, other summation orders (the bound)
    bounds.assert_same_program(ours, eager, "run vs CPU eager", label="block")

    # torchax's own run of the model: torchax.compile (jax.jit of its functional call)
    env = torchax.default_env()
    moved = copy.deepcopy(model)  # (outside the environment: torchax has no lowering of the storage set_)
    with env:
        moved = moved.to("jax")
        compiled = torchax.compile(moved)
        theirs = compiled(*[a.to("jax") for a in args])
    theirs = [np.asarray(t.jax()) for t in theirs]
    bounds.assert_same_program(ours, theirs, "run vs torchax.compile", label="block")

    # torchax's own export, serialized by jax.export and read back: the same program as ours
    weights, exp = torchax_export.exported_program_to_stablehlo(torch.export.export(model, args))
    again = jax.export.deserialize(bytearray(exp.serialize()))
    exported = [np.asarray(t) for t in again.call(weights, (list(leaves),))]
    bounds.assert_same_program(ours, exported, "run vs torchax's jax.export", label="block")

    # and ours as a jax.export.Exported, through its own serialization
    exp2 = export.to_jax(loaded)
    got = [np.asarray(t) for t in jax.export.deserialize(bytearray(exp2.serialize())).call(*exp2.weights, *leaves)]
    bounds.assert_same_program(got, ours, "to_jax vs run", label="block")


def test_state_bound_by_the_program_order_and_64_bit_kept(tmp_path):
    model, args = torchax_models.positions()
    bundle = export.export(model, args, frontend="torchax")
    m = bundle.manifest
    ep = torch.export.export(model, args)
    sig = ep.graph_signature
    kinds = {i.name: i.kind for i in m.inputs if i.name}
    assert kinds == {**{n: "parameter" for n in sig.inputs_to_parameters.values()},
                     **{n: "buffer" for n in sig.inputs_to_buffers.values()},
                     **{n: "constant" for n in sig.inputs_to_lifted_tensor_constants.values()},
                     "ids": "user_input", "mask": "user_input"}
    dtypes = {i.name: i.dtype for i in m.inputs}
    assert (dtypes["ids"], dtypes["position_ids"], dtypes["scale"], dtypes["offset"]) == (
        "int64", "int64", "float64", "int64")
    bundle.save(tmp_path / "b")
    h, shifted = export.run(tmp_path / "b", *[a.numpy() for a in args])
    with torch.no_grad():
        want_h, want_shifted = model(*args)
    assert shifted.dtype == np.int64 and (shifted == want_shifted.numpy()).all()  # 2**33 + ids: not narrowed
    assert h.dtype == np.float64
    bounds.assert_same_program([h], [want_h.numpy()], "run vs CPU eager", label="positions")
    assert not jax.config.jax_enable_x64  # the export's x64 mode was scoped


def _reduction_oracle(model, xs, k, reduce):
    """(value, tolerance) per element of output k of FourReduces across replicas, in float64:
    y_r = (x_r @ W.T + b) * (k + 1), reduced over r. The tolerance follows from float32 rounding:
    the dot (4 terms), the bias add, the multiply and the N-term reduction each round at most once
    per term, so 16 eps of the terms' magnitude bounds the difference."""
    w = model.lin.weight.detach().numpy().astype(np.float64)
    b = model.lin.bias.detach().numpy().astype(np.float64)
    ys = np.stack([(x.astype(np.float64) @ w.T + b) * (k + 1) for x in xs])
    mags = np.stack([(np.abs(x.astype(np.float64)) @ np.abs(w).T + np.abs(b)) * (k + 1) for x in xs])
    n = len(xs)
    value = {"sum": ys.sum(0), "avg": ys.mean(0), "min": ys.min(0), "max": ys.max(0)}[reduce]
    mag = {"sum": mags.sum(0), "avg": mags.sum(0) / n, "min": mags.max(0), "max": mags.max(0)}[reduce]
    return value, (16 + n) * EPS32 * mag


@pytest.mark.parametrize("n", [1, 2, 3])
def test_c10d_all_reduces_across_replicas_against_numpy(n):
    model, args = torchax_models.four_reduces()
    bundle = export.export(model, args, frontend="torchax", options=export.ExportOptions(num_replicas=n))
    m = bundle.manifest
    assert [(c.op, c.reduce, c.replica_groups) for c in m.collectives] == [
        ("all_reduce", r, []) for r in ("sum", "sum", "min", "max")]  # avg: a sum and a division
    assert [c.scale for c in m.collectives] == [1.0, 1.0 / n, 1.0, 1.0]  # the C++ analysis' reading of main
    assert [c.lowering.split()[0] for c in m.collectives] == ["psum", "pmean", "pmin", "pmax"]
    assert m.num_replicas == n  # the average divides by n
    xs = [np.random.RandomState(r).randn(2, 4).astype(np.float32) for r in range(n)]
    outs = export.run(bundle, *[(x,) for x in xs], num_replicas=n) if n > 1 else [export.run(bundle, xs[0])]
    for r in range(n):
        for k, reduce in enumerate(torchax_models.REDUCES):
            value, tol = _reduction_oracle(model, xs, k, reduce)
            diff = np.abs(outs[r][k].astype(np.float64) - value)
            assert (diff <= tol).all(), (n, r, reduce, float(diff.max()), float(tol.min()))
    other = 2 if n != 2 else 3
    with pytest.raises(export.RunInputError, match=f"computes for {n} replica"):
        export.run(bundle, *[(xs[0],)] * other, num_replicas=other)
    if n > 1:
        with pytest.raises(export.BundleError, match="num_replicas"):
            export.to_jax(bundle)


class _OurScaledSum(torch.nn.Module):
    """Our all_reduce with a scale (under torchax: c10d's all_reduce, then the multiply)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        from torch_xla_ext import collectives

        return collectives.all_reduce("sum", torch.tanh(self.lin(x)), scale=0.5)


def test_our_all_reduce_keeps_its_requested_scale_across_replicas():
    """The manifest's requested_scale is what the user's call asked (0.5), as under torch_xla, and
    the program applies it: 2 replicas against numpy's 0.5 * sum in float64."""
    model = _OurScaledSum()
    bundle = export.export(model, (torch.randn(2, 4),), frontend="torchax", options=export.ExportOptions(num_replicas=2))
    (c,) = bundle.manifest.collectives
    assert (c.op, c.reduce, c.requested_scale, c.scale) == ("all_reduce", "sum", 0.5, 0.5)
    xs = [np.random.RandomState(20 + r).randn(2, 4).astype(np.float32) for r in range(2)]
    outs = export.run(bundle, *[(x,) for x in xs], num_replicas=2)
    w = model.lin.weight.detach().numpy().astype(np.float64)
    b = model.lin.bias.detach().numpy().astype(np.float64)
    want = 0.5 * sum(np.tanh(x.astype(np.float64) @ w.T + b) for x in xs)
    for r in range(2):  # tanh's float32 error (a few ulp), the 2-term sum and the exact halving
        np.testing.assert_allclose(outs[r][0], want, rtol=0, atol=10 * EPS32 * 2)


def test_a_sum_runs_on_any_replica_count():
    model, args = torchax_models.sum_only()
    bundle = export.export(model, args, frontend="torchax")
    assert bundle.manifest.num_replicas is None
    w = model.lin.weight.detach().numpy().astype(np.float64)
    b = model.lin.bias.detach().numpy().astype(np.float64)
    for n in (1, 2, 4):
        xs = [np.random.RandomState(10 + r).randn(2, 4).astype(np.float32) for r in range(n)]
        outs = export.run(bundle, *[(x,) for x in xs], num_replicas=n) if n > 1 else [export.run(bundle, xs[0])]
        want = sum(np.tanh(x.astype(np.float64) @ w.T + b) for x in xs)
        for r in range(n):  # tanh's float32 error (a few ulp) and the n-term sum
            np.testing.assert_allclose(outs[r][0], want, rtol=0, atol=(8 + n) * EPS32 * n)


def test_mutated_buffers_are_listed_by_both_frontends():
    model, args = torchax_models.training_norm()
    # the oracle: torch.export's functional program (its decompositions) names the writes
    program = torch.export.export(copy.deepcopy(model), args).run_decompositions()
    want = sorted(program.graph_signature.buffers_to_mutate.values())
    assert want == ["bn.num_batches_tracked", "bn.running_mean", "bn.running_var"]
    for frontend in _frontend.FRONTENDS:
        m = export.export(copy.deepcopy(model), args, frontend=frontend).manifest
        assert sorted(d["name"] for d in m.dropped_mutations) == want, frontend
        assert {d["kind"] for d in m.dropped_mutations} == {"buffer"}
        assert "in-place writes not returned" in m.table() and "bn.running_mean" in m.table()


def test_unknown_frontend_is_named():
    with pytest.raises(_frontend.UnknownFrontendError) as info:
        export.export(torch.nn.Linear(2, 2), (torch.ones(1, 2),), frontend="torch-xla")
    assert isinstance(info.value, ValueError)
    assert str(info.value).startswith("frontend: 'torch-xla' is not a frontend; known are 'torch_xla'")
    assert "'torchax'" in str(info.value)


class Angle(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        return torch.angle(y)  # torchax 0.0.13 has no lowering of aten.angle


class Branchy(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # a branch on a value: torch.export has no one program
            return x
        return -x


def test_an_op_torchax_cannot_lower_is_named_with_its_line():
    import torchax
    from torchax.ops import ops_registry

    torchax.default_env()
    assert torch.ops.aten.angle not in ops_registry.all_aten_ops  # the oracle: torchax's own registry
    with pytest.raises(export.ExportLoweringError) as info:
        export.export(Angle(), (torch.randn(3),), frontend="torchax")
    e = info.value
    assert "torchax has no JAX lowering of aten.angle.default" in str(e)
    assert e.source.endswith(f"{os.path.basename(__file__)}:{Angle.forward.__code__.co_firstlineno + 2}")
    assert e.source_line == "return torch.angle(y)  # torchax 0.0.13 has no lowering of aten.angle"
    assert e.module_path == "" and isinstance(e, NotImplementedError)


def test_a_dtype_torchax_changes_is_refused_naming_the_op():
    model, args = torchax_models.counts_so_far()
    assert model(*args).dtype == torch.int64  # torch's own result: the oracle
    with pytest.raises(export.ExportLoweringError) as info:
        export.export(model, args, frontend="torchax")
    assert "gives dtype int32 where torch.export's program has int64" in str(info.value)
    assert "aten.cumsum.default" in str(info.value) and info.value.source_line == "return torch.cumsum(flags, 0)"


def test_a_model_torch_export_cannot_trace_is_named_with_its_line():
    with pytest.raises(export.ExportLoweringError) as info:
        export.export(Branchy(), (torch.randn(3),), frontend="torchax")
    assert str(info.value).startswith("torch.export failed on the model [")
    assert info.value.source_line == "if x.sum() > 0:  # a branch on a value: torch.export has no one program"


def test_other_c10d_collectives_are_refused():
    model, args = torchax_models.gathered()
    with pytest.raises(export.ExportLoweringError, match="all_gather_into_tensor.*depends on the replica count"):
        export.export(model, args, frontend="torchax")


def test_lazy_tracer_is_torch_xla_only():
    with pytest.raises(InvalidArgumentError, match="options.tracer: 'lazy' is torch_xla's lazy trace"):
        export.export(torch.nn.Linear(2, 2), (torch.ones(1, 2),), frontend="torchax",
                      options=export.ExportOptions(tracer="lazy"))


def test_a_missing_torchax_is_refused_naming_the_install_line():
    code = textwrap.dedent("""
        import importlib.metadata as md, sys
        real = md.version
        def version(name):
            if name == "torchax":
                raise md.PackageNotFoundError(name)
            return real(name)
        md.version = version
        import torch
        from torch_xla_ext import _versions, export
        try:
            export.export(torch.nn.Linear(2, 2), (torch.ones(1, 2),), frontend="torchax")
        except ImportError as e:
            print(type(e).__name__, "|", str(e).replace("\\n", " / "))
        print("torchax imported:", "torchax" in sys.modules)
        print("torch_xla route |", _versions.refusal("export.export") or "passes")
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = dict(line.split(" | ", 1) for line in r.stdout.splitlines() if " | " in line)
    refusal = lines["UnsupportedStackError"]
    assert refusal.startswith("torch_xla_ext.export.export(frontend='torchax') cannot run on this stack: "
                              "torchax is not installed"), refusal
    assert "pip install 'torch-xla-ext[torchax]'" in refusal and "torchax -" in refusal
    assert "torchax imported: False" in r.stdout
    assert lines["torch_xla route"] == "passes"


def test_cli_export_and_inspect_with_frontend(tmp_path):
    env = dict(os.environ, PJRT_DEVICE="CPU", PYTHONPATH=os.pathsep.join(p for p in sys.path if p))

    def cli(*argv):
        return subprocess.run([sys.executable, "-m", "torch_xla_ext", *argv], env=env, capture_output=True,
                              text=True, timeout=300)

    out = tmp_path / "bundle"
    r = cli("export", "--frontend", "torchax", "--num-replicas", "2",
            "--model", "tests.export.torchax_models:four_reduces", "--out", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "frontend: torchax" in r.stdout and "computes for 2 replica(s) only" in r.stdout
    r = cli("inspect", str(out), "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    manifest = json.loads(r.stdout)
    assert manifest["frontend"] == "torchax" and manifest["num_replicas"] == 2
    r = cli("export", "--frontend", "jax", "--model", "tests.export.torchax_models:sum_only", "--out", str(tmp_path / "x"))
    assert r.returncode == 2
    assert "--frontend: 'jax' is not a frontend; known are 'torch_xla' (the default), 'torchax'" in r.stderr
