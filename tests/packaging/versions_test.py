"""The pinned stack is checked where torch is used, never on import of the package or its JAX side.

Each case runs in a subprocess whose sys.path starts with a fake distribution (a dist-info
directory with another version), as on a machine with another torch, jax or torch_xla fork.
"""

import importlib.util
import os
import pathlib
import re
import shutil
import subprocess
import sys
import textwrap

import pytest
from packaging.requirements import Requirement

import torch_xla_ext
from tests.packaging.wheels import REPO, jax_tool_releases, pins
from torch_xla_ext import _versions

PKG_PARENT = str(pathlib.Path(torch_xla_ext.__file__).resolve().parent.parent)
TORCH_SIDE = ("collectives", "jax_call", "parity", "graph_breaks", "doctor")
PINS = pins()  # python/requirements.txt, read with packaging


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
    assert f"torch: installed 2.13.0, needed {PINS['torch']}" in r.stdout
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
    assert f"torch: not installed, needed {PINS['torch']}" in r.stdout
    assert f"torch_xla: not installed, needed {PINS['torch-xla']}" in r.stdout
    assert "jax:" not in r.stdout


def test_local_build_tags_are_the_same_release(tmp_path):
    r = _run("from torch_xla_ext import _versions; _versions.require_torch_stack('parity')",
             extra_path=_fake_dist(tmp_path, "jax", PINS["jax"] + "+local"))
    assert r.returncode == 0, r.stderr


def test_escape_hatch_for_forks(tmp_path):
    path = _fake_dist(tmp_path, "torch_xla", "2.10.0.dev0")
    code = "import torch_xla_ext.collectives"
    r = _run(code, extra_path=path)
    assert r.returncode != 0 and f"torch_xla: installed 2.10.0.dev0, needed {PINS['torch-xla']}" in r.stderr
    r = _run(code, extra_path=path, env_extra={"TORCH_XLA_EXT_SKIP_VERSION_CHECK": "1"})
    assert r.returncode == 0, r.stderr


# One source of pins: python/requirements.txt -> _versions (here) -> the wheel's Requires-Dist and
# its _pins.txt (python/build_wheel.py; the built wheel in wheel_test.py) and the JAX-only venv at
# the pin (python/tool_requirements); each test below fails when one of them disagrees.


def test_versions_requires_the_requirements_pins():
    assert _versions.required() == {n: PINS[_versions.canonical(n)] for n in _versions.STACK}
    assert _versions.pins_path().name == "requirements.txt"  # a checkout: no shipped _pins.txt


def _build_wheel():
    spec = importlib.util.spec_from_file_location("build_wheel", REPO / "python" / "build_wheel.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_wheel_requires_dist_is_the_requirements_pins(tmp_path):
    bw = _build_wheel()
    requires, pins_file = bw.requires(str(REPO / "python" / "requirements.txt"), _versions)
    exact = [r for r in requires if any(s.operator == "==" for s in Requirement(r).specifier)]
    assert exact == [f"{_versions.canonical(n)}=={PINS[_versions.canonical(n)]}" for n in _versions.STACK], requires
    assert _versions.parse_pins(pins_file, "_pins.txt") == {_versions.canonical(n): v for n, v in _versions.required().items()}
    assert bw.metadata("0.1.0", requires).decode().count("Requires-Dist: ") == len(requires)
    # A pin moved in requirements.txt moves the wheel's requirement with it; one outside a range stops the build.
    moved = tmp_path / "requirements.txt"
    moved.write_text((REPO / "python" / "requirements.txt").read_text().replace(f"torch=={PINS['torch']}", "torch==9.9.9"))
    assert "torch==9.9.9" in bw.requires(str(moved), _versions)[0]
    moved.write_text((REPO / "python" / "requirements.txt").read_text().replace(f"numpy=={PINS['numpy']}", "numpy==1.20.0"))
    with pytest.raises(SystemExit, match="numpy==1.20.0, outside the wheel's >=1.26,<3"):
        bw.requires(str(moved), _versions)


def test_jax_only_venv_at_the_pin_shares_the_project_pins():
    releases = jax_tool_releases()
    at_pin = [tool for tool, jax in releases.items() if jax == PINS["jax"]]
    assert at_pin, f"no python/tool_requirements/jax_*.txt pins jax=={PINS['jax']}: {releases}"
    for tool in at_pin:
        tool_pins = pins(REPO / "python" / "tool_requirements" / f"{tool}.txt")
        differ = {n: (v, PINS.get(n)) for n, v in tool_pins.items() if v != PINS.get(n)}
        assert not differ, f"{tool}.txt vs requirements.txt: {differ}"


def test_readme_names_the_pinned_stack():
    text = " ".join((REPO / "README.md").read_text().split())
    m = re.search(r"pinned stack \(torch (\S+), torch_xla (\S+), jax/jaxlib (\S+)\)", text)
    assert m, "README.md no longer names the pinned stack"
    assert m.groups() == (PINS["torch"], PINS["torch-xla"], PINS["jax"]) and PINS["jaxlib"] == PINS["jax"]


def test_an_installed_wheel_reads_its_shipped_pins(tmp_path):
    # The package as the wheel lays it out: _versions.py next to _pins.txt, no checkout around it.
    pkg = tmp_path / "site" / "torch_xla_ext"
    pkg.mkdir(parents=True)
    shutil.copy(pathlib.Path(_versions.__file__), pkg / "_versions.py")
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import _versions\n"
            "try:\n    _versions.required()\nexcept FileNotFoundError as e:\n    print('missing:', e)\n")
    r = subprocess.run([sys.executable, "-c", code, str(pkg)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "missing:" in r.stdout and "_pins.txt" in r.stdout, r.stdout + r.stderr
    (pkg / "_pins.txt").write_text("torch==1.0\ntorch_xla==2.0\njax==3.0\njaxlib==4.0\n")
    code = "import sys; sys.path.insert(0, sys.argv[1]); import _versions; print(_versions.required())"
    r = subprocess.run([sys.executable, "-c", code, str(pkg)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == repr({"torch": "1.0", "torch_xla": "2.0", "jax": "3.0", "jaxlib": "4.0"})


def test_a_pin_that_is_not_exact_is_named():
    with pytest.raises(ValueError, match=r"r.txt:2: not an exact pin \(name==version\): 'torch>=2.9'"):
        _versions.parse_pins("jax==0.7.1\ntorch>=2.9  # why\n", "r.txt")
    with pytest.raises(ValueError, match="r.txt pins no torch_xla, jaxlib"):
        _versions.stack_pins(_versions.parse_pins("torch==2.9.0\njax==0.7.1\n", "r.txt"), "r.txt")


def test_extracted_xla_protos_are_the_pinned_jaxlibs():
    # A jaxlib upgrade must re-extract XLA's schema (python/extract_xla_protos.py) from the new jaxlib.
    protos = sorted((REPO / "third_party" / "xla").rglob("*.proto"))
    assert protos
    for proto in protos:
        m = re.search(r"Extracted from jaxlib (\S+) ", proto.read_text())
        assert m and m.group(1) == PINS["jaxlib"], (proto.relative_to(REPO), m and m.group(1), PINS["jaxlib"])


def test_readme_names_the_tested_jax_range():
    releases = list(jax_tool_releases().values())
    text = " ".join((REPO / "README.md").read_text().split())
    assert f"`jax[cpu]` ({releases[0]} to {releases[-1]})" in text, releases
    assert releases[0] == PINS["jax"]  # the oldest JAX-only venv is the pin
