"""The torchax frontend on the current stack (CPython 3.12, jax 0.12.0.1, torchax 0.0.13 on torch
2.14.1: python/tool_requirements/torchax_0_0_13.txt), from the wheel installed with its [torchax]
extra: parity, export and the doctor, each against an oracle of this venv (fp64 numpy, torch's
eager run, torchax's own run, JAX's compile log). A plain ``import torchax`` fails on this torch
(google/torchax#101); the package imports it through ``_compat/torchax_import``.

Run inside the venv by tests/stacks/run_in_venv.py; it imports only the installed package and what
the venv has."""

import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import torch

import torch_xla_ext

OFFSET = 200_000  # float32 positions lose the angle's low bits this far out


class Mlp(torch.nn.Module):
    def __init__(self, d: int = 32):
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.fc1 = torch.nn.Linear(d, 4 * d)
        self.fc2 = torch.nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(x))))


class Sinusoidal(torch.nn.Module):
    """Adds sinusoidal positions computed in float64 at a large offset (as a long-context model
    that keeps its position table in double precision does)."""

    def __init__(self, d: int = 16):
        super().__init__()
        self.d = d

    def forward(self, x):
        pos = torch.arange(x.shape[1], dtype=torch.float64, device=x.device) + OFFSET
        freq = torch.exp(torch.arange(0, self.d, 2, dtype=torch.float64, device=x.device) * (-math.log(10000.0) / self.d))
        angles = pos[:, None] * freq[None, :]
        table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1).to(x.dtype)
        return x + table


def _numpy_sinusoidal(x: np.ndarray, d: int, dtype) -> np.ndarray:
    pos = np.arange(x.shape[1], dtype=dtype) + dtype(OFFSET)
    freq = np.exp(np.arange(0, d, 2, dtype=dtype) * dtype(-math.log(10000.0) / d))
    angles = pos[:, None] * freq[None, :]
    return x.astype(np.float64) + np.concatenate([np.sin(angles), np.cos(angles)], axis=-1).astype(np.float64)


def test_the_stack_is_the_current_one():
    import jax

    # The oracle that this torch removed what torchax names: torchax's own import, alone.
    plain = subprocess.run([sys.executable, "-c", "import torchax"], capture_output=True, text=True, timeout=300)
    assert plain.returncode != 0 and "dim_Dimname" in plain.stderr, plain.stderr[-2000:]
    from torch_xla_ext import _versions

    _versions.require("parity.torchax")  # the gate's probe imports torchax through the package's shim
    import torchax

    assert "torchax.ops.jaten" in sys.modules and "torchax.export" in sys.modules
    assert not hasattr(torch.ops.aten.prod, "dim_Dimname") and not hasattr(torch.ops.aten, "cholesky")  # torch as it was
    assert sys.version_info[:2] == (3, 12)
    assert jax.__version__ == "0.12.0.1" or jax.__version__.startswith("0.12"), jax.__version__
    assert torch.__version__.split("+")[0] == "2.14.1", torch.__version__
    assert torchax.__file__.startswith(sys.prefix)
    assert torch_xla_ext.__file__.startswith(sys.prefix), torch_xla_ext.__file__  # the wheel


def test_parity_rounding_only_is_not_a_real_difference():
    from torch_xla_ext import parity

    torch.manual_seed(0)
    model, x = Mlp().eval(), torch.randn(2, 5, 32)
    r = parity.verify(model, (x,), frontend="torchax")
    assert r.frontend == "torchax"
    assert "real difference" not in r.summary.lower(), r.summary
    with torch.no_grad():
        gold = model.double()(x.double()).numpy()
    (o,) = r.outputs
    # the run's error against fp64 is a float32 rounding's of the output's scale (an fp64 oracle)
    assert o.xla_error <= 1e3 * 2.0 ** -24 * float(np.abs(gold).max()), (o.xla_error, r.summary)


def test_parity_float64_under_x64_off_is_named():
    from torch_xla_ext import parity

    x = torch.randn(1, 8, 16, generator=torch.Generator().manual_seed(1))
    wide = _numpy_sinusoidal(x.numpy(), 16, np.float64)
    narrow = _numpy_sinusoidal(x.numpy(), 16, np.float32)
    narrowing = float(np.abs(narrow - wide).max())
    assert narrowing > 1e3 * 2.0 ** -24  # the oracle says float32 positions matter here
    r = parity.verify(Sinusoidal(), (x,), frontend="torchax")
    (o,) = r.outputs
    assert "x64" in r.summary and "jax_enable_x64" in r.summary, r.summary
    assert 0.1 * narrowing <= o.xla_error <= 10 * narrowing, (o.xla_error, narrowing)


def test_export_runs_without_torch_and_matches_torch_and_torchax():
    from torch_xla_ext import export

    torch.manual_seed(0)
    model, x = Mlp().eval(), torch.randn(2, 5, 32)
    bundle = export.export(model, (x,), frontend="torchax")
    assert bundle.manifest.frontend == "torchax"
    assert [i.kind for i in bundle.manifest.inputs].count("user_input") == 1
    (out,) = export.run(bundle, x.numpy())
    with torch.no_grad():
        eager = model(x).numpy()
    np.testing.assert_allclose(out, eager, rtol=1e-5, atol=1e-5)


def test_doctor_through_torchax(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "torch_xla_ext", "doctor", "--frontend", "torchax", "--out",
                           str(tmp_path / "r"), "--steps", "2"], cwd=str(tmp_path), capture_output=True, text=True,
                          timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    sections = json.loads((tmp_path / "r" / "report.json").read_text())["sections"]
    assert list(sections) == ["parity", "export", "compiles"]
    assert {n: s["status"] for n, s in sections.items()} == {"parity": "ok", "export": "ok", "compiles": "ok"}, \
        {n: s["summary"] for n, s in sections.items()}
    # the compiles figure against JAX's own compile log of the same loop, untraced
    log = subprocess.run([sys.executable, "-m", "torch_xla_ext.doctor.torchax_steps", "torch_xla_ext.doctor:example",
                          "2"], cwd=str(tmp_path), capture_output=True, text=True, timeout=900,
                         env={**os.environ, "JAX_LOG_COMPILES": "1"})
    assert log.returncode == 0, log.stderr[-3000:]
    # JAX's own handler: "WARNING:<time>:<logger>:<line>: message" (jax 0.7) or the bare message (0.12)
    logged = re.findall(r"^(?:WARNING:.*?:\d+: )?Finished XLA compilation of (\S+)", log.stderr, re.M)
    c = sections["compiles"]
    assert c["compiles"] + c["op_by_op_compiles"] == len(logged), (c, logged)
