"""The pinned stack is checked where torch is used, never on import of the package or its JAX side.

Each case runs in a subprocess whose sys.path starts with a fake distribution (a dist-info
directory with another version), as on a machine with another torch, jax or torch_xla fork.
"""

import os
import pathlib
import subprocess
import sys
import textwrap

import torch_xla_ext

PKG_PARENT = str(pathlib.Path(torch_xla_ext.__file__).resolve().parent.parent)
TORCH_SIDE = ("collectives", "jax_call", "parity", "graph_breaks", "doctor")


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
    r = _run("import sys, torch_xla_ext; from torch_xla_ext import export\n"
             "print('torch' in sys.modules, 'jax' in sys.modules)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False"]


def test_package_and_jax_side_import_on_another_stack(tmp_path):
    # torch 2.13 and jax 0.10.2 (as a JAX user's venv would say): the package, the export package
    # and its JAX-side functions import; nothing refuses before a torch-side function is used.
    path = _fake_dist(tmp_path, "torch", "2.13.0")
    _fake_dist(tmp_path, "jax", "0.10.2")
    r = _run("""
        import torch_xla_ext
        from torch_xla_ext import export
        from torch_xla_ext.export import load, run, strip_tokens, inline_constants, to_jax, load_jax
        print("ok")
    """, extra_path=path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["ok"]


def test_torch_side_names_installed_and_needed(tmp_path):
    path = _fake_dist(tmp_path, "torch", "2.13.0")
    r = _run("""
        import importlib, sys
        from torch_xla_ext import export
        try:
            export.export(None, ())
        except ImportError as e:
            print("export.export:", e)
        for name in sys.argv[1:]:
            try:
                importlib.import_module("torch_xla_ext." + name)
                print(name, "imported")
            except ImportError as e:
                print(name + ":", str(e).splitlines()[0])
        assert "torch" not in sys.modules  # refused before importing it
    """.replace("sys.argv[1:]", repr(list(TORCH_SIDE))), extra_path=path)
    assert r.returncode == 0, r.stderr
    assert "torch: installed 2.13.0, needed 2.9.0" in r.stdout
    assert "torch_xla:" not in r.stdout  # only what does not fit is listed
    lines = r.stdout.splitlines()
    assert lines[0] == ("export.export: torch_xla_ext.export.export needs the pinned torch stack "
                        "(python/requirements.txt):")
    for name in TORCH_SIDE:
        assert f"{name}: torch_xla_ext.{name} needs the pinned torch stack" in r.stdout, r.stdout


def test_missing_torch_is_named(tmp_path):
    # A torch that is not installed at all, as in a JAX-only venv (a METADATA-less shadow cannot
    # hide the real one, so ask the check directly with the lookup it uses failing).
    r = _run("""
        import importlib.metadata as md
        real = md.version
        def version(name):
            if name in ("torch", "torch_xla"):
                raise md.PackageNotFoundError(name)
            return real(name)
        md.version = version
        from torch_xla_ext import _versions
        try:
            _versions.require_torch_stack("parity")
        except ImportError as e:
            print(e)
    """)
    assert r.returncode == 0, r.stderr
    assert "torch: not installed, needed 2.9.0" in r.stdout
    assert "torch_xla: not installed, needed 2.9.0" in r.stdout
    assert "jax:" not in r.stdout


def test_local_build_tags_are_the_same_release(tmp_path):
    r = _run("from torch_xla_ext import _versions; _versions.require_torch_stack('parity')",
             extra_path=_fake_dist(tmp_path, "jax", "0.7.1+local"))
    assert r.returncode == 0, r.stderr


def test_escape_hatch_for_forks(tmp_path):
    path = _fake_dist(tmp_path, "torch_xla", "2.10.0.dev0")
    code = "import torch_xla_ext.collectives"
    r = _run(code, extra_path=path)
    assert r.returncode != 0 and "torch_xla: installed 2.10.0.dev0, needed 2.9.0" in r.stderr
    r = _run(code, extra_path=path, env_extra={"TORCH_XLA_EXT_SKIP_VERSION_CHECK": "1"})
    assert r.returncode == 0, r.stderr
