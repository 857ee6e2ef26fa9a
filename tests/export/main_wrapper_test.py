"""The rewritten `main` of inline_constants / strip_tokens (export/main_wrapper.py, jaxlib's MLIR
builders): every manifest dtype, scalar to 3-d, comes back bit for bit when the inlined bundle
runs on JAX's CPU client (the oracle: the numpy arrays that went in), and the module has the
shape the rewrite promises (one optimization barrier, the old main private and called)."""

import numpy as np
import pytest

from torch_xla_ext import export
from torch_xla_ext.export import graph
from torch_xla_ext.export.manifest import MLIR_TYPES, np_dtype

SHAPES = [(), (1,), (2, 3), (3, 1, 5)]


def _value(rng, dtype, shape):
    dt = np_dtype(dtype)
    if dtype == "bool":
        return rng.random(shape) > 0.5
    if dtype.startswith("complex"):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)
    if dtype.startswith(("int", "uint")):
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, shape, dtype=dt, endpoint=True)
    return rng.standard_normal(shape).astype(dt)


def _bundle(dtype, shape, weight):
    ty = "tensor<" + "".join(f"{d}x" for d in shape) + MLIR_TYPES[dtype] + ">"
    text = (f"func.func @main(%arg0: {ty}, %arg1: {ty}) -> ({ty}, {ty}) {{\n"
            f"  return %arg0, %arg1 : {ty}, {ty}\n}}\n")
    manifest = export.Manifest(
        inputs=[export.Input(0, "parameter", list(shape), dtype, name="w", file="weights/w.npy"),
                export.Input(1, "user_input", list(shape), dtype, position=0)],
        collectives=[], outputs=[{"shape": list(shape), "dtype": dtype}] * 2, unused_inputs=[], num_user_inputs=1)
    return export.Bundle(text, manifest, {"weights/w.npy": weight})


@pytest.mark.parametrize("dtype", sorted(MLIR_TYPES))
def test_inlined_values_run_bit_for_bit(dtype):
    rng = np.random.default_rng(sorted(MLIR_TYPES).index(dtype))
    for shape in SHAPES:
        w, x = _value(rng, dtype, shape), _value(rng, dtype, shape)
        lean = export.inline_constants(_bundle(dtype, shape, w), weights=True)
        assert [i.kind for i in lean.manifest.inputs] == ["user_input"]
        got_w, got_x = export.run(lean, x)
        assert np.asarray(got_w).dtype == w.dtype and np.asarray(got_w).shape == w.shape, (dtype, shape)
        assert np.asarray(got_w).tobytes() == w.tobytes(), (dtype, shape)
        assert np.asarray(got_x).tobytes() == x.tobytes(), (dtype, shape)


def test_the_new_main_calls_the_old_one_behind_a_barrier():
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    lean = export.inline_constants(_bundle("float32", (2, 3), w), weights=True)
    ctx, module = graph.parse(lean.module_text, "lean")
    with ctx:
        funcs = {str(op.attributes["sym_name"]).strip('"'): op for op in module.body.operations}
        assert set(funcs) == {"main", "_txe_main_inner0"}
        assert str(funcs["_txe_main_inner0"].attributes["sym_visibility"]).strip('"') == "private"
        ops = [op.operation.name for op in funcs["main"].regions[0].blocks[0].operations]
    assert ops == ["stablehlo.constant", "stablehlo.optimization_barrier", "func.call", "func.return"]
