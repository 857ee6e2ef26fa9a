"""to_jax and inline_constants at any size: weights never become MLIR text or part of the
serialized program (to_jax: arrays bound to the Exported's leading arguments, saved as
safetensors; inline_constants: `dense_resource` constants whose values stay arrays, saved as
.npy), results match torch_xla's execution, and the one route that puts weights into a size-limited
container (to_jax of an inlined bundle: jax.export's 2 GiB flatbuffer) refuses with a typed error
naming the limit and the route. GPT-2 124M's peak memory is measured by bench/to_jax_bench.py in
a fresh process (too large for the suite)."""

import os

import jax
import numpy as np
import pytest
import torch

from torch_xla_ext import export
from torch_xla_ext._compat import stablehlo as compat
from torch_xla_ext.export import transforms

from tests.export import bounds


class Mlp(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.a = torch.nn.Linear(16, width)
        self.b = torch.nn.Linear(width, 4)
        self.register_buffer("position_ids", torch.arange(16))  # int64: a small module constant

    def forward(self, x):
        return self.b(torch.relu(self.a(x + self.position_ids.to(x.dtype)))),


def _bundle(width):
    torch.manual_seed(0)
    model, x = Mlp(width), torch.randn(2, 16)
    return model, x, export.export(model, (x,))


@pytest.fixture(scope="module")
def small_and_large():
    return _bundle(8), _bundle(2048)


def test_the_program_does_not_grow_with_the_weights(small_and_large):
    """250x the weights, the same program: no weight is written into the module."""
    (_, _, small), (_, _, large) = small_and_large
    es, el = export.to_jax(small), export.to_jax(large)
    w_small, w_large = sum(w.nbytes for w in es.weights), sum(w.nbytes for w in el.weights)
    assert w_large > 100 * w_small
    assert len(el.exported.mlir_module_serialized) < 2 * len(es.exported.mlir_module_serialized) < w_large / 10
    text = el.exported.mlir_module()
    assert "dense_resource" not in text and len(text) < w_large / 10
    # the float weights are main's leading arguments, in weight_names' order; the int64 buffer is not
    assert set(el.weight_names) == {"a.weight", "a.bias", "b.weight", "b.bias"}
    assert [tuple(a.shape) for a in el.exported.in_avals[:len(el.weights)]] == [w.shape for w in el.weights]
    assert [tuple(a.shape) for a in el.in_avals] == [(2, 16)]


def test_saved_and_loaded_results_match_torch_xla(small_and_large, tmp_path):
    (_, x, _), (model, xl, large) = small_and_large
    exp = export.to_jax(large)
    exp.save(tmp_path / "m.jax")
    files = sorted(os.listdir(tmp_path / "m.jax"))
    assert files == [transforms.EXPORTED_FILE, transforms.WEIGHTS_FILE]
    assert os.path.getsize(tmp_path / "m.jax" / transforms.EXPORTED_FILE) < sum(w.nbytes for w in exp.weights) / 10
    again = export.load_jax(tmp_path / "m.jax")
    for name, w, v in zip(again.weight_names, again.weights, exp.weights):
        np.testing.assert_array_equal(w, v, err_msg=name)  # arrays round-trip exactly
    (got,) = again.call(xl.numpy())
    (jitted,) = jax.jit(again.exported.call)(*again.weights, xl.numpy())
    theirs = compat.run_with_torch_xla(large.torch_xla_export.graph_module, xl)
    bounds.assert_same_program([np.asarray(got)], theirs[:1], "to_jax vs torch_xla")
    np.testing.assert_array_equal(np.asarray(jitted), np.asarray(got))  # one program, one compiler
    with torch.no_grad():  # and the model's own math (eager CPU: another compiler)
        np.testing.assert_allclose(np.asarray(got), model(xl)[0].numpy(), rtol=1e-4, atol=1e-5)


def test_inlined_weights_stay_arrays(small_and_large, tmp_path):
    """250x the weights, the same text: inline_constants writes no value into the module; saved,
    they are .npy files beside it (bit-exact), and the loaded bundle runs as the original does
    (one compiler, the same constants: bit-equal) and as torch_xla does (within the bounds)."""
    (_, x, small), (model, xl, large) = small_and_large
    lean_small, lean = (export.inline_constants(b, weights=True) for b in (small, large))
    weight_bytes = sum(a.nbytes for a in large.arrays.values())
    assert len(lean.module_text) < 2 * len(lean_small.module_text) < weight_bytes / 10
    assert [i.kind for i in lean.manifest.inputs] == ["user_input"]
    assert sum(a.nbytes for a in lean.resources.values()) == weight_bytes
    for inp in large.manifest.inputs:  # the bundle's own arrays, not copies
        if inp.file:
            assert any(r is large.arrays[inp.file] for r in lean.resources.values()), inp.name
    # inlined in two steps, every value still sits at the top of main (run binds those as arguments)
    chained = export.inline_constants(export.inline_constants(large), weights=True)
    assert chained.resources.keys() == lean.resources.keys()
    before_main = chained.module_text[:chained.module_text.index("func.func @main")]
    assert "dense_resource" not in before_main
    lean.save(tmp_path / "b")
    assert export.load(tmp_path / "b").manifest.format_version == export.manifest.RESOURCES_FORMAT_VERSION
    assert not os.path.exists(tmp_path / "b" / "module.mlirbc")  # by default: it would hold the values again
    # asked for, the artifact is self-contained: loaded from it alone, the values are in the module
    lean.save(tmp_path / "art", portable_artifact=True)
    assert os.path.getsize(tmp_path / "art" / "module.mlirbc") > weight_bytes
    os.remove(tmp_path / "art" / "module.mlir")
    from_artifact = export.load(tmp_path / "art")
    assert from_artifact.resources == {}
    np.testing.assert_array_equal(export.run(from_artifact, xl.numpy())[0], export.run(large, xl.numpy())[0])
    on_disk = sum(os.path.getsize(tmp_path / "b" / "resources" / f) for f in os.listdir(tmp_path / "b" / "resources"))
    assert weight_bytes <= on_disk < weight_bytes + 4096 * len(lean.resources)  # .npy headers
    assert os.path.getsize(tmp_path / "b" / "module.mlir") < weight_bytes / 10
    again = export.load(tmp_path / "b")
    for name, arr in lean.resources.items():
        np.testing.assert_array_equal(again.resources[name], arr, err_msg=name)
    (got,) = export.run(again, xl.numpy())
    (plain,) = export.run(large, xl.numpy())
    np.testing.assert_array_equal(got, plain)
    theirs = compat.run_with_torch_xla(large.torch_xla_export.graph_module, xl)
    bounds.assert_same_program([got], theirs[:1], "inline_constants vs torch_xla")


def test_load_jax_names_the_file_it_cannot_read(small_and_large, tmp_path):
    (_, _, small), _ = small_and_large
    path = tmp_path / "m.jax"
    with pytest.raises(export.BundleFileNotFoundError, match="m.jax: missing"):
        export.load_jax(path)
    export.to_jax(small).save(path)
    (path / transforms.EXPORTED_FILE).write_bytes(b"\x00" * 64)
    with pytest.raises(export.BundleError, match="exported.jax: not a jax.export.Exported"):
        export.load_jax(path)
    export.to_jax(small).save(path)
    (path / transforms.WEIGHTS_FILE).write_bytes(b"garbage")
    with pytest.raises(export.BundleError, match="weights.safetensors: not a safetensors file"):
        export.load_jax(path)
    os.remove(path / transforms.WEIGHTS_FILE)
    with pytest.raises(export.BundleFileNotFoundError, match="weights.safetensors: missing"):
        export.load_jax(path)
    # weights of another model: named by tensor and argument
    _, _, other = _bundle(32)
    export.to_jax(other).save(tmp_path / "other")
    os.replace(tmp_path / "other" / transforms.WEIGHTS_FILE, path / transforms.WEIGHTS_FILE)
    with pytest.raises(export.BundleError, match=r"weights.safetensors: tensor '.*' is float32\[.*\], but exported.jax argument"):
        export.load_jax(path)


class _Scale(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(8))

    def forward(self, x):
        return (x * self.w).sum(),


def test_weights_past_the_2gib_flatbuffer_limit_take_the_arrays_route():
    """A cheap construction of a program with 2.25 GiB of weights: the export of an 8-element
    model with its shapes widened in the module and the manifest, the weight a broadcast view
    (nbytes 2.25 GiB, 4 bytes of memory). Neither to_jax nor inline_constants copies it; to_jax
    of the inlined bundle, which would serialize it, refuses by name."""
    import dataclasses

    bundle = export.export(_Scale(), (torch.randn(8),))
    n = 9 * 2**26  # float32: 2.25 GiB, past jax.export.serialize's 2 GiB flatbuffer
    text = bundle.module_text.replace("tensor<8xf32>", f"tensor<{n}xf32>")
    inputs = [dataclasses.replace(i, shape=[n]) for i in bundle.manifest.inputs]
    (w,) = [i for i in inputs if i.kind == "parameter"]
    huge = np.broadcast_to(np.float32(0.5), (n,))
    big = export.Bundle(text, dataclasses.replace(bundle.manifest, inputs=inputs), {w.file: huge})
    exp = export.to_jax(big)
    assert exp.weights[0] is huge  # bound as the array it is: no copy, no text
    assert [tuple(a.shape) for a in exp.exported.in_avals] == [(n,), (n,)]
    assert len(exp.serialize()) == len(exp.exported.serialize()) < 2**16  # the program alone goes into jax's flatbuffer
    # inlined, it stays that array too (no copy, no text) ...
    lean = export.inline_constants(big, weights=True)
    assert [r is huge for r in lean.resources.values()] == [True]
    assert len(lean.module_text) < 2 * len(bundle.module_text) + 1024
    # ... until to_jax would put it into jax's 2 GiB flatbuffer: refused by name, with the route
    with pytest.raises(export.WeightsTooLargeError, match=r"2415919104 bytes .*2 GiB.*before inline_constants"):
        export.to_jax(lean)


# ---- the weights file: the safetensors format without the safetensors package -----------------


def _dtypes():
    import ml_dtypes

    return [np.float32, np.float64, np.float16, ml_dtypes.bfloat16, np.int64, np.int32, np.int8, np.uint8, np.bool_,
            np.complex64]


def test_tensor_file_and_the_safetensors_library_read_each_other(tmp_path):
    """JAX-only venvs have no safetensors package, so export/tensor_file.py reads and writes the
    format with numpy; the real library is the oracle in both directions (torch's API for bf16,
    which safetensors' numpy API lacks)."""
    import safetensors.numpy
    import safetensors.torch
    from torch_xla_ext.export import tensor_file

    rng = np.random.default_rng(0)
    ours = {f"t{k}": (rng.standard_normal((3, k + 1)) * 100).astype(dt) for k, dt in enumerate(_dtypes())}
    ours["scalar"] = np.asarray(np.float32(2.5))
    ours["empty"] = np.zeros((0, 4), np.float32)
    ours["strided"] = np.arange(12, dtype=np.int64).reshape(3, 4)[:, ::2]
    tensor_file.write(tmp_path / "ours.safetensors", ours, {"k": "v"})
    theirs = safetensors.torch.load_file(str(tmp_path / "ours.safetensors"))
    assert list(theirs) == sorted(ours) or set(theirs) == set(ours)
    for name, arr in ours.items():
        got = theirs[name]
        if arr.dtype.name == "bfloat16":
            got = got.view(torch.int16).numpy().view(arr.dtype)
        else:
            got = got.numpy()
        assert got.shape == arr.shape and got.dtype == arr.dtype, name
        np.testing.assert_array_equal(got, arr, err_msg=name)
    plain = {k: v for k, v in ours.items() if v.dtype.name != "bfloat16"}
    safetensors.numpy.save_file({k: np.ascontiguousarray(v) if v.ndim else v for k, v in plain.items()},
                                str(tmp_path / "theirs.safetensors"), metadata={"a": "b"})
    meta, back = tensor_file.read(tmp_path / "theirs.safetensors")
    assert meta == {"a": "b"} and set(back) == set(plain)
    for name, arr in plain.items():
        assert back[name].dtype == arr.dtype and back[name].shape == arr.shape, name
        np.testing.assert_array_equal(back[name], arr, err_msg=name)


@pytest.mark.parametrize("mangle,words", [
    (lambda b: b[:5], "shorter than its 8-byte header length"),
    (lambda b: (2**40).to_bytes(8, "little") + b[8:], "header length"),
    (lambda b: b[:8] + b"[" + b[9:], "not JSON"),
    (lambda b: b.replace(b'"F32"', b'"F99"'), "dtype 'F99'"),
    (lambda b: b.replace(b'"data_offsets":[0,24]', b'"data_offsets":[0,99]'), "data_offsets"),
    (lambda b: b.replace(b'"shape":[2,3]', b'"shape":[2,4]'), "do not hold"),
])
def test_a_bad_weights_file_is_named(tmp_path, mangle, words):
    from torch_xla_ext.export import tensor_file

    path = tmp_path / "w.safetensors"
    tensor_file.write(path, {"w": np.ones((2, 3), np.float32)}, {})
    path.write_bytes(mangle(path.read_bytes()))
    with pytest.raises(export.BundleError, match=words) as info:
        tensor_file.read(path)
    assert str(path) in str(info.value)
