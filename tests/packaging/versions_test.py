"""The gate (torch_xla_ext._versions): capabilities decide where a feature is used, never on
import of the package.

Each case runs in a subprocess on this venv's real stack, changed the way another machine
differs: a dist-info directory with another version first on sys.path (a patch release, a local
build), an upstream API deleted before the gate looks (a fork's torch_xla without it), a
torch_xla whose import fails as one linked against another torch does, metadata lookups that
find no torch_xla or jax. The probes themselves always run against the real modules.
"""

import importlib.util
import json
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
from tests.packaging.wheels import REPO, jax_tool_releases, pins, wheel_pythons
from torch_xla_ext import _versions

PKG_PARENT = str(pathlib.Path(torch_xla_ext.__file__).resolve().parent.parent)
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


def test_a_patch_release_in_the_metadata_is_accepted(tmp_path):
    # Metadata saying another jax release (the real one underneath has every API): accepted, and
    # said so. (tests/packaging/stack_variants_test.py installs a real torch patch release.)
    patch = PINS["jax"].rsplit(".", 1)[0] + ".99"
    path = _fake_dist(tmp_path, "jax", patch)
    r = _run("""
        from torch_xla_ext import _versions
        _versions.require("export.jax")
        print(_versions.status("export.jax")[0])
        print(_versions.status("export.jax")[1])
        print(_versions.status("numerics")[0])
    """, extra_path=path)
    assert r.returncode == 0, r.stderr
    verdict, detail, numerics = r.stdout.splitlines()
    assert verdict == "accepted" and f"jax {patch} (tested {PINS['jax']})" in detail, r.stdout
    assert numerics == "tested"


@pytest.mark.parametrize("local, verdict", [("+cpu", "tested"), ("+cu128", "tested"), ("+gitlocal1", "accepted")])
def test_a_release_build_tag_is_tested_a_local_build_accepted(tmp_path, local, verdict):
    # torch's own builds (+cpu, +cu128) are the release; any other local tag (a fork's +gited8a445)
    # is a build from other sources: accepted when every probe passes, not "tested".
    r = _run("from torch_xla_ext import _versions; print(_versions.status('export.jax')[0])",
             extra_path=_fake_dist(tmp_path, "jax", PINS["jax"] + local))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [verdict]


# A fork's torch_xla without one private API: what uses it is refused naming the API, the module
# of ours that calls it and the feature; what does not use it runs.
MISSING_API = """
    import sys, torch_xla
    del torch_xla._XLAC._get_ir_debug        # as a fork's _XLAC without it
    from torch_xla_ext import _versions
    import torch_xla_ext.parity              # comparing a capture needs no torch_xla
    try:
        _versions.require("parity.xla")      # what parity's XLA run asks first
    except ImportError as e:
        print(type(e).__name__, "|", str(e).replace("\\n", " / "))
    _versions.require("collectives")
    _versions.require("jax_call")
    print("others pass")
"""


def test_a_missing_private_api_refuses_only_what_uses_it():
    r = _run(MISSING_API)
    assert r.returncode == 0, r.stderr
    refusal, others = r.stdout.strip().splitlines()
    kind, message = refusal.split(" | ", 1)
    assert kind == "UnsupportedStackError"
    assert message.startswith("torch_xla_ext.parity's XLA run and replays cannot run on this stack:"), message
    assert ("torch_xla._XLAC._get_ir_debug (used by _compat/hlo_debug.py): torch_xla._XLAC has no attribute "
            "_get_ir_debug") in message
    assert "Installed: CPython" in message and f"torch_xla {_installed('torch_xla')}" in message
    assert f"Tested: torch {PINS['torch']}, torch_xla {PINS['torch-xla']}, jax/jaxlib {PINS['jax']}" in message
    assert "TORCH_XLA_EXT_SKIP_VERSION_CHECK=1" in message
    assert others == "others pass"


def test_the_escape_hatch_skips_the_probes():
    code = """
        import jax.extend.mlir as m
        del m.serialize_portable_artifact
        from torch_xla_ext import _versions
        _versions.require("export.jax")
        print("passed")
    """
    r = _run(code, env_extra={"TORCH_XLA_EXT_SKIP_VERSION_CHECK": "1"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["passed"]
    r = _run(code)  # the same without it: refused
    assert r.returncode != 0 and "UnsupportedStackError" in r.stderr, r.stdout + r.stderr


def test_a_missing_torch_xla_is_refused_before_torch_is_imported():
    # torch_xla not installed (its metadata lookup fails, as in a current-torch venv): every
    # torch_xla feature names it and what to install; the torch-only features still pass.
    r = _run("""
        import importlib.metadata as md, sys
        real = md.version
        def version(name):
            if name in ("torch_xla", "jax", "jaxlib"):
                raise md.PackageNotFoundError(name)
            return real(name)
        md.version = version
        from torch_xla_ext import _versions
        for feature in ("parity.xla", "collectives", "export.export", "graph_breaks.openxla", "export.jax"):
            print(feature, "|", (_versions.refusal(feature) or "passes").replace("\\n", " / "))
        print("torch imported:", "torch" in sys.modules)
        print("numerics |", _versions.refusal("numerics") or "passes")
    """)
    assert r.returncode == 0, r.stderr
    lines = dict(line.split(" | ", 1) for line in r.stdout.splitlines() if " | " in line)
    assert "torch imported: False" in r.stdout
    for feature in ("parity.xla", "collectives", "export.export", "graph_breaks.openxla"):
        assert "torch_xla is not installed" in lines[feature], lines[feature]
        assert "pip install 'torch-xla-ext[xla]'" in lines[feature]
    assert "torch_xla is not installed" not in lines["export.jax"]
    assert "jax is not installed" in lines["export.jax"] and "pip install 'torch-xla-ext[jax]'" in lines["export.jax"]
    assert "Installed: CPython" in lines["parity.xla"] and "torch_xla -" in lines["parity.xla"]
    assert lines["numerics"] == "passes"


def test_the_base_install_names_the_xla_install_line_once():
    # The wheel's base route: no torch, no torch_xla, no jax. The doctor's refusal names both
    # missing distributions and says once what brings them ([xla] installs torch with torch_xla).
    r = _run("""
        import importlib.metadata as md
        real = md.version
        def version(name):
            if name in ("torch", "torch_xla", "jax", "jaxlib"):
                raise md.PackageNotFoundError(name)
            return real(name)
        md.version = version
        from torch_xla_ext import _versions
        print(_versions.refusal("doctor.torch_xla").replace("\\n", " / "))
        print("graph_breaks |", _versions.refusal("graph_breaks").replace("\\n", " / "))
    """)
    assert r.returncode == 0, r.stderr
    doctor, dynamo = r.stdout.splitlines()
    assert "torch_xla is not installed" in doctor and "torch is not installed" in doctor, doctor
    assert doctor.count("pip install 'torch-xla-ext[xla]'") == 1, doctor
    # Without torch_xla in question, torch's own line stays: Dynamo's half needs torch alone.
    assert "torch is not installed" in dynamo and "`pip install torch`" in dynamo, dynamo


def test_a_torch_xla_that_does_not_load_is_named(tmp_path):
    # A torch_xla whose extension links another torch fails at import ("undefined symbol"): the
    # gate says so with the import's own error, not an AttributeError later.
    pkg = tmp_path / "torch_xla"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise ImportError('_XLAC.so: undefined symbol: _ZN3c1017StorageImplE')\n")
    (pkg / "version.py").write_text("__version__ = '2.9.0'\n__torch_gitrev__ = 'cbe1a35dbdfdc9b7490212bdd812f3e2f4ce9e2d'\n")
    _fake_dist(tmp_path, "torch_xla", "2.9.0+gitabc1234")
    r = _run("""
        from torch_xla_ext import _versions
        try:
            _versions.require("collectives")
        except ImportError as e:
            print(e)
        print(_versions.status("graph_breaks")[0])
    """, extra_path=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert ("torch_xla 2.9.0+gitabc1234 does not load: importing torch_xla failed: ImportError: _XLAC.so: "
            "undefined symbol: _ZN3c1017StorageImplE") in r.stdout, r.stdout
    assert "install the torch_xla that matches the rest of the stack" in r.stdout
    # What torch it needs, from torch_xla's own build record (read, not imported).
    assert ("torch_xla 2.9.0+gitabc1234 was built against torch commit cbe1a35dbdfdc9b7490212bdd812f3e2f4ce9e2d "
            "(torch_xla/version.py's __torch_gitrev__)") in r.stdout, r.stdout
    assert r.stdout.splitlines()[-1] == "tested"  # Dynamo's half needs no torch_xla


def test_the_jax_side_names_a_missing_jax_api_instead_of_failing_inside(tmp_path):
    # A JAX whose MLIR bindings lack the portable-artifact writer (jax 0.6.2 is one): export.load
    # raises the gate's ImportError naming the API, not jax's AttributeError from deep inside.
    r = _run("""
        import jax.extend.mlir as m
        del m.serialize_portable_artifact
        from torch_xla_ext import export
        try:
            export.load(".")
        except ImportError as e:
            print(type(e).__name__, "|", str(e).replace("\\n", " / "))
    """)
    assert r.returncode == 0, r.stderr
    kind, message = r.stdout.strip().split(" | ", 1)
    assert kind == "UnsupportedStackError"
    assert message.startswith("the export bundle's JAX side (export.load, run, strip_tokens, inline_constants, "
                              "to_jax, load_jax) cannot run on this stack:")
    assert "jax.extend.mlir.serialize_portable_artifact (used by _compat/jax_mlir.py)" in message


# Another CPython than the extension's: the wheel's _ext.so (pybind11 refuses it at import) and a
# checkout's _ext.cpython-311-*.so (another CPython does not even find it). Any CPython of the
# wheels but this one will do; its standard library is all the gate needs.
OTHER_PYTHON = next((p for p in wheel_pythons() if p != "%d.%d" % sys.version_info[:2]), None)


@pytest.fixture(scope="module")
def other_python() -> str:
    import tool_venv  # python/ (//python:tool_venv; tests/conftest.py under plain pytest)

    try:
        return tool_venv.find_python(OTHER_PYTHON)
    except tool_venv.ToolVenvError as e:
        pytest.skip(f"no other CPython to import the package with: {e}")


def _other(python: str, path: str, code: str):
    env = dict(_no_pythonpath(), PYTHONPATH=path)
    env.pop("TORCH_XLA_EXT_SKIP_VERSION_CHECK", None)
    return subprocess.run([python, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=300, cwd="/")


EXTENSION_REFUSED = """
    from torch_xla_ext import _versions
    for feature in ("numerics", "export.jax", "collectives"):
        print(feature, "|", (_versions.refusal(feature) or "passes").replace("\\n", " / "))
    try:
        from torch_xla_ext import export
    except ImportError as e:
        print("export |", type(e).__name__, str(e).replace("\\n", " / "))
"""


def test_another_cpythons_checkout_is_refused_naming_the_extension(other_python, tmp_path):
    # A checkout after `make develop` in this CPython: the package's sources with the extension
    # this interpreter loaded, under the name this CPython's suffix gives it.
    import importlib.machinery
    import shutil

    from torch_xla_ext import _ext

    sources = pathlib.Path(torch_xla_ext.__file__).resolve().parent
    checkout = tmp_path / "checkout"
    shutil.copytree(sources, checkout / "torch_xla_ext", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    loaded = checkout / "torch_xla_ext" / ("_ext" + importlib.machinery.EXTENSION_SUFFIXES[0])
    loaded.symlink_to(pathlib.Path(_ext.__file__).resolve())
    r = _other(other_python, str(checkout), EXTENSION_REFUSED)
    assert r.returncode == 0, r.stderr
    lines = dict(line.split(" | ", 1) for line in r.stdout.splitlines())
    tag = "cp" + OTHER_PYTHON.replace(".", "")
    for feature, message in lines.items():
        assert f"has no extension module for CPython {OTHER_PYTHON}." in message, (feature, message)
        assert f"found: {loaded.name}" in message, message  # the one this CPython loads
        assert f"Installed: CPython {OTHER_PYTHON}." in message, message
        assert f"install the torch_xla_ext wheel built for this CPython ({tag}" in message, message
    assert lines["export"].startswith("UnsupportedStackError torch_xla_ext cannot run on this stack:"), lines["export"]


def test_another_cpythons_wheel_is_refused_naming_the_extension(other_python, tmp_path):
    import zipfile

    from tests.packaging.wheels import built_wheel

    zipfile.ZipFile(built_wheel()).extractall(tmp_path)  # this CPython's wheel, as another CPython sees it
    r = _other(other_python, str(tmp_path), EXTENSION_REFUSED)
    assert r.returncode == 0, r.stderr
    lines = dict(line.split(" | ", 1) for line in r.stdout.splitlines())
    for feature, message in lines.items():
        # The loader's (or pybind11's) words, the wheel's tag from its own record, what to install instead.
        this = "%d%d" % sys.version_info[:2]
        assert (f"extension module does not load in CPython {OTHER_PYTHON}.") in message, (feature, message)
        assert (f"(the installed wheel is cp{this}-cp{this}-linux_x86_64: built for CPython "
                f"{sys.version_info[0]}.{sys.version_info[1]})") in message, message
        assert "Tested: torch " in message and "README.md, \"Install\"" in message, message


def test_an_unknown_feature_is_a_programming_error():
    with pytest.raises(ValueError, match="unknown feature 'partiy': known are numerics, export.jax"):
        _versions.require("partiy")


def test_on_the_pinned_stack_every_feature_is_tested():
    # This venv is the pinned stack: `torch-xla-ext stack` finds every probe and every feature tested.
    r = _run("import sys; from torch_xla_ext.cli import main; sys.exit(main(['stack', '--json']))")
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    assert {f: v["verdict"] for f, v in report["features"].items()} == {f: "tested" for f in _versions.FEATURES}
    assert report["stack"].startswith("CPython ") and f"torch_xla {PINS['torch-xla']}" in report["stack"]


def _installed(name: str) -> str:
    import importlib.metadata

    return importlib.metadata.version(name)


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
    reqs = [Requirement(r) for r in requires]
    # The tested stack is the "xla" extra, requirements.txt's exact pins; the base pins no torch.
    exact = {_versions.canonical(r.name): str(r.specifier) for r in reqs
             if any(s.operator == "==" for s in r.specifier)}
    assert exact == {_versions.canonical(n): f"=={PINS[_versions.canonical(n)]}" for n in _versions.STACK}, requires
    pinned = [r for r in reqs if any(s.operator == "==" for s in r.specifier)]
    assert all(r.marker is not None and r.marker.evaluate({"extra": "xla", "python_version": "3.11"})
               and not r.marker.evaluate({"extra": "", "python_version": "3.11"}) for r in pinned), requires
    assert _versions.parse_pins(pins_file, "_pins.txt") == {_versions.canonical(n): v for n, v in _versions.required().items()}
    assert bw.metadata("0.1.0", requires).decode().count("Requires-Dist: ") == len(requires)
    # A pin moved in requirements.txt moves the wheel's requirement with it; one outside a range stops the build.
    moved = tmp_path / "requirements.txt"
    moved.write_text((REPO / "python" / "requirements.txt").read_text().replace(f"torch=={PINS['torch']}", "torch==9.9.9"))
    assert 'torch==9.9.9; extra == "xla"' in bw.requires(str(moved), _versions)[0]
    assert 'torch>=9.9.9; extra == "torch"' in bw.requires(str(moved), _versions)[0]
    moved.write_text((REPO / "python" / "requirements.txt").read_text().replace(f"numpy=={PINS['numpy']}", "numpy==1.20.0"))
    with pytest.raises(SystemExit, match="numpy==1.20.0, outside the wheel's >=1.26,<3"):
        bw.requires(str(moved), _versions)


def _resolves(requires: list[str], extras: set[str], python: str) -> set[str]:
    """The distributions a requirement list asks for with ``extras`` on CPython ``python``."""
    out = set()
    for r in map(Requirement, requires):
        envs = [{"extra": e, "python_version": python} for e in (extras or {""})]
        if r.marker is None or any(r.marker.evaluate(env) for env in envs):
            out.add(_versions.canonical(r.name))
    return out


def test_each_route_asks_for_its_stack_and_nothing_else():
    bw = _build_wheel()
    requires, _ = bw.requires(str(REPO / "python" / "requirements.txt"), _versions)
    base = {"numpy", "ml-dtypes", "scipy", "safetensors", "jinja2", "pydantic", "pydantic-core", "typing-extensions"}
    assert _resolves(requires, set(), "3.12") == base  # no torch, no jax: a training image keeps its own
    assert _resolves(requires, {"xla"}, "3.12") == base | {"torch", "torch-xla", "jax", "jaxlib"}
    assert _resolves(requires, {"xla"}, "3.10") == base | {"torch", "torch-xla"}  # no jax 0.7.1 for 3.10
    assert _resolves(requires, {"jax"}, "3.12") == base | {"jax", "flatbuffers"}  # jax[cpu] brings jaxlib
    assert _resolves(requires, {"torch"}, "3.11") == base | {"torch"}
    assert _resolves(requires, {"torchax"}, "3.12") == base | {"torchax", "optax", "torch", "jax", "flatbuffers",
                                                                 "threadpoolctl"}


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
    # The modules _versions needs, laid out as the wheel installs them: no checkout around them.
    pkg = tmp_path / "site" / "torch_xla_ext"
    pkg.mkdir(parents=True)
    src = pathlib.Path(_versions.__file__).parent
    for name in ("__init__.py", "version.py", "errors.py", "_versions.py"):
        shutil.copy(src / name, pkg / name)
    shutil.copytree(src / "_compat", pkg / "_compat", ignore=shutil.ignore_patterns("__pycache__"))
    run = ("import sys; sys.path.insert(0, sys.argv[1]); from torch_xla_ext import _versions\n"
           "assert _versions.__file__.startswith(sys.argv[1]), _versions.__file__\n")
    code = run + "try:\n    _versions.required()\nexcept FileNotFoundError as e:\n    print('missing:', e)\n"
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "site")], capture_output=True, text=True,
                       timeout=300, env=_no_pythonpath())
    assert r.returncode == 0 and "missing:" in r.stdout and "_pins.txt" in r.stdout, r.stdout + r.stderr
    (pkg / "_pins.txt").write_text("torch==1.0\ntorch_xla==2.0\njax==3.0\njaxlib==4.0\n")
    r = subprocess.run([sys.executable, "-c", run + "print(_versions.required())", str(tmp_path / "site")],
                       capture_output=True, text=True, timeout=300, env=_no_pythonpath())
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == repr({"torch": "1.0", "torch_xla": "2.0", "jax": "3.0", "jaxlib": "4.0"})


def _no_pythonpath() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RUNFILES_DIR", "PYTHONSAFEPATH")}


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


def test_readme_names_the_cpythons_the_wheels_are_built_for():
    pythons = wheel_pythons()  # bazel/python_configure.bzl's WHEEL_PYTHONS
    assert pythons[0] == "3.10" and len(pythons) >= 4, pythons
    text = " ".join((REPO / "README.md").read_text().split())
    listed = ", ".join(pythons[:-1]) + " and " + pythons[-1]
    assert f"wheels for CPython {listed}" in text, listed
    for p in pythons:
        assert f"cp{p.replace('.', '')}" in text, p
