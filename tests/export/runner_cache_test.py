"""export.run's compiled programs: a bounded cache (the least recently run goes first) that is not
held while XLA compiles, so a bundle already compiled runs while another thread compiles a new
one. No torch: bundles written by hand; the oracle is numpy and XLA's own compile (the compile is
only held back, never replaced)."""

import threading

import numpy as np
import pytest

from torch_xla_ext import _cache, export
from torch_xla_ext._compat import jax_mlir
from torch_xla_ext.export import runner
from torch_xla_ext.export.manifest import Input, Manifest

OPS = {"add": np.add, "multiply": np.multiply, "subtract": np.subtract, "maximum": np.maximum}


def bundle(op: str) -> export.Bundle:
    text = (f"func.func public @main(%x: tensor<3xf32>, %y: tensor<3xf32>) -> tensor<3xf32> {{\n"
            f"  %0 = stablehlo.{op} %x, %y : tensor<3xf32>\n  return %0 : tensor<3xf32>\n}}\n")
    manifest = Manifest(inputs=[Input(0, "user_input", [3], "float32", position=0),
                                Input(1, "user_input", [3], "float32", position=1)],
                        collectives=[], outputs=[{"shape": [3], "dtype": "float32"}], unused_inputs=[],
                        num_user_inputs=2)
    return export.Bundle(text, manifest, {})


x, y = np.array([1.0, -2.0, 3.0], np.float32), np.array([0.5, 4.0, -1.0], np.float32)


def test_the_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(runner, "EXECUTABLES", _cache.MakeOnceCache(2))
    for op in OPS:
        (out,) = export.run(bundle(op), x, y)
        np.testing.assert_array_equal(out, OPS[op](x, y))
    info = runner.EXECUTABLES.info()
    assert (info.made, info.entries) == (4, 2)
    export.run(bundle("maximum"), x, y)  # still compiled
    export.run(bundle("add"), x, y)      # went first: compiled again
    assert runner.EXECUTABLES.info().made == 5
    assert runner.MAX_EXECUTABLES >= 4


def test_a_compile_does_not_block_a_compiled_bundle(monkeypatch):
    compiled = bundle("add")
    export.run(compiled, x, y)
    compiling, release = threading.Event(), threading.Event()
    real = jax_mlir.compile_replicated

    def held_back(*args, **kwargs):
        compiling.set()
        assert release.wait(60), "the test never released the compile"
        return real(*args, **kwargs)

    monkeypatch.setattr(jax_mlir, "compile_replicated", held_back)
    results = []
    other = threading.Thread(target=lambda: results.append(export.run(bundle("subtract"), x, y)))
    other.start()
    try:
        assert compiling.wait(60)
        done = threading.Event()
        ran = threading.Thread(target=lambda: (export.run(compiled, x, y), done.set()))
        ran.start()
        assert done.wait(30), "a compiled bundle waited for another bundle's compile"
        assert other.is_alive()
    finally:
        release.set()
        other.join(60)
    np.testing.assert_array_equal(results[0][0], x - y)


def test_a_failed_compile_is_not_kept(monkeypatch):
    monkeypatch.setattr(runner, "EXECUTABLES", _cache.MakeOnceCache(2))
    bad = bundle("add")
    bad.module_text = bad.module_text.replace("stablehlo.add %x, %y", 'stablehlo.custom_call @txe_none(%x, %y)')
    bad.module_text = bad.module_text.replace(": tensor<3xf32>\n  return", ": (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>\n  return")
    with pytest.raises(export.BundleError, match="XLA cannot compile main"):
        export.run(bad, x, y)
    assert len(runner.EXECUTABLES) == 0
