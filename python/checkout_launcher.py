"""`torch-xla-ext` in the project venv, for checkouts (a wheel installs its own console script).

The project venv (``~/.cache/torch_xla_ext/venv-<hash of the pins>``, linked as each checkout's
``.venv``) is shared by every checkout with the same pins, so no checkout is installed in it.
``python/setup_env.sh`` (``make setup``) runs ``python python/checkout_launcher.py VENV``, which
writes this file as ``VENV/bin/torch-xla-ext``, and that runs the wheel's entry point
(``torch_xla_ext.cli:main``) from one checkout, named by how it is called:

- ``<checkout>/.venv/bin/torch-xla-ext ...``: that checkout;
- ``torch-xla-ext ...`` from PATH (``. .venv/bin/activate`` puts the venv's real path there): the
  checkout that holds the working directory and links this venv as its ``.venv``.

Anywhere else it exits 2 and says so. The checkout needs ``make develop`` (its extension in the
tree), as ``.venv/bin/python -m torch_xla_ext`` does; the package's gate says so otherwise.
"""

from __future__ import annotations

import os
import sys

NAME = "torch-xla-ext"


def _links_venv(root: str, venv: str) -> bool:
    return (os.path.isfile(os.path.join(root, "torch_xla_ext", "__init__.py"))
            and os.path.realpath(os.path.join(root, ".venv")) == venv)


def find_checkout(called_as: str, cwd: str, venv: str) -> str | None:
    """The checkout to run: the one whose ``.venv/bin`` ``called_as`` (unresolved) lies in, else the
    nearest directory at or above ``cwd`` that links ``venv`` (resolved) as ``.venv``; None if neither."""
    bin_dir = os.path.dirname(os.path.abspath(called_as))
    if os.path.basename(os.path.dirname(bin_dir)) == ".venv":
        root = os.path.dirname(os.path.dirname(bin_dir))
        if _links_venv(root, venv):
            return root
    d = os.path.abspath(cwd)
    while True:
        if _links_venv(d, venv):
            return d
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent


def launch() -> int:
    venv = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    root = find_checkout(sys.argv[0], os.getcwd(), venv)
    if root is None:
        print(f"{NAME}: no torch_xla_ext checkout here: this venv ({venv}) is shared by the checkouts that link it "
              f"as .venv, so run {NAME} inside one of them, or call <checkout>/.venv/bin/{NAME}", file=sys.stderr)
        return 2
    sys.path.insert(0, root)
    from torch_xla_ext.cli import main  # the checkout's package, found through the path just added

    return main()


def install(venv: str) -> str:
    """Writes this file as ``venv/bin/torch-xla-ext`` run by the venv's python (unchanged if it is
    already there; replaced atomically, since checkouts share the venv); returns its path."""
    venv = os.path.realpath(venv)
    with open(__file__, encoding="utf-8") as f:
        text = f"#!{os.path.join(venv, 'bin', 'python')}\n" + f.read()
    target = os.path.join(venv, "bin", NAME)
    try:
        with open(target, encoding="utf-8") as f:
            if f.read() == text:
                return target
    except OSError:
        pass
    tmp = f"{target}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(tmp, 0o755)
    os.replace(tmp, target)
    return target


if __name__ == "__main__":
    # Installed, this file is bin/torch-xla-ext and launches; from the checkout it installs.
    if os.path.basename(__file__) == NAME:
        sys.exit(launch())
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} VENV (writes VENV/bin/{NAME})")
    print(install(sys.argv[1]))
