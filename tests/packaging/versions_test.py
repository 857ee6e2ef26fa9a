"""`import torch_xla_ext` checks the pinned stack from metadata, without importing torch."""

import os
import pathlib
import subprocess
import sys
import textwrap

import torch_xla_ext

PKG_PARENT = str(pathlib.Path(torch_xla_ext.__file__).resolve().parent.parent)


def _run(code: str, extra_path: str | None = None, env_extra: dict | None = None):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (extra_path, PKG_PARENT) if p))
    env.pop("TORCH_XLA_EXT_SKIP_VERSION_CHECK", None)
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=300)


def _fake_dist(tmp_path, name: str, version: str) -> str:
    d = tmp_path / f"{name}-{version}.dist-info"
    d.mkdir()
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return str(tmp_path)


def test_pinned_stack_imports_without_torch():
    r = _run("import sys, torch_xla_ext; print('torch' in sys.modules, 'jax' in sys.modules)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False"]


def test_wrong_torch_names_installed_and_needed(tmp_path):
    # A torch 2.13.0 distribution found first on sys.path, as on a machine with another torch.
    r = _run("import torch_xla_ext", extra_path=_fake_dist(tmp_path, "torch", "2.13.0"))
    assert r.returncode != 0
    assert "ImportError" in r.stderr
    assert "torch: installed 2.13.0, needed 2.9.0" in r.stderr
    assert "torch_xla:" not in r.stderr  # only what does not fit is listed


def test_local_build_tags_are_the_same_release(tmp_path):
    r = _run("import torch_xla_ext", extra_path=_fake_dist(tmp_path, "jax", "0.7.1+local"))
    assert r.returncode == 0, r.stderr


def test_escape_hatch_for_forks(tmp_path):
    path = _fake_dist(tmp_path, "torch_xla", "2.10.0.dev0")
    assert _run("import torch_xla_ext", extra_path=path).returncode != 0
    r = _run("import torch_xla_ext", extra_path=path, env_extra={"TORCH_XLA_EXT_SKIP_VERSION_CHECK": "1"})
    assert r.returncode == 0, r.stderr
