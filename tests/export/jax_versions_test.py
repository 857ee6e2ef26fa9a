"""What a JAX consumer of a bundle gets on the running JAX, fast (the real JAX-only venvs at
0.7.1 and 0.10.2 are //tests/packaging:jax_only_test): `save(jax_export=True)` + `load_jax` give
jax.export's own serialization (+ the weights' safetensors) back, checked against the running JAX's calling-convention window; bundles
and serializations it cannot read are typed errors naming the file and the versions read here."""

import dataclasses
import json
import os
import shutil

import jax
import jax.export
import numpy as np
import pytest

from tests.export import models

from torch_xla_ext import export  # noqa: E402
from torch_xla_ext._compat import jax_export  # noqa: E402

LOW = jax.export.minimum_supported_calling_convention_version
HIGH = jax.export.maximum_supported_calling_convention_version


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    model, args = models.two_all_reduces()
    path = tmp_path_factory.mktemp("b") / "bundle"
    export.export(model, args).save(path, jax_export=True)
    return path, [a.numpy() for a in args]


def test_load_jax_is_the_program_run_computes(saved):
    path, args = saved
    exp = export.load_jax(path)
    assert exp.exported.calling_convention_version == HIGH
    (want,) = export.run(path, *args)
    # JAX drops the unused input itself (module_kept_var_idx), as for its own exports.
    (got,) = exp.call(*args)
    np.testing.assert_array_equal(np.asarray(got), want)
    # The file is jax.export's own: JAX alone reads it (the weights as leading arguments).
    again = jax.export.deserialize(bytearray((path / export.JAX_EXPORT_DIR / "exported.jax").read_bytes()))
    np.testing.assert_array_equal(np.asarray(again.call(*exp.weights, *args)[0]), want)


@pytest.mark.parametrize("version", [HIGH + 1, LOW - 1])
def test_exported_outside_the_window_is_a_version_error(saved, tmp_path, version):
    path, _ = saved
    beyond = dataclasses.replace(export.load_jax(path).exported, calling_convention_version=version)
    d = tmp_path / "beyond"
    shutil.copytree(path / export.JAX_EXPORT_DIR, d)
    f = d / "exported.jax"
    f.write_bytes(beyond.serialize())
    with pytest.raises(export.BundleVersionError) as e:
        export.load_jax(d)
    # Below the window the file has expired (re-export, or re-lower the bundle directory);
    # above it a newer jax.export wrote it.
    where = "below" if version < LOW else "outside"
    assert str(e.value).startswith(f"{f}: calling convention version {version} is {where} jax {jax.__version__}'s "
                                   f"window [{LOW}, {HIGH}]")
    assert isinstance(e.value, export.JaxExportExpiredError) == (version < LOW)
    assert isinstance(e.value, ValueError)


def test_what_is_not_a_serialized_exported(saved, tmp_path):
    path, _ = saved
    junk = tmp_path / "junk"
    shutil.copytree(path / export.JAX_EXPORT_DIR, junk)
    (junk / "exported.jax").write_bytes(os.urandom(64))
    with pytest.raises(export.BundleError, match="exported.jax: not a jax.export"):
        export.load_jax(junk)
    bare = tmp_path / "bare"
    shutil.copytree(path, bare)
    shutil.rmtree(bare / export.JAX_EXPORT_DIR)
    with pytest.raises(export.BundleFileNotFoundError, match="exported.jax"):
        export.load_jax(bare)
    with pytest.raises(export.BundleTypeError, match="path: expected"):
        export.load_jax(b"bytes")


def test_newer_format_version_is_a_version_error(saved, tmp_path):
    path, _ = saved
    newer = tmp_path / "newer"
    shutil.copytree(path, newer)
    m = json.loads((newer / "manifest.json").read_text())
    newest = max(export.manifest.READABLE_FORMAT_VERSIONS) + 1  # (FORMAT_VERSION + 1 is an inlined bundle's)
    m["format_version"] = newest
    (newer / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(export.BundleVersionError) as e:
        export.load(newer)
    assert str(e.value).startswith(f"{newer / 'manifest.json'}: format_version {newest} is not "
                                   f"supported (written by a newer torch_xla_ext)")


def test_exported_fields_of_a_newer_jax_are_named(monkeypatch):
    # A JAX whose Exported requires a field this module does not know: named, not a TypeError.
    @dataclasses.dataclass(frozen=True)
    class Newer:
        fun_name: str
        in_avals: tuple
        out_avals: tuple
        _future_field: int

    monkeypatch.setattr(jax.export, "Exported", Newer)
    with pytest.raises(NotImplementedError, match=r"needs field\(s\) \['_future_field'\]"):
        jax_export.exported(fun_name="main", in_avals=(), out_avals=())


def test_save_names_the_serialization_limit(saved, tmp_path, monkeypatch):
    # A module past jax.export's 2 GiB flatbuffer (lowered here to what this one holds) is refused
    # up front, naming the file and the limit; the rest of the bundle is still a bundle to save.
    path, _ = saved
    bundle = export.load(path)
    size = len(export.to_jax(bundle).exported.mlir_module_serialized)
    monkeypatch.setattr(jax_export, "SERIALIZED_LIMIT", size)
    with pytest.raises(export.BundleError) as e:
        bundle.save(tmp_path / "big", jax_export=True)
    assert str(e.value).startswith(f"{tmp_path / 'big' / export.JAX_EXPORT_DIR / 'exported.jax'}: the serialized "
                                   f"module is {size} bytes; a jax.export serialization holds less than {size} bytes")
    monkeypatch.setattr(jax_export, "SERIALIZED_LIMIT", size + 1)
    bundle.save(tmp_path / "fits", jax_export=True)
    assert export.load_jax(tmp_path / "fits").exported.calling_convention_version == HIGH
