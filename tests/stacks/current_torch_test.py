"""torch_xla_ext on current torch without torch_xla: torch 2.14.1 and jax[cpu] 0.10.2 on CPython
3.11 (python/tool_requirements/torch_2_14_1.txt), the wheel installed with
`pip install 'torch_xla_ext-*.whl[torch,jax]'`; run there by tests/stacks/run_in_venv.py.

* The gate: numerics and the export bundle's JAX side run; graph_breaks' Dynamo half asks for torch
  alone; everything that needs torch_xla is refused naming it and the install line, before any of
  it is imported.
* numerics on torch 2.14.1's tensors (bf16, f16, f32, f64; strided, NaN, inf), against torch's own
  verdicts: ``torch.isclose`` in float64, ``torch.testing.assert_close``, and the ULP distance
  from the tensors' bits.
* The JAX side on bundles the pinned stack exported (``prepare``, run first in the project venv):
  load, run, strip_tokens, inline_constants, to_jax, load_jax agree with torch 2.14.1's own eager
  run of the same module with the bundle's weights, within tests/export/bounds.py's bound.
* torchax 0.0.13, whose own import fails on this torch: the torchax features pass the gate, which
  imports it through the package's stand-ins, and its compiled run agrees with torch's eager run.
"""

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import torch

PREPARED = pathlib.Path(os.environ.get("TXE_PREPARED", "."))
# tests/export/bounds.py's rule (the venv cannot import the checkout's tests): two float32
# programs that differ only in summation order lie within 2**8 eps of the output's scale.
ORDER_TOLERANCE = 2**8


class Block(torch.nn.Module):
    """Two linear layers, a GELU and a LayerNorm, a buffer: a transformer MLP in miniature."""

    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(16, 32)
        self.norm = torch.nn.LayerNorm(32)
        self.down = torch.nn.Linear(32, 8)
        self.register_buffer("offset", torch.linspace(-1.0, 1.0, 8))

    def forward(self, x):
        return self.down(self.norm(torch.nn.functional.gelu(self.up(x)))) + self.offset


def prepare(out_dir: pathlib.Path) -> None:
    """On the pinned stack: the bundles this file reads (one with an all-reduce token and a scale)."""
    from torch_xla_ext import collectives, export

    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(16, 8)

        def forward(self, x):
            return collectives.all_reduce("sum", self.lin(x), scale=0.5)

    torch.manual_seed(0)
    x = torch.randn(4, 16)
    np.save(out_dir / "x.npy", x.numpy())
    for name, model in (("block", Block().eval()), ("scaled", Scaled().eval())):
        export.export(model, (x,)).save(out_dir / name, jax_export=True)
    (out_dir / "pinned.json").write_text(json.dumps({"torch": torch.__version__}))


# ---- the stack --------------------------------------------------------------------------------


def test_the_wheel_runs_on_current_torch_without_torch_xla():
    import torch_xla_ext

    assert torch.__version__.split("+")[0] == "2.14.1", torch.__version__
    assert importlib.util.find_spec("torch_xla") is None
    assert torch_xla_ext.__file__.startswith(sys.prefix), torch_xla_ext.__file__  # the wheel, not a checkout
    assert json.loads((PREPARED / "pinned.json").read_text())["torch"].startswith("2.9.")


XLA_FEATURES = ("parity.xla", "collectives", "jax_call", "export.export", "doctor.torch_xla", "graph_breaks.openxla", "trace.lazy")


def test_the_gate_refuses_only_what_needs_torch_xla():
    from torch_xla_ext import _versions

    assert _versions.status("numerics")[0] == "tested"
    assert _versions.status("export.jax")[0] == "accepted"  # jax 0.10.2, not the pin: every probe passes
    for feature in XLA_FEATURES:
        verdict, message = _versions.status(feature)
        assert verdict == "refused", (feature, message)
        assert "torch_xla is not installed" in message and "pip install 'torch-xla-ext[xla]'" in message, message
        assert "torch 2.14.1" in message  # what is installed
    # Dynamo's half of the ledger asks for torch alone: whatever the probes say, not for torch_xla.
    assert _versions.distributions("graph_breaks") == ("torch",)
    assert "torch_xla is not installed" not in (_versions.refusal("graph_breaks") or "")
    # So does the script trace's (its lazy-tensor half is trace.lazy, refused above).
    assert _versions.distributions("trace") == ("torch",)
    # parity imports (a saved capture compares on torch alone); its XLA run is refused.
    from torch_xla_ext import parity

    with pytest.raises(ImportError, match="torch_xla_ext.parity's XLA run and replays cannot run on this stack") as info:
        parity.verify(torch.nn.Linear(4, 4), (torch.ones(2, 4),))
    assert isinstance(info.value, _versions.UnsupportedStackError)


CLI = str(pathlib.Path(sys.executable).parent / "torch-xla-ext")  # the wheel's console script, in this venv


def test_the_stack_command_names_each_refusal(tmp_path):
    out = subprocess.run([CLI, "stack"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 1, out.stdout + out.stderr  # some features are refused here
    lines = out.stdout.splitlines()
    assert lines[0].startswith("torch-xla-ext stack: CPython 3.11") and "torch 2.14.1, torch_xla -" in lines[0]
    verdicts = {line.split()[1]: line.split()[0] for line in lines[1:] if line.startswith("  ")}
    assert verdicts["numerics"] == "tested" and verdicts["export.jax"] == "accepted"
    assert {f for f, v in verdicts.items() if v == "refused"} >= set(XLA_FEATURES)
    assert "torch_xla_ext.parity's XLA run and replays cannot run on this stack: torch_xla is not installed" in out.stdout


def test_the_numerics_command_compares_files_without_torch_xla(tmp_path):
    np.save(tmp_path / "a.npy", np.float32([1, 2, 3]))
    np.save(tmp_path / "b.npy", np.float32([1, 2, 3.5]))
    out = subprocess.run([CLI, "numerics", "--actual", "a.npy", "--expected", "b.npy"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, out.stderr  # a mismatch is a failed check
    assert "Mismatched elements: 1 / 3 (33.3%)" in out.stdout


# ---- numerics on torch 2.14.1's tensors ---------------------------------------------------------

_ORDERED = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32,
            torch.float64: torch.int64}


def _ordered(t: torch.Tensor) -> torch.Tensor:
    """The float bits as integers in value order (sign-magnitude to two's complement), in int64."""
    bits = t.contiguous().view(_ORDERED[t.dtype]).to(torch.int64)
    sign = torch.tensor(1, dtype=torch.int64) << (8 * t.element_size() - 1)
    magnitude = bits & (sign - 1)
    return torch.where(bits < 0, -magnitude, magnitude)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
def test_numerics_agrees_with_torch(dtype):
    from torch_xla_ext import numerics

    g = torch.Generator().manual_seed(7)
    expected = torch.randn(48, 33, generator=g).to(dtype)
    noise = torch.where(torch.rand(48, 33, generator=g) < 0.1, torch.randn(48, 33, generator=g) * 1e-2,
                        torch.zeros(48, 33))
    actual = (expected.double() + noise.double()).to(dtype)
    actual_t, expected_t = actual.T, expected.T  # strided views
    report = numerics.compare(actual_t, expected_t)  # torch.testing's default tolerances for the dtype
    close = torch.isclose(actual_t.double(), expected_t.double(), rtol=report.rtol, atol=report.atol)
    assert report.total == close.numel() and report.mismatched == int((~close).sum())
    assert report.mismatched > 0  # the noise is beyond every dtype's default tolerance somewhere
    with pytest.raises(AssertionError):
        torch.testing.assert_close(actual_t, expected_t)  # torch's own verdict: they differ too
    diff = (actual_t.double() - expected_t.double()).abs()
    assert report.max_abs_diff == float(diff[~close].max())
    ulps = (_ordered(actual_t) - _ordered(expected_t)).abs()
    assert report.max_ulp == int(ulps.max())
    # Equal tensors pass, as torch.testing says; special values follow its rules.
    assert numerics.compare(expected_t, expected_t.clone()).passed
    torch.testing.assert_close(expected_t, expected_t.clone())
    specials = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0], dtype=dtype)
    assert numerics.compare(specials, specials.clone(), equal_nan=True).passed
    assert numerics.compare(specials, specials.clone()).mismatched == 1  # NaN != NaN without equal_nan


def test_numerics_imports_neither_jax_nor_torch_xla():
    code = ("import sys, torch\nfrom torch_xla_ext import numerics\n"
            "assert numerics.compare(torch.ones(3, dtype=torch.bfloat16), torch.ones(3), check_dtype=False).passed\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib', 'torch_xla')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# ---- the export bundle's JAX side ---------------------------------------------------------------


def _assert_same_program(got: np.ndarray, want: np.ndarray, what: str) -> float:
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, got.shape, want.dtype, want.shape)
    scale = float(np.abs(want).max())
    diff = float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max())
    tol = ORDER_TOLERANCE * float(np.finfo(want.dtype).eps) * scale
    assert diff <= tol, f"{what}: differs by {diff:.3g} > {ORDER_TOLERANCE} eps x scale {scale:.3g}"
    return diff


def _weights(bundle) -> dict[str, torch.Tensor]:
    return {i.name: torch.from_numpy(np.asarray(bundle.arrays[i.file])) for i in bundle.manifest.inputs
            if i.kind in ("parameter", "buffer")}


def _routes(path: pathlib.Path, x: np.ndarray) -> dict[str, np.ndarray]:
    from torch_xla_ext import export

    b = export.load(path)
    return {
        "run": export.run(b, x)[0],
        "strip_tokens": export.run(export.strip_tokens(b), x)[0],
        "inline_constants": export.run(export.inline_constants(export.strip_tokens(b), weights=True), x)[0],
        "to_jax": np.asarray(export.to_jax(b).call(x)[0]),
        "load_jax": np.asarray(export.load_jax(path).call(x)[0]),
    }


def test_the_jax_side_agrees_with_current_torch_on_the_pinned_stacks_bundles():
    from torch_xla_ext import export

    x = np.load(PREPARED / "x.npy")
    model = Block().eval()
    model.load_state_dict(_weights(export.load(PREPARED / "block")))
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
    for route, got in _routes(PREPARED / "block", x).items():
        _assert_same_program(got, want, f"block {route}")

    scaled = export.load(PREPARED / "scaled")
    assert [i.kind for i in scaled.manifest.inputs].count("collective_token") == 1
    w = _weights(scaled)
    with torch.no_grad():  # one replica: the sum is the identity, then the scale
        want = (torch.nn.functional.linear(torch.from_numpy(x), w["lin.weight"], w["lin.bias"]) * 0.5).numpy()
    for route, got in _routes(PREPARED / "scaled", x).items():
        _assert_same_program(got, want, f"scaled {route}")
    assert "torch_xla" not in sys.modules


# ---- graph_breaks' Dynamo half on current torch, backend="inductor" ---------------------------


def _two_breaks(x):
    y = torch.sin(x) + 1
    print("a graph break")  # Dynamo cannot trace print: one break
    if y.sum() > 0:  # data-dependent control flow: another
        y = y * 2
    return torch.cos(y)


def test_graph_breaks_accounts_a_current_torch_backend_without_torch_xla():
    """account() over torch.compile(backend="inductor") (a stand-in for "tpu"/"neuron"): the
    graphs, the breaks with their GB ids and frames, and each recompile with the guard that failed,
    against Dynamo's own counters and explain(); torch_xla is never needed."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    from torch_xla_ext import graph_breaks as gb

    torch._dynamo.reset()
    explained = torch._dynamo.explain(_two_breaks)(torch.randn(8))
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(_two_breaks, backend="inductor")
    with gb.account() as ledger:
        compiled(torch.randn(8))
        first = counters["stats"]["unique_graphs"]
        compiled(torch.randn(8, 3))  # another rank: every frame's guard fails once
    report = ledger.report()
    assert importlib.util.find_spec("torch_xla") is None and "torch_xla" not in sys.modules
    assert report.fx_graphs == counters["stats"]["unique_graphs"] == 2 * explained.graph_count
    assert report.graphs_ended_by_break == 2 * len(explained.break_reasons)
    assert {b["gb_id"] for b in report.fx_breaks} == {"GB0059", "GB0170"}  # print; data-dependent branch
    assert all(b["frame"] and "current_torch_test.py" in b["frame"] for b in report.fx_breaks), report.fx_breaks
    # One recompile per frame compiled again (the function and its two resume functions).
    assert report.recompiles == counters["stats"]["unique_graphs"] - first == explained.graph_count
    assert all("rank mismatch" in r["reason"] for r in report.recompile_reasons), report.recompile_reasons
    assert report.xla_partitions == report.compiles == 0  # nothing of torch_xla's ran


def test_torchax_imports_through_the_package_on_this_torch():
    """torchax 0.0.13 is installed here and its own import fails on torch 2.14.1 (its tables name
    aten.prod.dim_Dimname and aten.cholesky, which torch 2.13 removed): the torchax features pass
    the gate, which imports it through the package's stand-ins, torch's namespaces are left as torch
    made them, and torchax's compiled run of a model agrees with torch's eager run."""
    plain = subprocess.run([sys.executable, "-c", "import torchax"], capture_output=True, text=True, timeout=300)
    assert plain.returncode != 0 and "dim_Dimname" in plain.stderr, plain.stderr[-2000:]  # torchax's own import
    from torch_xla_ext import _versions

    for feature in ("export.torchax", "parity.torchax", "doctor.torchax", "trace.torchax"):
        verdict, message = _versions.status(feature)
        assert verdict != "refused", (feature, message)
    import torchax

    assert not hasattr(torch.ops.aten.prod, "dim_Dimname") and not hasattr(torch.ops.aten, "cholesky")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.LayerNorm(32)).eval()
    x = torch.randn(4, 8)
    with torch.no_grad():
        want = model(x)
        with torchax.default_env():
            got = torchax.compile(model.to("jax"))(x.to("jax")).torch()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)  # torch's eager run is the oracle
    with torchax.default_env():  # an op of the tables torch kept: torch's own result
        assert torch.equal(torch.prod(x.to("jax"), dim=1).torch(), torch.prod(x, dim=1))
