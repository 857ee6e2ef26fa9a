"""The layers of bazel/layers.bzl hold in torch_xla_ext/: every module in exactly one library,
every import (module level or inside a function) of a library its row lists, deps only downward;
and the check itself fails on a planted climbing import and a module in no library."""

from __future__ import annotations

import os
import re
import shutil

import pytest

from tests.layers import layer_table

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE_DIR = os.path.join(ROOT, "torch_xla_ext")
LAYERS = layer_table.load(os.path.join(ROOT, "bazel", "layers.bzl"))


def test_the_tree_keeps_its_layers():
    found = layer_table.violations(PACKAGE_DIR, LAYERS)
    assert not found, "\n".join(found)


def test_every_component_package_is_a_library():
    # The packages of torch_xla_ext/ (folders with __init__.py) each have their own row.
    packages = sorted(d for d in os.listdir(PACKAGE_DIR) if os.path.isfile(os.path.join(PACKAGE_DIR, d, "__init__.py")))
    assert packages, PACKAGE_DIR
    names = {lib.name for lib in LAYERS}
    assert set(packages) <= names, sorted(set(packages) - names)


def test_architecture_page_names_every_library():
    with open(os.path.join(ROOT, "docs", "ARCHITECTURE.md"), encoding="utf-8") as f:
        page = f.read()
    section = page.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    missing = [lib.name for lib in LAYERS if f"`{lib.name}`" not in section]
    assert not missing, f"docs/ARCHITECTURE.md 'Layers' does not name {missing}"


@pytest.fixture
def tree(tmp_path):
    """A copy of torch_xla_ext/'s Python sources to plant breaches in."""
    copy = tmp_path / "torch_xla_ext"
    shutil.copytree(PACKAGE_DIR, copy, ignore=lambda d, names: [n for n in names if not (n.endswith(".py") or os.path.isdir(os.path.join(d, n))) or n == "__pycache__"])
    found = layer_table.violations(str(copy), LAYERS)
    return copy, found


def test_a_climbing_import_is_refused(tree):
    copy, before = tree
    target = copy / "numerics.py"
    target.write_text(target.read_text() + "\n\ndef _climb():\n    from torch_xla_ext import doctor\n    return doctor\n")
    lines = len(target.read_text().splitlines())
    new = sorted(set(layer_table.violations(str(copy), LAYERS)) - set(before))
    assert new == [f"torch_xla_ext/numerics.py:{lines - 1}: imports torch_xla_ext.doctor (library doctor), "
                   "which library numerics does not list in bazel/layers.bzl"], new


def test_a_relative_import_across_packages_is_refused(tree):
    copy, before = tree
    target = copy / "export" / "graph.py"
    target.write_text(target.read_text() + "\nfrom ..parity import report as _report  # noqa\n")
    new = set(layer_table.violations(str(copy), LAYERS)) - set(before)
    assert len(new) == 1 and re.match(r"torch_xla_ext/export/graph\.py:\d+: imports torch_xla_ext\.parity\.report \(library parity\)", new.pop())


def test_a_module_in_no_library_is_named(tree):
    copy, before = tree
    (copy / "_orphan.py").write_text("X = 1\n")
    new = set(layer_table.violations(str(copy), LAYERS)) - set(before)
    assert new == {"torch_xla_ext/_orphan.py: in 0 libraries (none); bazel/layers.bzl must give it exactly one"}


def test_a_dep_on_a_higher_row_is_refused(tmp_path):
    table = tmp_path / "layers.bzl"
    table.write_text('TXE_PY_LAYERS = [\n    ("a", ["a.py"], ["b"]),\n    ("b", ["b.py"], []),\n]\n')
    (tmp_path / "pkg").mkdir()
    found = layer_table.violations(str(tmp_path / "pkg"), layer_table.load(str(table)))
    assert found == ["bazel/layers.bzl: a depends on b, which is not on an earlier row (a layer may only use lower ones)"]
