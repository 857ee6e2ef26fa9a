"""The one dtype table (torch_xla_ext/_dtypes.py): every row against the system it names (numpy and
ml_dtypes, JAX's MLIR and HLO lowering, torch, the safetensors library), and every former copy
derived from it."""

import json
import math
import os
import struct
import subprocess
import sys

import jax
import ml_dtypes
import numpy as np
import pytest
import torch

from torch_xla_ext import _dtypes

ROWS = _dtypes.ROWS
IDS = [r.name for r in ROWS]


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_numpy_name_round_trips(row):
    dt = _dtypes.numpy_dtype(row.name)
    assert dt.name == row.name and _dtypes.name_of(dt) == row.name
    assert _dtypes.by_name(row.name) is row


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_mlir_and_xla_names_are_jax_lowering(row):
    spec = jax.ShapeDtypeStruct((2,), _dtypes.numpy_dtype(row.name))
    with jax.experimental.enable_x64():  # 64-bit types lower as themselves only with x64 on
        lowered = jax.jit(lambda x: x).lower(spec)
        assert f"tensor<2x{row.mlir}>" in lowered.as_text()
        assert f"{row.xla.lower()}[2]" in lowered.as_text(dialect="hlo")
    assert _dtypes.by_mlir(row.mlir) is row and _dtypes.find(row.mlir) is row


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_torch_dtype(row):
    t = _dtypes.torch_dtype(row.name)
    assert t is not None, f"torch {torch.__version__} has no torch.{row.name}"
    assert str(t) == f"torch.{row.name}"
    assert torch.empty(0, dtype=t).element_size() == _dtypes.numpy_dtype(row.name).itemsize
    assert _dtypes.from_torch(t) is row and _dtypes.find(str(t)) is row
    for alias in row.aliases:  # torch's own aliases (torch.half, ...) name the same dtype
        assert _dtypes.find(alias) is row and _dtypes.find(alias.upper()) is row
        if hasattr(torch, alias):
            assert getattr(torch, alias) is t


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_safetensors_code_is_the_library_s(row):
    import safetensors.torch

    t = torch.zeros(2, dtype=_dtypes.torch_dtype(row.name))
    try:
        blob = safetensors.torch.save({"x": t})
    except Exception:  # the library has no code for it
        assert row.safetensors is None
        return
    (n,) = struct.unpack("<Q", blob[:8])
    assert json.loads(blob[8:8 + n])["x"]["dtype"] == row.safetensors
    assert _dtypes.by_safetensors(row.safetensors) is row


def test_x64_only_is_what_jax_narrows():
    narrowed = {r.name for r in ROWS
                if jax.numpy.asarray(np.zeros(1, _dtypes.numpy_dtype(r.name))).dtype.itemsize
                < _dtypes.numpy_dtype(r.name).itemsize}
    assert not jax.config.jax_enable_x64 and narrowed == set(_dtypes.X64_ONLY)


@pytest.mark.parametrize("row", [r for r in ROWS if r.is_float], ids=lambda r: r.name)
def test_float_format_is_how_the_dtype_rounds(row):
    """1 + 2^-m is exact and 1 + 2^-(m+1) rounds to 1 (ties to even) with m mantissa bits; the
    greatest finite value needs the exponent bits."""
    e, m = _dtypes.float_format(row.name)
    dt = _dtypes.numpy_dtype(row.name)
    assert float(np.float64(1 + 2.0 ** -m).astype(dt)) == 1 + 2.0 ** -m
    assert float(np.float64(1 + 2.0 ** -(m + 1)).astype(dt)) == 1.0
    top = float(ml_dtypes.finfo(dt).max)
    # IEEE: the greatest exponent is the bias 2^(e-1)-1; the fn/fnuz float8 types reach one further
    assert 2 ** (e - 1) - 2 < math.log2(top) < 2 ** (e - 1) + 1


def test_narrow_floats():
    from torch_xla_ext.parity import explorer
    from torch_xla_ext.parity.program import rewrite

    assert all(_dtypes.by_name(n).is_float and _dtypes.numpy_dtype(n).itemsize == 2 for n in _dtypes.NARROW_FLOATS)
    assert rewrite.NARROW_FORMATS == {"bf16": (8, 7), "f16": (5, 10)}
    assert explorer.UNIT_ROUNDOFF == {"bf16": 2.0 ** -8, "f16": 2.0 ** -11, "f32": 2.0 ** -24, "f64": 2.0 ** -53}


def test_former_copies_are_the_table():
    from torch_xla_ext import collectives, jax_call, numerics
    from torch_xla_ext._ext import numerics as numerics_core
    from torch_xla_ext.export import manifest, tensor_file
    from torch_xla_ext.parity import casts

    # numerics: exactly the floats the C++ comparator has an enum member for
    members = {n for n in dir(numerics_core.DType) if isinstance(getattr(numerics_core.DType, n), numerics_core.DType)}
    assert set(numerics.DTYPES) == members == {"float64", "float32", "float16", "bfloat16"}
    for row in ROWS:
        t = _dtypes.torch_dtype(row.name)
        assert jax_call.TORCH_TO_JAX[t] == row.name and jax_call.JAX_TO_TORCH[row.name] is t
        assert tensor_file.CODES.get(row.name) == row.safetensors
        if not row.name.startswith("float8"):
            assert manifest.ELEMENT_TYPES[row.mlir] == row.name and manifest.np_dtype(row.name) == _dtypes.numpy_dtype(row.name)
        if row.is_float and not row.name.startswith("float8"):
            for spelling in (row.name, row.mlir, f"torch.{row.name}", *row.aliases):
                assert casts.torch_dtype(spelling) is t
    assert collectives.CPU_UNREDUCIBLE == ("torch.bfloat16", "torch.float16")


@pytest.mark.parametrize("bad", ["int32", "bool", "float8_e4m3fn", "fp128", "complex64"])
def test_parity_dtype_still_floats_only(bad):
    from torch_xla_ext.parity import ParityError, casts

    with pytest.raises(ParityError, match=repr(bad)):
        casts.torch_dtype(bad)


def test_safetensors_float8_round_trip_with_the_library(tmp_path):
    import safetensors.torch

    from torch_xla_ext.export import tensor_file

    x = np.array([0.5, -2.0, 448.0], ml_dtypes.float8_e4m3fn)
    tensor_file.write(tmp_path / "a.safetensors", {"x": x}, {})
    got = safetensors.torch.load_file(str(tmp_path / "a.safetensors"))["x"]
    assert got.dtype == torch.float8_e4m3fn and got.float().tolist() == x.astype(np.float32).tolist()
    safetensors.torch.save_file({"y": got}, str(tmp_path / "b.safetensors"))
    _, back = tensor_file.read(tmp_path / "b.safetensors")
    assert back["y"].dtype == x.dtype and back["y"].tobytes() == x.tobytes()


def test_importing_the_table_imports_neither_torch_nor_jax():
    code = "import sys, torch_xla_ext._dtypes; print(sorted(m for m in ('torch', 'jax') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
