"""Writes the type stubs of the private extension module, torch_xla_ext/_ext/*.pyi (one per
component submodule, docstrings included), with pybind11-stubgen from the built module itself.

    make stubs        # = make develop, then: .venv/bin/python python/generate_stubs.py

A stub package next to `_ext.so`: the import system prefers the extension module to a directory
without `__init__.py`, and type checkers read `_ext/__init__.pyi` and `_ext/<component>.pyi`, so
`from torch_xla_ext._ext import numerics as _core; _core.compare(...)` type-checks.
tests/packaging/stubs_test.py fails when the checked-in stubs and the built module differ; rerun
this after changing a binding.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import pathlib
import sys
import tempfile

MODULE = "torch_xla_ext._ext"
STUB_DIR = "_ext"  # inside the package


def _enum_locations() -> list[str]:
    """pybind11-stubgen's --enum-class-locations for every py::enum_ of the module: a default
    argument that is an enum (`stage: Stage = <Stage.dynamo: 0>`) is printed as `Stage.dynamo`."""
    ext = importlib.import_module(MODULE)
    out = []
    for sub_name, sub in sorted(vars(ext).items()):
        if inspect.ismodule(sub):
            out += [f"^{n}$:{MODULE}.{sub_name}" for n, v in sorted(vars(sub).items())
                    if inspect.isclass(v) and hasattr(v, "__members__")]
    return out


def render() -> dict[str, str]:
    """{path under the package ('_ext/numerics.pyi'): stub text} for the importable (built) module."""
    import pybind11_stubgen

    args = ["--exit-code"]  # an unparsable signature is an error, not a silent `...`
    for loc in _enum_locations():
        args += ["--enum-class-locations", loc]
    with tempfile.TemporaryDirectory() as tmp:
        try:
            pybind11_stubgen.main([*args, "--output-dir", tmp, MODULE])
        except SystemExit as e:
            if e.code:
                raise RuntimeError(f"pybind11-stubgen failed on {MODULE} (its log above names the binding)") from None
        root = pathlib.Path(tmp, *MODULE.split(".")[:-1])
        return {p.relative_to(root).as_posix(): p.read_text() for p in sorted(root.rglob("*.pyi"))}


def package_dir() -> pathlib.Path:
    import torch_xla_ext

    return pathlib.Path(torch_xla_ext.__file__).parent


def checked_in(pkg: pathlib.Path) -> dict[str, str]:
    """The stub files the package has now, in render()'s form."""
    return {p.relative_to(pkg).as_posix(): p.read_text() for p in sorted((pkg / STUB_DIR).glob("*.pyi"))}


def main() -> int:
    # Run from a checkout: the package next to this directory (after `make develop`).
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=pathlib.Path, help="package directory to write into (default: the imported one)")
    a = p.parse_args()
    pkg = a.out or package_dir()
    stubs = render()
    (pkg / STUB_DIR).mkdir(parents=True, exist_ok=True)
    for rel in checked_in(pkg).keys() - stubs.keys():  # a submodule that went away
        (pkg / rel).unlink()
    for rel, text in stubs.items():
        (pkg / rel).write_text(text)
    lines = sum(t.count("\n") for t in stubs.values())
    print(f"generate_stubs: wrote {len(stubs)} stubs ({lines} lines) under {pkg / STUB_DIR}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
