"""torch_xla_ext/_ext/*.pyi is what python/generate_stubs.py (pybind11-stubgen) makes from the built
extension: a binding change without `make stubs` fails here, naming the first lines that differ."""

import ast
import difflib
import importlib.util
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


def stale(checked_in: dict[str, str], built: dict[str, str]) -> str:
    """'' when the two sets of stubs agree, else the missing, extra and first differing lines."""
    out = [f"missing: {sorted(built.keys() - checked_in.keys())}"] if built.keys() - checked_in.keys() else []
    out += [f"not generated: {sorted(checked_in.keys() - built.keys())}"] if checked_in.keys() - built.keys() else []
    for rel in sorted(built.keys() & checked_in.keys()):
        if checked_in[rel] != built[rel]:
            out += list(difflib.unified_diff(checked_in[rel].splitlines(), built[rel].splitlines(),
                                             f"{rel} (checked in)", f"{rel} (built)", lineterm=""))[:40]
    return "\n".join(out)


def test_checked_in_stubs_match_the_built_module():
    gen = _generator()
    built = gen.render()
    diff = stale(gen.checked_in(PKG), built)
    assert not diff, f"torch_xla_ext/_ext/*.pyi are stale: run `make stubs`\n{diff}"
    # The comparison sees a changed signature, a lost file and an extra one.
    changed = dict(built)
    changed["_ext/jax_call.pyi"] = built["_ext/jax_call.pyi"].replace("hlo_module_proto: bytes", "hlo_module_proto: str")
    assert "hlo_module_proto: str" in stale(changed, built)
    assert "missing: ['_ext/parity.pyi']" in stale({k: v for k, v in built.items() if k != "_ext/parity.pyi"}, built)
    assert "not generated: ['_ext/old.pyi']" in stale({**built, "_ext/old.pyi": ""}, built)


def _stub(sub_name: str) -> ast.Module:
    return ast.parse((PKG / "_ext" / f"{sub_name}.pyi").read_text())


def test_stub_names_every_submodule_class_and_function():
    # Independent of the generator: walk the module and find each name in the parsed stubs.
    init = ast.parse((PKG / "_ext" / "__init__.pyi").read_text())
    imported = {a.name for n in init.body if isinstance(n, ast.ImportFrom) for a in n.names}
    for sub_name in (n for n in dir(ext) if not n.startswith("_")):
        sub = getattr(ext, sub_name)
        assert sub_name in imported, sub_name
        declared = {n.name for n in _stub(sub_name).body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
        public = {n for n in dir(sub) if not n.startswith("_") and callable(getattr(sub, n))}
        assert public <= declared, f"{sub_name}: not in the stub: {sorted(public - declared)}"


def test_stub_signature_is_pybind11s():
    # pybind11's own docstring line is the oracle for a function's parameters and return type.
    stub = {n.name: n for n in _stub("jax_call").body if isinstance(n, ast.FunctionDef)}
    fn = stub["read_hlo_signature"]
    first_line = ext.jax_call.read_hlo_signature.__doc__.splitlines()[0]
    params = ", ".join(f"{a.arg}: {ast.unparse(a.annotation)}" for a in fn.args.args)
    assert first_line.replace("torch_xla_ext._ext.jax_call.", "") == f"read_hlo_signature({params}) -> {ast.unparse(fn.returns)}"
    assert ast.get_docstring(fn) or fn.body  # the body is the docstring or `...`


def test_package_is_typed():
    assert (PKG / "py.typed").is_file()
