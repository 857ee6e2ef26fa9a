"""The wheel Bazel builds (the one `pip wheel .` hands out): its metadata declares everything the
package imports, and it installs into a new venv that sees the pinned stack and works from outside
the source tree (import, extension, console script). fresh_venv_test.py installs it the way a
training image does, with pip resolving the stack itself."""

import ast
import email.parser
import importlib.metadata
import json
import os
import pathlib
import re
import site
import subprocess
import sys
import zipfile

import numpy as np
import packaging.utils
import pytest
from packaging.requirements import Requirement

from tests.packaging.wheels import built_wheel
from tests.packaging.wheels import pins as _pins


@pytest.fixture(scope="module")
def wheel() -> pathlib.Path:
    return built_wheel()


def _metadata(wheel: pathlib.Path) -> email.message.Message:
    meta = zipfile.ZipFile(wheel).read(f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info/METADATA")
    return email.parser.BytesParser().parsebytes(meta)


def _requires(wheel: pathlib.Path) -> list[str]:
    return _metadata(wheel).get_all("Requires-Dist")


def _norm(name: str) -> str:
    return packaging.utils.canonicalize_name(name)


STACK = ("torch", "torch-xla", "jax", "jaxlib")


def undeclared_imports(sources: dict[str, str], declared: set[str]) -> dict[str, str]:
    """{top-level module: file} of imports that are neither the standard library, the package
    itself, nor provided by a declared distribution (function-level imports included)."""
    providers = importlib.metadata.packages_distributions()
    out = {}
    for path, text in sources.items():
        for node in ast.walk(ast.parse(text, path)):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top == "torch_xla_ext":
                    continue
                dists = {_norm(d) for d in providers.get(top, [top])}
                if not dists & declared:
                    out.setdefault(top, path)
    return out


def test_every_import_is_declared(wheel):
    z = zipfile.ZipFile(wheel)
    sources = {n: z.read(n).decode() for n in z.namelist() if n.endswith(".py")}
    declared = {_norm(re.split(r"[<>=!~;\[ ]", r, 1)[0]) for r in _requires(wheel)}
    missing = undeclared_imports(sources, declared)
    assert not missing, f"imported but not declared in the wheel's Requires-Dist: {missing}"
    # The check itself catches an undeclared import (PyYAML is in the venv, but not declared).
    assert undeclared_imports({"x.py": "def f():\n    import yaml\n"}, declared) == {"yaml": "x.py"}


def test_stack_is_the_xla_extra_and_the_rest_are_ranges(wheel):
    reqs = [Requirement(r) for r in _requires(wheel)]
    pins = _pins()
    exact = {_norm(r.name): str(r.specifier) for r in reqs if any(s.operator == "==" for s in r.specifier)}
    assert exact == {n: f"=={pins[n]}" for n in STACK}, exact  # requirements.txt's pins, nothing else
    for r in reqs:
        if _norm(r.name) in exact and "==" in str(r.specifier):
            assert 'extra == "xla"' in str(r.marker), r  # the base asks for no torch stack
    numpy_req = next(r for r in reqs if r.name == "numpy")
    assert all(s.operator != "==" for s in numpy_req.specifier) and numpy_req.specifier.contains("1.26.0")
    assert any(r.name == "matplotlib" and str(r.marker) == 'extra == "plot"' for r in reqs), reqs
    # The development pins must satisfy the wheel's ranges.
    for req in reqs:
        assert req.specifier.contains(pins[_norm(req.name)]), (str(req), pins[_norm(req.name)])
    assert not numpy_req.specifier.contains("1.25.0") and not numpy_req.specifier.contains("3.0")  # the check can fail


def test_wheel_ships_the_pins_it_requires(wheel):
    # torch_xla_ext/_pins.txt (what an installed _versions checks against) says what Requires-Dist says.
    text = zipfile.ZipFile(wheel).read("torch_xla_ext/_pins.txt").decode()
    shipped = {_norm(r.name): str(r.specifier) for r in map(Requirement, filter(None, (
        line.split("#", 1)[0].strip() for line in text.splitlines())))}
    required = {_norm(r.name): str(r.specifier) for r in map(Requirement, _requires(wheel))
                if _norm(r.name) in STACK and "==" in str(r.specifier)}
    assert shipped == required, (shipped, required)


@pytest.mark.parametrize("extras", ["", "[xla]", "[xla,jax,torch]"])
def test_installing_into_the_pinned_image_changes_none_of_it(wheel, extras):
    """pip's resolver, asked what `pip install` of the wheel (with the stack's extras) would do in
    this venv (the pinned torch, torch_xla and jax: the image a training job has): install the
    wheel, nothing else. --no-index keeps it offline: a requirement the installed stack does not
    meet cannot be met from anywhere, so pip fails and the test names pip's reason."""
    stack = {n: importlib.metadata.version(n).split("+")[0] for n in STACK}
    assert stack == {n: _pins()[n] for n in STACK}, stack
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "--no-input",
                           "--disable-pip-version-check", "--quiet", "--report", "-", f"{wheel}{extras}"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"pip would change the pinned stack or cannot resolve it:\n{proc.stderr[-3000:]}"
    report = json.loads(proc.stdout)
    planned = {_norm(i["metadata"]["name"]): i["metadata"]["version"] for i in report["install"]}
    assert planned == {"torch-xla-ext": wheel.name.split("-")[1]}, planned


@pytest.fixture(scope="module")
def venv(tmp_path_factory, wheel) -> pathlib.Path:
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, timeout=300)
    # The new venv sees the pinned stack through a .pth (no second 7 GB install); a venv's
    # --system-site-packages would see the base interpreter's packages instead.
    (next((root / "lib").glob("python3.*")) / "site-packages" / "pinned_stack.pth").write_text(
        "\n".join(site.getsitepackages()) + "\n"
    )
    subprocess.run(
        [str(root / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index", "--no-deps", str(wheel)],
        check=True, timeout=600,
    )
    return root


def _env():
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RUNFILES_DIR", "PYTHONSAFEPATH")}
    env["PJRT_DEVICE"] = "CPU"
    return env


# What a manylinux-style wheel may expect of the system; everything else must ship in the wheel.
_SYSTEM_LIBS = {"libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1", "ld-linux-x86-64.so.2",
                "libpthread.so.0", "libdl.so.2", "librt.so.1", "libz.so.1"}


def _needed(data: bytes) -> list[str]:
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".so") as f:
        f.write(data)
        f.flush()
        out = subprocess.run(["readelf", "-d", f.name], capture_output=True, text=True, check=True, timeout=60).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def test_shared_libraries_ship_in_the_wheel(wheel):
    z = zipfile.ZipFile(wheel)
    libs = {n.rsplit("/", 1)[-1]: n for n in z.namelist() if re.search(r"\.so(\.\d+)*$", n)}
    assert {"_ext.so", "libtxe_hooks.so", "libtxe_xla_proto.so"} <= set(libs), sorted(libs)
    assert any(n.startswith("libprotobuf.so.") for n in libs), sorted(libs)
    for name, arcname in libs.items():
        missing = [lib for lib in _needed(z.read(arcname)) if lib not in libs and lib not in _SYSTEM_LIBS]
        assert not missing, f"{arcname} needs {missing}, which the wheel does not ship"


def test_wheel_contents(wheel):
    assert wheel.name.startswith("torch_xla_ext-0.1.0-cp3")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"torch_xla_ext/__init__.py", "torch_xla_ext/numerics.py", "torch_xla_ext/_ext.so",
            "torch_xla_ext/_ext/__init__.pyi", "torch_xla_ext/_ext/numerics.pyi", "torch_xla_ext/py.typed",
            "torch_xla_ext/_pins.txt"} <= names
    assert not any(n.startswith("torch_xla_ext/_ext/") and not n.endswith(".pyi") for n in names)  # stubs only
    meta = zipfile.ZipFile(wheel).read("torch_xla_ext-0.1.0.dist-info/METADATA").decode()
    pins = _pins()
    assert f'Requires-Dist: torch=={pins["torch"]}; extra == "xla"' in meta
    assert f'Requires-Dist: torch-xla=={pins["torch-xla"]}; extra == "xla"' in meta
    assert f'Requires-Dist: jax=={pins["jax"]}; extra == "xla" and python_version >= "3.11"' in meta
    # The RECORD lists every file with its hash (wheel's WheelFile checks them as it reads).
    from wheel.wheelfile import WheelFile

    with WheelFile(wheel) as whl:
        record = whl.read(whl.record_path).decode().splitlines()
        assert {line.split(",")[0] for line in record} == names
        for name in names - {whl.record_path}:
            whl.read(name)  # raises WheelError on a hash that does not match
    ep = zipfile.ZipFile(wheel).read("torch_xla_ext-0.1.0.dist-info/entry_points.txt").decode()
    assert "torch-xla-ext = torch_xla_ext.cli:main" in ep


def test_installed_package_checks_the_shipped_pins(venv, tmp_path):
    code = "from torch_xla_ext import _versions; print(_versions.pins_path()); print(_versions.required())"
    out = subprocess.run([str(venv / "bin" / "python"), "-c", code], cwd=tmp_path, env=_env(),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    path, required = out.stdout.splitlines()
    assert pathlib.Path(path).resolve().is_relative_to(venv.resolve()) and path.endswith("_pins.txt"), path
    assert required == repr({n: _pins()[_norm(n)] for n in ("torch", "torch_xla", "jax", "jaxlib")})


def test_imports_from_the_venv_not_the_tree(venv, tmp_path):
    code = "import torch_xla_ext, torch_xla_ext.numerics as n; print(torch_xla_ext.__file__); print(n._core.__file__)"
    out = subprocess.run([str(venv / "bin" / "python"), "-c", code], cwd=tmp_path, env=_env(),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    pkg, ext = out.stdout.split()
    assert pathlib.Path(pkg).resolve().is_relative_to(venv.resolve())
    assert pathlib.Path(ext).resolve().is_relative_to(venv.resolve())


def test_console_script_compares_files(venv, tmp_path):
    np.save(tmp_path / "a.npy", np.float32([1, 2, 3]))
    np.save(tmp_path / "b.npy", np.float32([1, 2, 3.5]))
    out = subprocess.run([str(venv / "bin" / "torch-xla-ext"), "numerics", "--actual", "a.npy", "--expected", "b.npy"],
                         cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, out.stderr  # a mismatch is a failed check
    assert "Mismatched elements: 1 / 3 (33.3%)" in out.stdout


def test_console_script_runs_embedded_example(venv, tmp_path):
    out = subprocess.run([str(venv / "bin" / "torch-xla-ext"), "numerics"], cwd=tmp_path, env=_env(),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "XLA vs CPU, bf16 linear" in out.stdout and "Mismatched elements:" in out.stdout


def test_doctor_runs_from_the_installed_wheel(venv, tmp_path):
    out = subprocess.run([str(venv / "bin" / "torch-xla-ext"), "doctor", "--out", "report", "--steps", "2"],
                         cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "torch-xla-ext doctor: embedded example" in out.stdout
    for f in ("report.md", "report.json", "graph_breaks.png", "numerics_ulp.png", "bundle/manifest.json"):
        assert (tmp_path / "report" / f).is_file(), f
    assert "[4/4] graph_breaks" in out.stderr  # progress went to stderr


def test_pip_wheel_on_a_cpython_without_a_wheel_is_refused_before_bazel(tmp_path):
    """`pip wheel .` from a CPython the wheels are not built for: the in-tree backend refuses it,
    naming that CPython, the ones with a wheel and what to run, before Bazel starts."""
    import tool_venv  # python/ (//python:tool_venv; tests/conftest.py under plain pytest)
    from txe_build_backend import wheel_pythons

    oldest = wheel_pythons()[0]
    older = "%s.%d" % (oldest.split(".")[0], int(oldest.split(".")[1]) - 1)  # 3.9
    try:
        python = tool_venv.find_python(older)
    except tool_venv.ToolVenvError as e:
        pytest.skip(f"no CPython {older} here: {e}")
    repo = pathlib.Path(__file__).resolve().parent.parent.parent
    out = subprocess.run([python, "-m", "pip", "wheel", "--no-deps", "--no-index", "-w", str(tmp_path), str(repo)],
                         cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode != 0 and not list(tmp_path.glob("*.whl")), out.stdout + out.stderr
    said = " ".join((out.stdout + out.stderr).split())
    assert f"torch_xla_ext builds wheels for CPython {', '.join(wheel_pythons())}" in said, said[-3000:]
    assert f"this is CPython {older} ({python})" in said and f"`python{wheel_pythons()[-1]} -m pip wheel .`" in said
    assert "bazel build" not in said  # refused before Bazel
