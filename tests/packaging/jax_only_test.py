"""A JAX user receives a bundle: in venvs with only jax[cpu] (the pin, 0.7.1, and 0.10.2 on
CPython 3.11; 0.12.0.1, the newest, on CPython 3.12), flatbuffers and the wheel of that CPython
installed with its `[jax]` extra (docs/export.md, "JAX-only"; `pip check` clean), and no torch,
`export.load`, `run` (also across 2 replicas), `strip_tokens`, `inline_constants`, `to_jax`
(serialized and deserialized by jax) and `load_jax` work on bundles the pinned stack made, and
agree with it. jax 0.11.1 and later no longer deserialize jax 0.7.1's serialization: there
`load_jax` of the bundle re-lowers its StableHLO in that JAX.

The bundles (two zoo models, vit and gpt2, and a program with an all-reduce token and a scale) are exported here,
in the project venv; the reference is the pinned stack's own execution of each export (torch_xla,
one replica) and a float64 numpy computation of the 2-replica program (sum then max across
replicas). Each JAX-only venv runs a child script with a timeout; torch must not be importable
there. The collective program is also saved there (this JAX's StableHLO version) and loaded from
its portable artifact alone. Bad input keeps its typed errors there too (a newer bundle format_version, an Exported
outside the running JAX's calling-convention window).

The venvs are cached (python/tool_venv.py, pins in python/tool_requirements/jax_*.txt); installing
the wheel into each takes seconds, offline. Manual in Bazel (the venvs come from the registry on a
cold machine); .ci/run runs it after building the wheels.
"""

import json
import os
import pathlib
import subprocess
import sys
import time

import numpy as np
import packaging.version
import pytest
import torch
import torch.utils._pytree as pytree

from tests import zoo
from tests.export import bounds
from tests.packaging.wheels import built_wheel, jax_tool_releases, pins
from torch_xla_ext import collectives, export
from torch_xla_ext._compat import stablehlo as compat
import tool_venv  # python/ (//python:tool_venv; tests/conftest.py under plain pytest)

# Tool venvs (python/tool_requirements/jax_*.txt): the pin, the newest jax for CPython 3.11, the
# newest jax (CPython 3.12).
RELEASES = jax_tool_releases()
PINS = pins()
# Small in parameters: each route compiles the whole model in every JAX-only venv.
ZOO = ("vit", "gpt2")

pytestmark = pytest.mark.skipif("TEST_SRCDIR" not in os.environ and os.environ.get("TXE_JAX_ONLY") != "1",
                                reason="makes JAX-only venvs from the registry: set TXE_JAX_ONLY=1 (or bazel test "
                                "//tests/packaging:jax_only_test)")


def _log(msg: str) -> None:
    print(f"[jax_only_test] {msg}", file=sys.stderr, flush=True)


class Collective(torch.nn.Module):
    """A lifted constant, a buffer, an all-reduce token and a scale (sum * 0.5), then a max."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 4)
        self.register_buffer("offset", torch.linspace(-1.0, 1.0, 4))
        self.k = torch.tensor(3.0)

    def forward(self, x, y):
        h = collectives.all_reduce("sum", self.lin(x) + self.offset, scale=0.5)
        return collectives.all_reduce("max", torch.tanh(h * self.k) + y)


def _collective_by_hand(model: Collective, per_replica: list[list[np.ndarray]]) -> np.ndarray:
    """The 2-replica program in float64 numpy: replica r's sum contributions, scale, then max."""
    w, b = (p.detach().double().numpy() for p in (model.lin.weight, model.lin.bias))
    off = model.offset.double().numpy()
    h = sum(x.astype(np.float64) @ w.T + b + off for x, _ in per_replica) * 0.5
    return np.max([np.tanh(h * 3.0) + y for _, y in per_replica], axis=0)


CHILD = r'''
import dataclasses, importlib.metadata, importlib.util, json, os, shutil, sys, time
t0 = time.perf_counter()
# No torch here at all (not blocked: not installed).
assert importlib.util.find_spec("torch") is None and importlib.util.find_spec("torch_xla") is None
import jax
import jax.export
import numpy as np
import torch_xla_ext
from torch_xla_ext import export
from torch_xla_ext._compat import jax_export

from torch_xla_ext import _ext, numerics

# The installed wheel, its own shared libraries (_ext.so, libprotobuf, libtxe_*) loaded without torch.
for mod in (torch_xla_ext, _ext):
    assert mod.__file__.startswith(sys.prefix), mod.__file__
spec = json.load(open(sys.argv[1]))
out = {}


def x64_call(exp, args):
    # int64 arguments need JAX's x64 mode, as for any JAX function taking int64.
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        return [np.asarray(o) for o in exp.call(*args)]
    finally:
        jax.config.update("jax_enable_x64", before)


relowered = {}  # bundles whose jax_export/ this JAX no longer reads (load_jax re-lowers them)
for name, case in spec["cases"].items():
    try:
        jax_export.deserialize(open(os.path.join(case["dir"], "jax_export", "exported.jax"), "rb").read())
        relowered[name] = False
    except ValueError as e:
        relowered[name] = jax_export.expired(e)
        assert relowered[name], e
    xs = np.load(case["inputs"])
    args = [xs[f"a{k}"] for k in range(len(xs.files))]
    b = export.load(case["dir"])
    res = {"run": export.run(case["dir"], *args),
           "strip_tokens": export.run(export.strip_tokens(b), *args),
           "inline_constants": export.run(export.inline_constants(b), *args),
           "inline_weights": export.run(export.inline_constants(export.strip_tokens(b), weights=True), *args)}
    jexp = export.to_jax(b)
    saved = os.path.join(spec["tmp"], name + "_jax")
    jexp.save(saved)  # jax.export.serialize of the program + the weights' safetensors, written here
    res["to_jax"] = x64_call(export.load_jax(saved), args)
    res["load_jax"] = x64_call(export.load_jax(case["dir"]), args)  # serialized by the pinned stack
    if "replicas" in case:
        # Written here (this JAX's StableHLO version), and read from the portable artifact alone.
        resaved = os.path.join(spec["tmp"], name + "_resaved")
        export.strip_tokens(b).save(resaved)
        res["resaved"] = export.run(resaved, *args)
        artifact_only = os.path.join(spec["tmp"], name + "_artifact")
        shutil.copytree(case["dir"], artifact_only)
        os.remove(os.path.join(artifact_only, "module.mlir"))
        res["artifact"] = export.run(artifact_only, *args)
        rs = [np.load(f) for f in case["replicas"]]
        per = [tuple(r[f"a{k}"] for k in range(len(r.files))) for r in rs]
        two = export.run(b, *per, num_replicas=len(per))
        for r, outs in enumerate(two):
            res[f"replica{r}"] = outs
    for key, outs in res.items():
        for k, o in enumerate(outs):
            out[f"{name}/{key}/{k}"] = np.asarray(o)

# Typed errors: a bundle of a newer format, an Exported beyond this JAX's window.
case = spec["cases"]["collective"]
errors = {}
newer = os.path.join(spec["tmp"], "newer")
shutil.copytree(case["dir"], newer)
m = json.load(open(os.path.join(newer, "manifest.json")))
m["format_version"] = 99
json.dump(m, open(os.path.join(newer, "manifest.json"), "w"))
try:
    export.load(newer)
except export.BundleVersionError as e:
    errors["format_version"] = str(e)
low = jax.export.minimum_supported_calling_convention_version
high = jax.export.maximum_supported_calling_convention_version
beyond = dataclasses.replace(export.to_jax(export.load(case["dir"])).exported, calling_convention_version=high + 1)
path = os.path.join(spec["tmp"], "beyond")
shutil.copytree(os.path.join(case["dir"], export.JAX_EXPORT_DIR), path)
open(os.path.join(path, "exported.jax"), "wb").write(beyond.serialize())
try:
    export.load_jax(path)
except export.BundleVersionError as e:
    errors["window"] = str(e)
# The torch side refuses with what is installed and what is needed.
try:
    export.export(None, ())
except ImportError as e:
    errors["torch_side"] = str(e)
np.savez(spec["out"], **out)
json.dump({"jax": jax.__version__, "jaxlib": importlib.metadata.version("jaxlib"),
           "window": [low, high], "errors": errors, "seconds": time.perf_counter() - t0, "relowered": relowered,
           "modules": sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "torch_xla"))},
          open(spec["out"] + ".json", "w"))
'''


@pytest.fixture(scope="module")
def pinned(tmp_path_factory):
    """Bundles exported by the pinned stack, their inputs, and the reference results."""
    root = tmp_path_factory.mktemp("pinned")
    cases, want = {}, {}
    t0 = time.perf_counter()

    def add(name, model, args, kwargs):
        bundle = export.export(model, args, kwargs)
        bundle.save(root / name, jax_export=True)
        leaves = pytree.tree_leaves((args, kwargs))
        np.savez(root / f"{name}.npz", **{f"a{k}": t.numpy() for k, t in enumerate(leaves)})
        cases[name] = {"dir": str(root / name), "inputs": str(root / f"{name}.npz")}
        want[name] = compat.run_with_torch_xla(bundle.torch_xla_export.graph_module, *leaves)
        return bundle

    for name in ZOO:
        add(name, *zoo.build(name))
    torch.manual_seed(0)
    model = Collective().eval()
    x, y = torch.randn(2, 8), torch.randn(2, 4)
    bundle = add("collective", model, (x, y), {})
    assert [c.scale for c in bundle.manifest.collectives] == [0.5, 1.0]
    assert "collective_token" in [i.kind for i in bundle.manifest.inputs]
    per_replica = [[x.numpy(), y.numpy()], [x.numpy() * 2, y.numpy() - 1]]
    for r, args in enumerate(per_replica):
        np.savez(root / f"replica{r}.npz", **{f"a{k}": a for k, a in enumerate(args)})
    cases["collective"]["replicas"] = [str(root / f"replica{r}.npz") for r in range(2)]
    want["collective/replicas"] = _collective_by_hand(model, per_replica)
    _log(f"pinned stack: exported {len(cases)} bundles and ran them with torch_xla in {time.perf_counter() - t0:.1f} s")
    return cases, want


def _pip(venv: pathlib.Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", *args],
                          capture_output=True, text=True, timeout=300)


def _install(venv: pathlib.Path) -> pathlib.Path:
    """The cached tool venv gets the wheel of its CPython, in place of whatever an earlier run
    installed, the way docs/export.md's JAX-only route installs it (`[jax]`), offline (no index:
    every requirement must already be met by the venv's pins); then `pip check` must be clean."""
    version = subprocess.run([str(venv / "bin" / "python"), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    wheel = built_wheel(version)
    _pip(venv, "uninstall", "-q", "-y", "torch-xla-ext")
    proc = _pip(venv, "install", "-q", "--no-index", f"{wheel}[jax]")
    assert proc.returncode == 0, proc.stderr[-3000:]
    check = _pip(venv, "check")
    assert check.returncode == 0, check.stdout + check.stderr
    return wheel


def _assert_close(got: np.ndarray, want: np.ndarray, what: str) -> float:
    """Against the float64 reference: float32 tolerance relative to the output's scale; integers
    exactly. Returns the max difference over the scale."""
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.dtype, got.shape, want.dtype, want.shape)
    if got.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return 0.0
    scale = float(np.max(np.abs(want))) or 1.0
    diff = float(np.max(np.abs(got.astype(np.complex128) - want.astype(np.complex128)))) / scale
    assert diff <= 1e-5, f"{what}: max difference {diff:.3g} of the output scale {scale:.3g}"
    return diff


@pytest.mark.parametrize("tool", list(RELEASES))
def test_jax_only_venv_agrees_with_the_pinned_stack(tool, pinned, tmp_path):
    cases, want = pinned
    t0 = time.perf_counter()
    venv = tool_venv.ensure(tool)
    wheel = _install(venv)
    setup = time.perf_counter() - t0
    spec = {"cases": cases, "out": str(tmp_path / "out.npz"), "tmp": str(tmp_path)}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "RUNFILES_DIR", "PYTHONSAFEPATH", "VIRTUAL_ENV", "PYTHONHOME",
                        "TORCH_XLA_EXT_SKIP_VERSION_CHECK", "XLA_FLAGS")}
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", CHILD, str(tmp_path / "spec.json")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-5000:]
    info = json.loads((tmp_path / "out.npz.json").read_text())
    assert info["jax"] == RELEASES[tool] and info["modules"] == []
    got = np.load(tmp_path / "out.npz")
    worst, absolute = {}, {}
    for name in cases:
        routes = ("run", "strip_tokens", "inline_constants", "inline_weights", "to_jax", "load_jax")
        for route in routes:
            outs = [got[f"{name}/{route}/{k}"] for k in range(len(want[name]))]
            assert f"{name}/{route}/{len(want[name])}" not in got.files, (name, route)
            # The same program on two XLA builds (this jaxlib's, torch_xla's): the export tests' bound.
            fig = bounds.assert_same_program(outs, want[name], f"{tool} {name} {route}", label=tool)
            worst[name] = max(worst.get(name, 0.0), fig["max_diff_to_scale"])
            absolute[name] = max([absolute.get(name, 0.0)] + [
                float(np.max(np.abs(o.astype(np.float64) - w.astype(np.float64)), initial=0.0))
                for o, w in zip(outs, want[name]) if o.dtype.kind == "f"])
    for route in ("resaved", "artifact"):
        bounds.assert_same_program([got[f"collective/{route}/0"]], want["collective"][:1], f"{tool} collective {route}")
    for r in range(2):
        o = got[f"collective/replica{r}/0"]
        w = want["collective/replicas"]
        assert o.dtype == np.float32
        worst["collective x2"] = max(worst.get("collective x2", 0.0),
                                     _assert_close(o.astype(np.float64), w, f"{tool} replica {r}"))
    errors = info["errors"]
    assert "format_version 99 is not supported" in errors.get("format_version", ""), errors
    assert "newer" in errors["format_version"] and "manifest.json" in errors["format_version"]
    low, high = info["window"]
    assert f"calling convention version {high + 1} is outside jax {RELEASES[tool]}'s window [{low}, {high}]" \
        in errors.get("window", ""), errors
    assert "beyond/exported.jax" in errors["window"]
    torch_side = errors.get("torch_side", "")
    assert torch_side.startswith("torch_xla_ext.export.export cannot run on this stack:"), errors
    assert "torch is not installed" in torch_side and "torch_xla is not installed" in torch_side, torch_side
    assert f"jax {RELEASES[tool]}" in torch_side and "pip install 'torch-xla-ext[xla]'" in torch_side, torch_side
    # jax.export's window: 0.11.1 and later refuse 0.7.1's serializations, and load_jax re-lowered.
    expired = packaging.version.Version(RELEASES[tool]) >= packaging.version.Version("0.11.1")
    assert info["relowered"] == {name: expired for name in cases}, info["relowered"]
    _log(f"{tool}: venv + {wheel.name} {setup:.1f} s, child {info['seconds']:.1f} s (jax {info['jax']}, jaxlib "
         f"{info['jaxlib']}; load_jax re-lowered: {sorted(k for k, v in info['relowered'].items() if v)}); "
         f"max difference / output scale: "
         + ", ".join(f"{k} {v:.2g}" for k, v in worst.items())
         + "; max absolute difference: " + ", ".join(f"{k} {v:.2g}" for k, v in absolute.items()))
