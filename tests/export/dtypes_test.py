"""Inputs, buffers and outputs of every kind a real model brings: int64 values past 2**31 (never
narrowed, with JAX's x64 mode off), int32, bool, complex64 buffers and outputs, a list of tensors,
a Python float, keyword tensors, and a dict return value; through export -> save -> load -> run
and to_jax, against torch_xla's execution of the same export and numpy's exact int64."""


import jax
import jax.export
import numpy as np
import pytest
import torch

from torch_xla_ext import export

from tests.export import bounds
from torch_xla_ext._compat import stablehlo as compat

BIG = [2**40 + 7, -(2**35) - 3]


class Mixed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("big", torch.tensor(BIG, dtype=torch.int64))
        self.register_buffer("freqs", torch.polar(torch.ones(4), torch.linspace(0.0, 1.0, 4)))  # complex64

    def forward(self, ids, pair, scale, *, mask, counts):
        z = torch.view_as_complex(pair[0].reshape(4, 2)) * self.freqs
        h = self.lin(pair[1]) * scale
        h = torch.where(mask, h, torch.zeros_like(h)) + counts.to(h.dtype)
        return {"ids": ids * 3 + self.big, "h": h, "z": z}


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    torch.manual_seed(0)
    model = Mixed()
    ids = torch.tensor([2**33 + 1, -5], dtype=torch.int64)
    pair = [torch.randn(8), torch.randn(2, 4)]
    kwargs = {"mask": torch.tensor([[True, False, True, True], [False, True, True, False]]),
              "counts": torch.tensor([[1, 2, 3, 4], [2**20, 0, -7, 9]], dtype=torch.int32)}
    args = (ids, pair, 0.5)
    bundle = export.export(model, args, kwargs)
    path = tmp_path_factory.mktemp("mixed")
    bundle.save(path)
    leaves = [ids.numpy(), pair[0].numpy(), pair[1].numpy(), 0.5, kwargs["mask"].numpy(), kwargs["counts"].numpy()]
    torch_leaves = [ids, pair[0], pair[1], 0.5, kwargs["mask"], kwargs["counts"]]
    theirs = compat.run_with_torch_xla(bundle.torch_xla_export.graph_module, *torch_leaves)
    return model, args, kwargs, bundle, export.load(path), leaves, theirs


def test_manifest_names_and_dtypes(mixed):
    _, _, _, _, loaded, _, _ = mixed
    m = loaded.manifest
    assert [(u["name"], u["dtype"], u["used"]) for u in m.user_inputs()] == [
        ("ids", "int64", True), ("pair[0]", "float32", True), ("pair[1]", "float32", True),
        ("scale", "python:float", False), ("mask", "bool", True), ("counts", "int32", True)]
    (scale,) = m.unused_inputs
    assert scale["value"] == 0.5
    kinds = {i.name: (i.kind, i.dtype) for i in m.inputs if i.kind != "user_input"}
    assert kinds["big"] == ("buffer", "int64") and kinds["freqs"] == ("buffer", "complex64")
    assert kinds["lin.weight"] == ("parameter", "float32")
    assert [(o["name"], o["dtype"]) for o in m.outputs] == [
        ("output['ids']", "int64"), ("output['h']", "float32"), ("output['z']", "complex64")]


def test_int64_past_2_31_survives_save_load_run(mixed):
    model, args, _, _, loaded, leaves, _ = mixed
    assert not jax.config.jax_enable_x64  # JAX's default: the run must not depend on it
    big = loaded.arrays[next(i.file for i in loaded.manifest.inputs if i.name == "big")]
    assert big.dtype == np.int64 and big.tolist() == BIG
    ids_out = export.run(loaded, *leaves)[0]
    assert ids_out.dtype == np.int64
    assert ids_out.tolist() == [3 * (2**33 + 1) + BIG[0], 3 * -5 + BIG[1]]  # exact, as numpy's int64
    assert not jax.config.jax_enable_x64  # ...nor change it


def test_run_equals_torch_xla_and_eager(mixed):
    model, args, kwargs, _, loaded, leaves, theirs = mixed
    ours = export.run(loaded, *leaves)
    assert [o.dtype for o in ours] == [np.int64, np.float32, np.complex64]
    for o, t in zip(ours, theirs):
        np.testing.assert_array_equal(o, t)
    with torch.no_grad():
        eager = model(*args, **kwargs)
    np.testing.assert_allclose(ours[1], eager["h"].numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ours[2], eager["z"].numpy(), rtol=1e-6, atol=1e-6)


def test_python_constant_and_dtype_checks(mixed):
    _, _, _, _, loaded, leaves, _ = mixed
    other = list(leaves)
    other[3] = 0.25
    with pytest.raises(export.RunInputError, match=r"user_inputs\[3\] \(scale\): the program was exported with "
                                                   r"the Python constant 0.5"):
        export.run(loaded, *other)
    other = list(leaves)
    other[5] = leaves[5].astype(np.int64)  # no silent conversion either way
    with pytest.raises(export.RunInputError, match=r"user_inputs\[5\] \(counts\): expected int32\[2, 4\], got int64"):
        export.run(loaded, *other)


def test_to_jax_keeps_int64_and_complex(mixed, tmp_path):
    _, _, _, _, loaded, leaves, theirs = mixed
    export.to_jax(loaded).save(tmp_path / "m.jax")
    exp = export.load_jax(tmp_path / "m.jax")
    tensors = [x for x in leaves if isinstance(x, np.ndarray)]  # the Python constant is baked in
    assert [str(a.dtype) for a in exp.in_avals] == ["int64", "float32", "float32", "bool", "int32"]
    assert [str(a.dtype) for a in exp.out_avals] == ["int64", "float32", "complex64"]
    with jax.experimental.enable_x64():
        got = exp.call(*tensors)
    # the same program on JAX's XLA and torch_xla's: the summation-order bound (bounds.py)
    bounds.assert_same_program([np.asarray(g) for g in got], theirs, "to_jax vs torch_xla")
