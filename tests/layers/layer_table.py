"""The layer table of bazel/layers.bzl read from Python, and every import in a tree checked
against it (the static half of "Bazel refuses an import that climbs"; the other half is each
library's import test, //tests/layers:<library>_import_test, run with only its deps present)."""

from __future__ import annotations

import ast
import dataclasses
import fnmatch
import os

PACKAGE = "torch_xla_ext"
ROOT_LIBRARY = "package"  # torch_xla_ext/__init__.py: under every library


@dataclasses.dataclass(frozen=True)
class Library:
    name: str
    srcs: tuple[str, ...]  # globs relative to torch_xla_ext/
    deps: tuple[str, ...]


def load(path: str) -> list[Library]:
    """The rows of TXE_PY_LAYERS in `path`, in order (lowest layer first)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "TXE_PY_LAYERS" for t in node.targets):
            return [Library(name, tuple(srcs), tuple(deps)) for name, srcs, deps in ast.literal_eval(node.value)]
    raise ValueError(f"{path}: no TXE_PY_LAYERS assignment")


def _matches(rel: str, pattern: str) -> bool:
    # Bazel's glob: "**/" matches zero or more directories.
    if "**/" in pattern:
        head, tail = pattern.split("**/", 1)
        return rel.startswith(head) and (fnmatch.fnmatch(rel[len(head):], tail) or fnmatch.fnmatch(rel[len(head):], "*/" + tail))
    return fnmatch.fnmatch(rel, pattern) and rel.count("/") == pattern.count("/")


def modules(package_dir: str) -> list[str]:
    """Every .py file under `package_dir`, relative to it, with '/'."""
    out = []
    for dirpath, dirnames, filenames in os.walk(package_dir):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for f in sorted(filenames):
            if f.endswith(".py"):
                out.append(os.path.relpath(os.path.join(dirpath, f), package_dir).replace(os.sep, "/"))
    return out


def owners(rel: str, layers: list[Library]) -> list[str]:
    return [lib.name for lib in layers if any(_matches(rel, p) for p in lib.srcs)]


def _library_of_module(dotted: str, layers: list[Library], package_dir: str) -> str | None:
    """The library that holds module `dotted` (torch_xla_ext.x.y), or None if it is not ours."""
    parts = dotted.split(".")
    if parts[0] != PACKAGE:
        return None
    if len(parts) == 1:
        return ROOT_LIBRARY
    names = {lib.name for lib in layers}
    # The longest prefix that is a file or a package of the tree decides.
    for n in range(len(parts), 1, -1):
        rel = "/".join(parts[1:n])
        for candidate in (rel + ".py", rel + "/__init__.py"):
            if os.path.exists(os.path.join(package_dir, candidate)):
                found = owners(candidate, layers)
                return found[0] if found else None
    if parts[1] in names:  # a library without Python sources (the extension, `_ext`)
        return parts[1]
    return None


def _imports(path: str, dotted_package: str):
    """(line, module) for every import in the file, relative ones resolved, including imports
    inside functions (`from torch_xla_ext import parity` in a function is a dependency too)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = dotted_package.split(".")[: len(dotted_package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            # `from torch_xla_ext import parity` imports the submodule parity.
            for a in node.names:
                yield node.lineno, f"{mod}.{a.name}"


def violations(package_dir: str, layers: list[Library]) -> list[str]:
    """Every breach of the table, one sentence each naming the file (and line):
    a module in no library or in two, a dep that names an unknown library or one on a later row
    (climbing), and an import of a library the importing module's row does not list."""
    out = []
    order = {lib.name: i for i, lib in enumerate(layers)}
    for i, lib in enumerate(layers):
        for d in lib.deps:
            if d not in order:
                out.append(f"bazel/layers.bzl: {lib.name} depends on {d!r}, which is no library")
            elif order[d] >= i:
                out.append(f"bazel/layers.bzl: {lib.name} depends on {d}, which is not on an earlier row (a layer may only use lower ones)")
    for rel in modules(package_dir):
        own = owners(rel, layers)
        if len(own) != 1:
            out.append(f"{PACKAGE}/{rel}: in {len(own)} libraries ({', '.join(own) or 'none'}); bazel/layers.bzl must give it exactly one")
            continue
        lib = own[0]
        allowed = {lib, ROOT_LIBRARY, *next(l.deps for l in layers if l.name == lib)}
        dotted_package = PACKAGE + "." + rel[:-3].replace("/", ".")
        if not rel.endswith("__init__.py"):
            dotted_package = dotted_package.rsplit(".", 1)[0]
        else:
            dotted_package = dotted_package[: -len(".__init__")]
        for line, mod in _imports(os.path.join(package_dir, rel), dotted_package):
            target = _library_of_module(mod, layers, package_dir)
            if target is not None and target not in allowed:
                out.append(f"{PACKAGE}/{rel}:{line}: imports {mod} (library {target}), which library {lib} does not list in bazel/layers.bzl")
    return out
