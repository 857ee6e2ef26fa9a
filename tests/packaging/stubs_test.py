"""torch_xla_ext/_ext.pyi is what python/generate_stubs.py makes from the built extension: a
binding change without `make stubs` fails here, naming the first lines that differ."""

import ast
import difflib
import importlib.util
import os
import pathlib

import torch_xla_ext
import torch_xla_ext._ext as ext

PKG = pathlib.Path(torch_xla_ext.__file__).resolve().parent
HERE = pathlib.Path(__file__).resolve().parent


def _generator():
    # The checkout's python/ (plain pytest) or the Bazel runfiles' copy of it.
    for root in (HERE.parent.parent, PKG.parent):
        path = root / "python" / "generate_stubs.py"
        if path.is_file():
            spec = importlib.util.spec_from_file_location("generate_stubs", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
    raise FileNotFoundError("python/generate_stubs.py")


def test_checked_in_stub_matches_the_built_module():
    checked_in = (PKG / "_ext.pyi").read_text()
    built = _generator().render()
    if checked_in != built:
        diff = "\n".join(list(difflib.unified_diff(checked_in.splitlines(), built.splitlines(), "_ext.pyi (checked in)",
                                                   "built _ext", lineterm=""))[:40])
        raise AssertionError(f"torch_xla_ext/_ext.pyi is stale: run `make stubs`\n{diff}")


def test_stub_names_every_submodule_class_and_function():
    # Independent of the generator: walk the module and find each name in the parsed stub.
    tree = ast.parse((PKG / "_ext.pyi").read_text())
    stub = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    for sub_name in (n for n in dir(ext) if not n.startswith("_")):
        sub = getattr(ext, sub_name)
        assert sub_name in stub, sub_name
        declared = {n.name for n in stub[sub_name].body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
        public = {n for n in dir(sub) if not n.startswith("_") and callable(getattr(sub, n))}
        assert public <= declared, f"{sub_name}: not in the stub: {sorted(public - declared)}"


def test_generator_sees_a_changed_signature():
    gen = _generator()
    original = ext.jax_call.read_hlo_signature
    sig = gen._signatures("read_hlo_signature", original.__doc__)
    assert sig == ["(hlo_module_proto: bytes) -> jax_call.HloSignature"]
    changed = original.__doc__.replace("hlo_module_proto: bytes", "hlo_module_proto: str")
    assert gen._signatures("read_hlo_signature", changed) != sig


def test_package_is_typed():
    assert (PKG / "py.typed").is_file()
