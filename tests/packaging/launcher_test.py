"""`torch-xla-ext` in the shared project venv (python/checkout_launcher.py, which `make setup`
installs): it runs the package of the checkout it is called from, never another checkout's, and
says so where there is none. Each check runs the installed launcher as a real process, in a
venv directory of the test's own (its `bin/torch-xla-ext` run by this interpreter), over two
checkouts that link it as `.venv`, each with a stand-in `torch_xla_ext.cli.main` naming itself;
then once over this checkout's real package."""

from __future__ import annotations

import os
import pathlib
import site
import subprocess
import sys

import pytest

import torch_xla_ext

HERE = pathlib.Path(__file__).resolve().parent
LAUNCHER = HERE.parent.parent / "python" / "checkout_launcher.py"


def _install(venv: pathlib.Path) -> pathlib.Path:
    # A venv of the test's own that sees this one's packages through a .pth (as wheel_test's).
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    (next((venv / "lib").glob("python3.*")) / "site-packages" / "pinned_stack.pth").write_text(
        "\n".join(site.getsitepackages()) + "\n")
    # The real installer, as python/setup_env.sh runs it.
    out = subprocess.run([str(venv / "bin" / "python"), str(LAUNCHER), str(venv)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    path = pathlib.Path(out.stdout.strip())
    assert path == venv.resolve() / "bin" / "torch-xla-ext" and os.access(path, os.X_OK), path
    return path


def _checkout(root: pathlib.Path, venv: pathlib.Path, name: str) -> pathlib.Path:
    (root / "torch_xla_ext" / "cli").mkdir(parents=True)
    (root / "torch_xla_ext" / "__init__.py").write_text("")
    (root / "torch_xla_ext" / "cli" / "__init__.py").write_text(
        f"import sys\ndef main():\n    print({name!r}, sys.argv[1:])\n    return 3\n")
    (root / ".venv").symlink_to(venv)
    return root


def _env():
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RUNFILES_DIR", "PYTHONSAFEPATH")}


def _run(argv, cwd):
    return subprocess.run([str(a) for a in argv], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=300)


@pytest.fixture()
def layout(tmp_path):
    venv = tmp_path / "cache" / "venv-0123"
    launcher = _install(venv)
    a = _checkout(tmp_path / "a", venv, "checkout a")
    b = _checkout(tmp_path / "b", venv, "checkout b")
    return venv, launcher, a, b


def test_the_checkout_whose_venv_link_it_is_called_through(layout):
    _, _, a, b = layout
    # Called as <checkout>/.venv/bin/torch-xla-ext, from anywhere (even inside the other checkout).
    r = _run([a / ".venv" / "bin" / "torch-xla-ext", "trace", "--report", "x"], cwd=b)
    assert (r.returncode, r.stdout.strip()) == (3, "checkout a ['trace', '--report', 'x']"), r.stderr


def test_from_path_the_checkout_that_holds_the_working_directory(layout):
    venv, launcher, a, b = layout
    (b / "tests" / "trace").mkdir(parents=True)
    # The venv's own path (what `. .venv/bin/activate` puts on PATH), from a folder inside b.
    r = _run([launcher, "--help"], cwd=b / "tests" / "trace")
    assert (r.returncode, r.stdout.strip()) == (3, "checkout b ['--help']"), r.stderr
    r = _run([launcher], cwd=a)
    assert (r.returncode, r.stdout.strip()) == (3, "checkout a []"), r.stderr


def test_no_checkout_is_said_not_guessed(layout, tmp_path):
    venv, launcher, a, _ = layout
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = _run([launcher, "--help"], cwd=elsewhere)
    assert r.returncode == 2 and r.stdout == "", r.stdout
    assert "no torch_xla_ext checkout here" in r.stderr and str(venv.resolve()) in r.stderr, r.stderr
    # A folder that looks like a checkout but links another venv is not one of this venv's.
    other = tmp_path / "other"
    (other / "torch_xla_ext").mkdir(parents=True)
    (other / "torch_xla_ext" / "__init__.py").write_text("")
    (other / ".venv").symlink_to(elsewhere)
    r = _run([launcher], cwd=other)
    assert r.returncode == 2 and "no torch_xla_ext checkout here" in r.stderr, r.stdout + r.stderr


def test_installing_again_keeps_the_file_and_a_change_replaces_it(layout):
    venv, launcher, _, _ = layout
    before = launcher.stat().st_ino
    again = subprocess.run([sys.executable, str(LAUNCHER), str(venv)], capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stderr
    assert launcher.stat().st_ino == before  # unchanged: not rewritten under a running command
    launcher.write_text("#!/bin/sh\nexit 9\n")
    subprocess.run([sys.executable, str(LAUNCHER), str(venv)], check=True, capture_output=True, timeout=60)
    assert launcher.read_text().startswith(f"#!{venv.resolve() / 'bin' / 'python'}\n")
    assert launcher.read_text().split("\n", 1)[1] == LAUNCHER.read_text()


def test_the_real_package_of_this_checkout(tmp_path):
    # This checkout (the runfiles tree, or the source tree under plain pytest) with its built
    # extension, through a venv link: the command line's own --version.
    package = pathlib.Path(torch_xla_ext.__file__).parent  # unresolved: Bazel's runfiles hold the extension
    venv = tmp_path / "venv"
    _install(venv)
    co = tmp_path / "co"
    co.mkdir()
    (co / "torch_xla_ext").symlink_to(package)
    (co / ".venv").symlink_to(venv)
    r = _run([co / ".venv" / "bin" / "torch-xla-ext", "--version"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"torch-xla-ext {torch_xla_ext.__version__}"
