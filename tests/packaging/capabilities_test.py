"""The gate's table (torch_xla_ext/_compat/capabilities.py) against the code it describes: every
private torch, torch_xla and JAX name a ``_compat`` module uses is listed (in a group, or in
OPTIONAL when the module works without it), every listed name is used, and every one resolves on
the pinned stack. The names in the code are found by reading it (its imports and the attribute
chains, ``getattr``/``setattr`` and ``_patch`` calls on imported modules), not from the table."""

import ast
import pathlib

import pytest

from torch_xla_ext._compat import capabilities

COMPAT = pathlib.Path(capabilities.__file__).parent
TOPS = ("torch", "torch_xla", "jax", "jaxlib", "torchax")
LISTED = ([n for g in capabilities.GROUPS.values() for n in g.apis] + list(capabilities.OPTIONAL)
          + list(capabilities.MOVED.values()))


def _private(name: str) -> bool:
    return any(p.startswith("_") and not (p.startswith("__") and p.endswith("__")) for p in name.split(".")[1:])


class _Names(ast.NodeVisitor):
    """Dotted upstream names a module uses, with imports resolved per function scope."""

    def __init__(self):
        self.scopes: list[dict[str, str]] = [{}]
        self.found: set[str] = set()

    def _bind(self, alias: str, path: str) -> None:
        self.scopes[-1][alias] = path
        if path.split(".")[0] in TOPS:
            self.found.add(path)

    def visit_Import(self, node):
        for a in node.names:
            if a.asname:
                self._bind(a.asname, a.name)
            else:
                top = a.name.split(".")[0]
                self.scopes[-1][top] = top
                if top in TOPS:
                    self.found.add(a.name)

    def visit_ImportFrom(self, node):
        if node.level == 0 and node.module:
            for a in node.names:
                self._bind(a.asname or a.name, f"{node.module}.{a.name}")

    def _function(self, node):
        self.scopes.append(dict(self.scopes[-1]))
        self.generic_visit(node)
        self.scopes.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def _dotted(self, node) -> str | None:
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name) and node.id in self.scopes[-1]:
            return ".".join([self.scopes[-1][node.id], *reversed(parts)])
        return None

    def visit_Attribute(self, node):
        name = self._dotted(node)
        if name is not None and name.split(".")[0] in TOPS:
            self.found.add(name)
            return  # the inner chain is a prefix of this one
        self.generic_visit(node)

    def visit_Call(self, node):
        # getattr(mod, "name", ...), setattr(mod, "name", ...), patch(saved, mod, "name", ...)
        for i in range(min(len(node.args) - 1, 2)):
            if not (isinstance(node.args[i + 1], ast.Constant) and isinstance(node.args[i + 1].value, str)):
                continue
            owner = self._dotted(node.args[i]) if isinstance(node.args[i], ast.Attribute) else (
                self.scopes[-1].get(node.args[i].id) if isinstance(node.args[i], ast.Name) else None)
            if owner is not None and owner.split(".")[0] in TOPS:
                self.found.add(f"{owner}.{node.args[i + 1].value}")
        self.generic_visit(node)


def used_names() -> dict[str, str]:
    """{private dotted name: the _compat module using it}."""
    out = {}
    for path in sorted(COMPAT.glob("*.py")):
        if path.name in ("__init__.py", "capabilities.py"):
            continue
        v = _Names()
        v.visit(ast.parse(path.read_text(), str(path)))
        for name in v.found:
            if _private(name):
                out.setdefault(name, f"_compat/{path.name}")
    return out


def _covered(name: str) -> bool:
    # Listed itself, a module or class some listed name lies in, or an attribute of a listed object.
    return any(name == n or n.startswith(name + ".") or name.startswith(n + ".") for n in LISTED)


def test_every_private_name_used_in_compat_is_listed():
    used = used_names()
    assert len(used) > 40, sorted(used)  # the reader finds them (the canaries' names among them)
    for name in ("torch_xla._XLAC._get_ir_debug", "torch._dynamo.convert_frame._compile",
                 "jax._src.interpreters.mlir.make_ir_context", "torch._C._storage_Use_Count"):
        assert name in used, name
    unlisted = {n: m for n, m in used.items() if not _covered(n)}
    assert not unlisted, f"private names used in _compat but not in capabilities.GROUPS/OPTIONAL: {unlisted}"


def test_the_reader_finds_a_name_the_table_lacks():
    v = _Names()
    v.visit(ast.parse("import torch_xla\ndef f(t):\n    return torch_xla._XLAC._new_private_call(t)\n"))
    assert "torch_xla._XLAC._new_private_call" in v.found and not _covered("torch_xla._XLAC._new_private_call")


def test_every_listed_name_is_used_by_its_modules():
    for group in capabilities.GROUPS.values():
        text = "".join((COMPAT.parent / m).read_text() for m in group.modules)
        for name in group.apis:
            assert name.rsplit(".", 1)[1] in text, (group.key, name, group.modules)
    text = "".join(p.read_text() for p in COMPAT.glob("*.py") if p.name != "capabilities.py")
    for name in (*capabilities.OPTIONAL, *capabilities.MOVED.values()):
        assert name.rsplit(".", 1)[1] in text, name


def test_every_listed_name_resolves_on_the_pinned_stack():
    unresolved = {n: capabilities.resolve(n) for n in LISTED if capabilities.resolve(n) is not None}
    # jax 0.12's uncached context maker is the one optional name jax 0.7.1 lacks; torch 2.11's
    # place of log_graph_break is the one moved name torch 2.9 lacks.
    assert unresolved == {"jax._src.interpreters.mlir._create_ir_context":
                          "jax._src.interpreters.mlir has no attribute _create_ir_context",
                          "torch._dynamo.symbolic_convert.InstructionTranslatorBase.log_graph_break":
                          "torch._dynamo.symbolic_convert.InstructionTranslatorBase has no attribute "
                          "log_graph_break"}, unresolved


def test_a_moved_name_counts_where_either_place_resolves(monkeypatch):
    """A group's pinned name that a newer upstream moved passes where only the new place exists,
    and is missing where neither does."""
    group = capabilities.GROUPS["torch.dynamo"]
    old, new = next(iter(capabilities.MOVED.items()))
    assert old in group.apis and capabilities.missing("torch.dynamo") == []
    real = capabilities.resolve
    absent = {old: "torch._dynamo.symbolic_convert has no attribute log_graph_break"}
    monkeypatch.setattr(capabilities, "resolve", lambda n: absent[n] if n in absent else real(n) if n != new else None)
    assert capabilities.missing("torch.dynamo") == []  # torch >= 2.11: the method is there
    absent[new] = "torch._dynamo.symbolic_convert.InstructionTranslatorBase has no attribute log_graph_break"
    assert capabilities.missing("torch.dynamo") == [
        ("torch.dynamo", old, "torch._dynamo.symbolic_convert has no attribute log_graph_break")]


@pytest.mark.parametrize("name, why", [
    ("torch_xla._XLAC._no_such_binding", "torch_xla._XLAC has no attribute _no_such_binding"),
    ("jax.export.no_such_function", "jax.export has no attribute no_such_function"),
    ("torch_xla._no_such_package.module", "torch_xla has no attribute _no_such_package"),
    ("no_such_distribution.module", "no module no_such_distribution"),
])
def test_resolve_names_what_is_missing(name, why):
    assert capabilities.resolve(name) == why
