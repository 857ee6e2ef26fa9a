"""load() rejects corrupted bundles with a typed error naming the file and the manifest field, and
never unpickles."""

import json
import os
import shutil

import numpy as np
import pytest

from tests.export import models

from torch_xla_ext import export  # noqa: E402
from torch_xla_ext.errors import TorchXlaExtError  # noqa: E402


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    model, args = models.two_all_reduces()
    path = tmp_path_factory.mktemp("good")
    export.export(model, args).save(path)
    return path


@pytest.fixture
def bundle_dir(saved, tmp_path):
    d = tmp_path / "b"
    shutil.copytree(saved, d)
    return d


def _manifest(d):
    return json.loads((d / "manifest.json").read_text())


def _write_manifest(d, m):
    (d / "manifest.json").write_text(json.dumps(m))


def _weight(d, name="lin.weight"):
    m = _manifest(d)
    inp = next(i for i in m["inputs"] if i.get("name") == name)
    return inp, d / inp["file"]


def test_good_bundle_loads(bundle_dir):
    assert len(export.load(bundle_dir).manifest.inputs) == 7


def test_truncated_npy(bundle_dir):
    inp, path = _weight(bundle_dir)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 10])
    with pytest.raises(export.BundleError) as e:
        export.load(bundle_dir)
    assert str(path) in str(e.value) and f"inputs[{inp['index']}].file" in str(e.value)
    assert isinstance(e.value, ValueError) and isinstance(e.value, TorchXlaExtError)


def test_pickled_npy_is_not_unpickled(bundle_dir, tmp_path):
    inp, path = _weight(bundle_dir)
    marker = tmp_path / "unpickled"

    class Boom:  # would create `marker` if ever unpickled
        def __reduce__(self):
            return (open, (str(marker), "w"))

    np.save(path, np.array([Boom()], dtype=object), allow_pickle=True)
    with pytest.raises(export.BundleError, match="not a plain numeric .npy"):
        export.load(bundle_dir)
    assert not marker.exists()


def test_wrong_dtype(bundle_dir):
    inp, path = _weight(bundle_dir)
    np.save(path, np.load(path).astype(np.float64))
    with pytest.raises(export.BundleError, match=rf"dtype float64 but manifest.json field 'inputs\[{inp['index']}\].dtype' is float32"):
        export.load(bundle_dir)


def test_wrong_shape(bundle_dir):
    inp, path = _weight(bundle_dir)
    np.save(path, np.zeros((4, 5), np.float32))
    with pytest.raises(export.BundleError, match=rf"shape \[4, 5\] but manifest.json field 'inputs\[{inp['index']}\].shape'"):
        export.load(bundle_dir)


def test_manifest_dtype_disagrees_with_module(bundle_dir):
    m = _manifest(bundle_dir)
    user = next(i for i in m["inputs"] if i["kind"] == "user_input")
    user["dtype"] = "float16"
    _write_manifest(bundle_dir, m)
    with pytest.raises(export.BundleError, match=rf"inputs\[{user['index']}\].dtype' is float16 but main's argument"):
        export.load(bundle_dir)


def test_missing_file(bundle_dir):
    inp, path = _weight(bundle_dir, "offset")
    os.remove(path)
    with pytest.raises(export.BundleFileNotFoundError) as e:
        export.load(bundle_dir)
    assert str(path) in str(e.value) and isinstance(e.value, FileNotFoundError)
    os.remove(bundle_dir / "module.mlir")
    os.remove(bundle_dir / "module.mlirbc")
    with pytest.raises(export.BundleFileNotFoundError, match="module.mlir"):
        export.load(bundle_dir)
    os.remove(bundle_dir / "manifest.json")
    with pytest.raises(export.BundleFileNotFoundError, match="manifest.json"):
        export.load(bundle_dir)


def test_manifest_module_count_mismatch(bundle_dir):
    m = _manifest(bundle_dir)
    m["inputs"].pop()
    _write_manifest(bundle_dir, m)
    with pytest.raises(export.BundleError, match="main has 7 arguments but manifest.json field 'inputs' has 6 entries"):
        export.load(bundle_dir)


def test_unknown_kind(bundle_dir):
    m = _manifest(bundle_dir)
    m["inputs"][1]["kind"] = "weights"
    _write_manifest(bundle_dir, m)
    with pytest.raises(export.BundleError, match=r"'inputs\[1\]\.kind' is 'weights', expected one of user_input, parameter"):
        export.load(bundle_dir)


@pytest.mark.parametrize("edit,match", [
    (lambda m: m.update(format_version=99), "format_version 99 is not supported"),
    (lambda m: m.pop("collectives"), "missing field 'collectives'"),
    (lambda m: m["inputs"][0].update(index=5), r"'inputs\[0\].index' is 5"),
    (lambda m: m["collectives"][0].update(token_input=42), r"'collectives\[0\].token_input' 42"),
    (lambda m: m["inputs"][0].update(dtype="complex256"), r"'inputs\[0\]\.dtype' is 'complex256', expected a dtype name"),
])
def test_bad_manifest_fields(bundle_dir, edit, match):
    m = _manifest(bundle_dir)
    edit(m)
    _write_manifest(bundle_dir, m)
    with pytest.raises(export.BundleError, match=match):
        export.load(bundle_dir)


def test_corrupt_portable_artifact(bundle_dir):
    os.remove(bundle_dir / "module.mlir")
    (bundle_dir / "module.mlirbc").write_bytes(b"ML\xefR garbage")
    with pytest.raises(export.BundleError, match="module.mlirbc: not a StableHLO portable artifact"):
        export.load(bundle_dir)


def test_not_json_and_not_a_module(bundle_dir):
    (bundle_dir / "module.mlir").write_text("func.func @main(")
    with pytest.raises(export.ModuleTextError, match="module.mlir: not a parsable StableHLO module"):
        export.load(bundle_dir)
    (bundle_dir / "module.mlir").write_text("func.func @main(%x: !quant.uniform<i8:f32, 1.0>) { return }")
    with pytest.raises(export.UnknownDialectError, match="module.mlir: uses the MLIR dialect 'quant'"):
        export.load(bundle_dir)
    (bundle_dir / "manifest.json").write_text("{")
    with pytest.raises(export.BundleError, match="manifest.json: not JSON"):
        export.load(bundle_dir)


def test_torch_xla_dir_with_pickled_weight(tmp_path):
    """torch_xla's own loader would np.load(allow_pickle=True); ours refuses."""
    import torch
    from torch_xla import stablehlo as txla_stablehlo

    model, args = models.two_all_reduces()
    txla_stablehlo.save_as_stablehlo(torch.export.export(model, args), str(tmp_path))
    with open(tmp_path / "data" / "lin.bias", "wb") as f:
        np.save(f, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(export.BundleError, match=r"data/lin.bias.*not a plain numeric"):
        export.load(tmp_path)


def test_inlined_bundle_files(saved, tmp_path, monkeypatch):
    """An inlined bundle keeps its values in resources/<name>.npy: each missing, mis-shaped or
    foreign file is named; a reader of format_version 2 refuses it by name (the only readers that
    could not run it)."""
    import dataclasses

    from torch_xla_ext.export import manifest as manifest_module

    bundle = export.load(saved)
    lean = export.inline_constants(bundle, weights=True)
    d = tmp_path / "inl"
    lean.save(d)
    assert _manifest(d)["format_version"] == manifest_module.RESOURCES_FORMAT_VERSION > export.FORMAT_VERSION
    assert _manifest(saved)["format_version"] == export.FORMAT_VERSION  # plain bundles keep their version
    files = sorted(os.listdir(d / "resources"))
    assert files == sorted(f"{k}.npy" for k in lean.resources)
    assert export.load(d).resources.keys() == lean.resources.keys()

    monkeypatch.setattr(manifest_module, "READABLE_FORMAT_VERSIONS", (1, 2))
    with pytest.raises(export.BundleVersionError, match="format_version 3 is not supported .written by a newer"):
        export.load(d)
    monkeypatch.undo()

    name = files[0][:-len(".npy")]
    arr = np.load(d / "resources" / files[0])
    np.save(d / "resources" / files[0], np.zeros((3, 5, 7), arr.dtype))
    with pytest.raises(export.BundleError, match=rf"resources/{name}.npy: .*\[3, 5, 7\], but .*dense_resource<{name}>"):
        export.load(d)
    os.remove(d / "resources" / files[0])
    with pytest.raises(export.BundleFileNotFoundError, match=rf"resources/{name}.npy: missing .*dense_resource<{name}>"):
        export.load(d)
    np.save(d / "resources" / files[0], arr)

    text = (d / "module.mlir").read_text()
    (d / "module.mlir").write_text(text.replace(f"dense_resource<{name}>", "dense_resource<x_1>", 1))
    with pytest.raises(export.BundleError, match=r"dense_resource<x_1> is not a resource name"):
        export.load(d)

    lacking = dataclasses.replace(lean, resources={k: v for k, v in lean.resources.items() if k != name})
    with pytest.raises(export.BundleError, match=rf"dense_resource<{name}> has no value"):
        lacking.save(tmp_path / "lacking")
