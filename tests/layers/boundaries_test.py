"""Boundaries of the package, read from the source with ``ast``, nothing imported:

* no private name crosses a module: ``from m import _x`` or ``m._x`` of a torch_xla_ext or tests
  module ``m`` other than the file's own (private *modules* such as ``_compat``, ``_ext`` and
  ``parity/_checks.py`` are torch_xla_ext's internal layer and may be imported; their names follow
  the same rule);
* no import cycle between torch_xla_ext's modules, function-level imports included (``if
  TYPE_CHECKING:`` imports are types only and do not count);
* private torch, torch_xla and JAX APIs (a module or attribute whose name starts with ``_``:
  ``torch.utils._pytree``, ``torch_xla._XLAC``, ``jax._src``, ``torch.Tensor._make_wrapper_subclass``)
  are used only in ``_compat``, one module per upstream subsystem;
* ``_compat`` imports nothing of ours but the shared rules below it (``errors``, ``_json``,
  ``_dtypes``, ``_validation``) and its own modules: no ``_ext``, no component;
* control flow on an upstream exception's text (``"..." in str(e)``, a regex over it) happens only
  in ``_compat``, where each matched message has a canary (``tests/graph_breaks/compat_canary_test.py``).

Under Bazel it sees torch_xla_ext's sources (a dependency of every test) and the test files in its
runfiles; under plain pytest, the whole tests/ tree."""

from __future__ import annotations

import ast
import os

import pytest

import torch_xla_ext

PACKAGE = os.path.dirname(os.path.abspath(torch_xla_ext.__file__))
ROOT = os.path.dirname(PACKAGE)
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The libraries whose private names only torch_xla_ext/_compat may use.
UPSTREAM = ("torch", "torch_xla", "jax", "jaxlib", "torchax")


def _sources() -> dict[str, str]:
    """module name -> file, for torch_xla_ext/ and tests/."""
    out = {}
    for top, prefix in ((PACKAGE, "torch_xla_ext"), (TESTS, "tests")):
        for d, dirs, files in os.walk(top):
            dirs[:] = [x for x in dirs if not x.startswith(".") and x != "__pycache__"]
            for f in files:
                if f.endswith(".py"):
                    rel = os.path.relpath(os.path.join(d, f), top)[:-3].replace(os.sep, ".")
                    name = prefix if rel == "__init__" else f"{prefix}.{rel.removesuffix('.__init__')}"
                    out[name] = os.path.join(d, f)
    return out


SOURCES = _sources()
TREES = {m: ast.parse(open(p, encoding="utf-8").read(), p) for m, p in SOURCES.items()}


def _is_module(name: str) -> bool:
    if name in SOURCES:
        return True
    parent, _, leaf = name.rpartition(".")
    d = os.path.join(ROOT, *parent.split(".")) if parent.startswith("torch_xla_ext") else None
    # a compiled extension module (torch_xla_ext._ext) or its submodule, and its stub
    return bool(d and os.path.isdir(d) and any(f.split(".")[0] == leaf for f in os.listdir(d)
                                                    if f.endswith((".so", ".pyi"))))


def _ours(name: str) -> bool:
    return name == "torch_xla_ext" or name.startswith(("torch_xla_ext.", "tests."))


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _package_of(module: str) -> str:
    return module if os.path.basename(SOURCES.get(module, "")) == "__init__.py" else module.rpartition(".")[0]


def _absolute(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = _package_of(module).split(".")
    base = base[:len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test):
            skip.update(id(x) for b in n.body for x in ast.walk(b))
    return skip


def _imports(module: str) -> list[tuple[ast.AST, str, str | None, str | None]]:
    """(node, imported module, attribute or None, bound name) for every import of ours."""
    out = []
    for n in ast.walk(TREES[module]):
        if isinstance(n, ast.ImportFrom):
            mod = _absolute(module, n)
            if _ours(mod):
                for a in n.names:
                    full = f"{mod}.{a.name}"
                    if _is_module(full):
                        out.append((n, full, None, a.asname or a.name))
                    else:
                        out.append((n, mod, a.name, a.asname or a.name))
        elif isinstance(n, ast.Import):
            for a in n.names:
                if _ours(a.name):
                    out.append((n, a.name, None, a.asname or (a.name if a.asname else a.name.split(".")[0])))
    return out


def private_crossings() -> list[str]:
    found = []
    for module in TREES:
        bound: dict[str, str] = {}
        for node, mod, attr, name in _imports(module):
            if attr is None:
                bound[name] = mod if "." not in name or name == mod else name
                if "." in name:  # `import a.b.c` binds `a`
                    bound[name.split(".")[0]] = name.split(".")[0]
            elif _private(attr) and mod != module:
                found.append(f"{SOURCES[module]}:{node.lineno}: from {mod} import {attr}")
        for n in ast.walk(TREES[module]):
            if not (isinstance(n, ast.Attribute) and _private(n.attr)):
                continue
            chain, v = [], n.value
            while isinstance(v, ast.Attribute):
                chain.append(v.attr)
                v = v.value
            if isinstance(v, ast.Name) and v.id in bound:
                target = ".".join([bound[v.id], *reversed(chain)])
                if _is_module(target) and not _is_module(f"{target}.{n.attr}") and target != module:
                    found.append(f"{SOURCES[module]}:{n.lineno}: {target}.{n.attr}")
    return sorted(found)


def import_cycles() -> list[frozenset[str]]:
    graph: dict[str, set[str]] = {}
    for module in (m for m in TREES if m.startswith("torch_xla_ext")):
        skip = _type_checking_nodes(TREES[module])
        graph[module] = {mod for node, mod, _, _ in _imports(module)
                         if id(node) not in skip and mod in SOURCES and mod != module}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(frozenset(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return cycles


def _upstream_private(dotted: str) -> bool:
    parts = dotted.split(".")
    return parts[0] in UPSTREAM and any(_private(p) for p in parts[1:])


def private_upstream_uses() -> list[str]:
    """Every use of a private torch / torch_xla / JAX module or attribute outside _compat: an import
    of one (``import torch.utils._pytree``, ``from torch.utils import _pytree``, ``from jax._src import
    config``), or an attribute chain through one from a name bound to an upstream module
    (``torch._dynamo.reset()``, ``torch.Tensor._make_wrapper_subclass``, ``xm._x`` after ``import
    torch_xla.core.xla_model as xm``)."""
    found = []
    for module, tree in TREES.items():
        if not module.startswith("torch_xla_ext") or module.startswith("torch_xla_ext._compat"):
            continue
        upstream: set[str] = set()  # names bound to an upstream module (or one of its attributes)
        for n in ast.walk(tree):
            if isinstance(n, ast.Import):
                for a in n.names:
                    if a.name.split(".")[0] in UPSTREAM:
                        upstream.add(a.asname or a.name.split(".")[0])
                        if _upstream_private(a.name):
                            found.append(f"{SOURCES[module]}:{n.lineno}: import {a.name}")
            elif isinstance(n, ast.ImportFrom) and not n.level and (n.module or "").split(".")[0] in UPSTREAM:
                for a in n.names:
                    upstream.add(a.asname or a.name)
                    if _upstream_private(f"{n.module}.{a.name}"):
                        found.append(f"{SOURCES[module]}:{n.lineno}: from {n.module} import {a.name}")
        for n in ast.walk(tree):
            if not isinstance(n, ast.Attribute):
                continue
            chain, v = [n.attr], n.value
            while isinstance(v, ast.Attribute):
                chain.append(v.attr)
                v = v.value
            # the outermost attribute of a chain only (x.a._b.c is one use, reported once)
            if isinstance(v, ast.Name) and v.id in upstream and any(_private(a) for a in chain) \
                    and not _is_inner_attribute(tree, n):
                found.append(f"{SOURCES[module]}:{n.lineno}: {ast.unparse(n)}")
    return sorted(found)


def _is_inner_attribute(tree: ast.AST, node: ast.Attribute) -> bool:
    parents = _PARENTS.setdefault(id(tree), {id(c): p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)})
    return isinstance(parents.get(id(node)), ast.Attribute)


_PARENTS: dict[int, dict[int, ast.AST]] = {}


def _refers_to(expr: ast.AST, names: set[str]) -> bool:
    """Whether ``expr`` is the exception's text: str(e)/repr(e), e.args, an alias of those, or a
    method call on one (str(e).strip())."""
    while isinstance(expr, (ast.Call, ast.Attribute, ast.Subscript)):
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in ("str", "repr") \
                and expr.args and isinstance(expr.args[0], ast.Name) and expr.args[0].id in names:
            return True
        expr = expr.func if isinstance(expr, ast.Call) else expr.value
    return isinstance(expr, ast.Name) and expr.id in names


def text_matches_outside_compat() -> list[str]:
    found = []
    for module, tree in TREES.items():
        if not module.startswith("torch_xla_ext") or module.startswith("torch_xla_ext._compat"):
            continue
        ours = {name for _, mod, attr, name in _imports(module) if attr is not None}
        scopes: list[tuple[str, list[ast.stmt]]] = []
        for h in ast.walk(tree):
            if not (isinstance(h, ast.ExceptHandler) and h.name):
                continue
            caught = [h.type] if not isinstance(h.type, ast.Tuple) else list(h.type.elts)
            if caught and all(isinstance(t, ast.Name) and t.id in ours for t in caught):
                continue  # our own exception: its text is ours
            scopes.append((h.name, h.body))
        for f in ast.walk(tree):  # a function handed the exception: `def explain(exc: BaseException)`
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for a in f.args.args + f.args.kwonlyargs:
                    if a.annotation is not None and ast.unparse(a.annotation) in ("BaseException", "Exception"):
                        scopes.append((a.arg, f.body))
        for name, body in scopes:
            exc, aliases = {name}, {name}
            for n in (x for b in body for x in ast.walk(b)):
                if isinstance(n, ast.Assign) and _refers_to(n.value, exc) and not isinstance(n.value, ast.Name):
                    aliases.update(t.id for t in n.targets if isinstance(t, ast.Name))
            for n in (x for b in body for x in ast.walk(b)):
                text_test = (
                    isinstance(n, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in n.ops)
                    and any(_refers_to(c, aliases) for c in n.comparators)
                ) or (
                    isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                    and n.func.attr in ("search", "match", "fullmatch", "findall", "startswith", "endswith")
                    and (any(_refers_to(a, aliases) for a in n.args) or _refers_to(n.func.value, aliases))
                )
                if text_test:
                    found.append(f"{SOURCES[module]}:{n.lineno}: {ast.unparse(n)}")
    return found


def test_no_private_name_crosses_a_module():
    assert private_crossings() == []


def test_no_import_cycle():
    assert [sorted(c) for c in import_cycles()] == []


def test_private_upstream_apis_only_in_compat():
    assert private_upstream_uses() == []


# What _compat may import of ours: the shared rules below it in bazel/layers.bzl (errors, the one
# JSON policy, the one dtype table, the one validator), never a component or the extension.
_COMPAT_MAY_IMPORT = ("torch_xla_ext.errors", "torch_xla_ext._json", "torch_xla_ext._dtypes", "torch_xla_ext._validation")


def test_compat_imports_no_component_and_not_the_extension():
    wrong = []
    for module in (m for m in TREES if m.startswith("torch_xla_ext._compat")):
        for node, mod, _, _ in _imports(module):
            if not (mod.startswith("torch_xla_ext._compat") or mod in _COMPAT_MAY_IMPORT):
                wrong.append(f"{SOURCES[module]}:{node.lineno}: {mod}")
    assert wrong == []


def test_upstream_error_text_is_matched_only_in_compat():
    assert text_matches_outside_compat() == []


# ---- the checks can fail ---------------------------------------------------------------------------


@pytest.fixture
def planted(monkeypatch):
    """Adds a module to the scanned sources for one test."""
    def plant(name: str, source: str) -> None:
        monkeypatch.setitem(SOURCES, name, f"<planted {name}>")
        monkeypatch.setitem(TREES, name, ast.parse(source))
    return plant


def test_a_planted_private_import_is_found(planted):
    before = set(private_crossings())
    planted("torch_xla_ext.graph_breaks.planted", "from torch_xla_ext.parity.api import verify, _nothing\n"
                                                  "from torch_xla_ext import doctor\ndoctor._anything()\n")
    found = sorted(set(private_crossings()) - before)
    assert len(found) == 2 and "import _nothing" in found[0] and "torch_xla_ext.doctor._anything" in found[1]


def test_a_planted_cycle_is_found(planted):
    planted("torch_xla_ext.parity.planted_a", "def f():\n    from torch_xla_ext.parity import planted_b\n")
    planted("torch_xla_ext.parity.planted_b", "from torch_xla_ext.parity.planted_a import f\n")
    assert frozenset({"torch_xla_ext.parity.planted_a", "torch_xla_ext.parity.planted_b"}) in import_cycles()


def test_a_planted_cycle_outside_parity_is_found(planted):
    planted("torch_xla_ext.export.planted_low", "from torch_xla_ext.export import planted_high\n")
    planted("torch_xla_ext.export.planted_high", "import torch_xla_ext.export.planted_low\n")
    assert [sorted(c) for c in import_cycles()] == [["torch_xla_ext.export.planted_high",
                                                     "torch_xla_ext.export.planted_low"]]


@pytest.mark.parametrize("source,use", [
    ("import torch.utils._pytree as pytree\n", "import torch.utils._pytree"),
    ("def f():\n    from torch.utils._pytree import tree_map\n", "from torch.utils._pytree import tree_map"),
    ("from torch.utils import _pytree\n", "from torch.utils import _pytree"),
    ("from jax._src import config\n", "from jax._src import config"),
    ("import torch\ndef f(cls, t):\n    return torch.Tensor._make_wrapper_subclass(cls, t.shape)\n",
     "torch.Tensor._make_wrapper_subclass"),
    ("import torch_xla.core.xla_model as xm\nxm._XLAC._xla_all_reduce()\n", "xm._XLAC._xla_all_reduce"),
    ("def f():\n    import torch\n    torch._dynamo.reset()\n", "torch._dynamo.reset"),
])
def test_a_planted_private_upstream_use_is_found(planted, source, use):
    assert private_upstream_uses() == []
    planted("torch_xla_ext.export.planted", source)
    (found,) = private_upstream_uses()
    assert found.endswith(use), found
    planted("torch_xla_ext._compat.planted", source)  # the same in _compat is what _compat is for
    assert private_upstream_uses() == [found]


def test_public_upstream_apis_and_our_own_private_names_are_not_upstream_uses(planted):
    planted("torch_xla_ext.export.planted", "import sys, torch, jax\nfrom torch_xla_ext import _dtypes\n"
                                            "sys._getframe(0); torch.compiler.disable; jax.tree_util.keystr\n"
                                            "spec = torch.Size([1]); spec._asdict if False else None\n")
    assert private_upstream_uses() == []


def test_a_planted_text_match_is_found(planted):
    before = set(text_matches_outside_compat())
    planted("torch_xla_ext.planted", "try:\n    pass\nexcept RuntimeError as e:\n    msg = str(e).strip()\n"
                                     "    if 'by hash' in msg:\n        raise\n")
    (found,) = set(text_matches_outside_compat()) - before
    assert "'by hash' in msg" in found
