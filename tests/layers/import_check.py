"""Imports every module of one library of bazel/layers.bzl with only that library's deps in the
runfiles (//tests/layers:<library>_import_test): a module-level import of a library its row does
not list fails here with ModuleNotFoundError, as it would for a user of that library alone.

    import_check.py LIBRARY
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback

from tests.layers import layer_table

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    layers = layer_table.load(os.path.join(ROOT, "bazel", "layers.bzl"))
    lib = next((l for l in layers if l.name == argv[0]), None)
    if lib is None:
        print(f"import_check: no library {argv[0]!r} in bazel/layers.bzl", file=sys.stderr)
        return 2
    package_dir = os.path.join(ROOT, layer_table.PACKAGE)
    # __main__ modules run their program when imported; layers_test checks their imports statically.
    own = [rel for rel in layer_table.modules(package_dir)
           if layer_table.owners(rel, layers) == [lib.name] and not rel.endswith("__main__.py")]
    names = [layer_table.PACKAGE + "." + rel[:-3].replace("/", ".").removesuffix(".__init__") for rel in own]
    if not lib.srcs:  # a library without Python sources: the module named after it (the extension)
        names = [f"{layer_table.PACKAGE}.{lib.name}"]
    elif not own:  # a row whose globs match no module (yet)
        print(f"library {lib.name}: no module of this tree matches {', '.join(lib.srcs)}; nothing to import")
        return 0
    failed = 0
    for name in names:
        try:
            module = importlib.import_module(name)
        except Exception:  # noqa: BLE001  every failure is reported, then the exit code says it
            failed += 1
            print(f"FAILED {name} (library {lib.name}, deps {', '.join(lib.deps) or 'none'}):\n{traceback.format_exc()}")
            continue
        where = os.path.abspath(getattr(module, "__file__", "") or "")
        if not where.startswith(package_dir + os.sep):
            failed += 1
            print(f"FAILED {name}: imported from {where}, not from the runfiles under test ({package_dir})")
            continue
        print(f"ok {name}")
    print(f"{len(names) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
