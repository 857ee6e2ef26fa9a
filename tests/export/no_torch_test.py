"""run(), load(), strip_tokens() and inline_constants() work in a process where importing torch
fails: the bundle is exported here, then run by a subprocess that blocks torch and torch_xla. The
subprocess is also a notebook user: 1 replica, then 2, then 4, then 1 again in one process, with
JAX's configuration left as it was (x64 off, one default CPU device)."""

import os
import subprocess
import sys
import textwrap

import numpy as np

from tests.export import models

from torch_xla_ext import export  # noqa: E402
from torch_xla_ext._compat import stablehlo as compat  # noqa: E402

CHILD = textwrap.dedent("""
    import importlib.abc, sys

    class NoTorch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("torch", "torch_xla", "torchax"):
                raise ImportError(f"blocked in this test: {name}")
            return None

    sys.meta_path.insert(0, NoTorch())
    try:
        import torch  # noqa: F401
        raise SystemExit("torch imported although blocked")
    except ImportError:
        pass

    import jax
    import numpy as np

    from torch_xla_ext import export

    before = (jax.config.jax_num_cpu_devices, jax.config.jax_enable_x64)

    bundle_dir, inputs, out = sys.argv[1:4]
    xs = np.load(inputs)
    args = [xs[k] for k in sorted(xs.files)]
    b = export.load(bundle_dir)
    results = {
        "run": export.run(bundle_dir, *args)[0],
        "stripped": export.run(export.strip_tokens(b), *args)[0],
        "inlined": export.run(export.inline_constants(export.strip_tokens(b), weights=True), *args)[0],
    }
    # As a notebook user would: one replica (above), then 2, then 4, then 1 again, in one process
    # whose JAX configuration nobody touched.
    two = export.run(b, tuple(args), tuple(a * 2 for a in args), num_replicas=2)
    results["replica0"], results["replica1"] = two[0][0], two[1][0]
    four = export.run(b, *[tuple(a * (r + 1) for a in args) for r in range(4)], num_replicas=4)
    results.update({f"four{r}": four[r][0] for r in range(4)})
    results["again"] = export.run(b, *args)[0]
    assert not [m for m in sys.modules if m.split(".")[0] in ("torch", "torch_xla")]
    assert (jax.config.jax_num_cpu_devices, jax.config.jax_enable_x64) == before  # the user's JAX
    assert len(jax.devices()) == 1
    np.savez(out, **results)
""")


def test_run_without_torch(tmp_path):
    model, args = models.two_all_reduces()
    bundle = export.export(model, args)
    bundle.save(tmp_path / "bundle")
    np.savez(tmp_path / "inputs.npz", **{f"a{i}": a.numpy() for i, a in enumerate(args)})
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    env.pop("PJRT_DEVICE", None)
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "bundle"), str(tmp_path / "inputs.npz"), str(tmp_path / "out.npz")],
        env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = np.load(tmp_path / "out.npz")
    want = compat.run_with_torch_xla(bundle.torch_xla_export.graph_module, *args)[0]
    for key in ("run", "stripped", "inlined", "again"):
        np.testing.assert_array_equal(got[key], want, err_msg=key)
    # N replicas, replica r fed (r+1)x the inputs: sum then max across replicas (computed by hand).
    lin_w, lin_b = model.lin.weight.detach().numpy(), model.lin.bias.detach().numpy()
    x, _, y = (a.numpy() for a in args)

    def expected(n):
        h = sum((xr @ lin_w.T + lin_b + model.offset.numpy()) for xr in (x * (r + 1) for r in range(n)))
        h = h * np.float32(0.5)
        return np.max([np.tanh(h * np.float32(3.0)) + y * (r + 1) for r in range(n)], axis=0)

    np.testing.assert_allclose(got["replica0"], expected(2), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got["replica0"], got["replica1"])
    for r in range(4):
        np.testing.assert_allclose(got[f"four{r}"], expected(4), rtol=1e-5, atol=1e-5)
