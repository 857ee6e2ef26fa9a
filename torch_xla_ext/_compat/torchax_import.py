"""torchax's import on a torch that removed ops its tables name: torchax 0.0.13 (the newest
release) keys its autocast policy, decompositions and lowerings by aten overloads such as
``aten.prod.dim_Dimname`` and ops such as ``aten.cholesky``, which torch 2.13 and 2.14 removed
(named tensors, long-deprecated linear algebra), so ``import torchax`` fails there with an
AttributeError (google/torchax#101).

:func:`install` puts a finder on ``sys.meta_path`` that, when ``torchax`` is imported, installs a
stand-in for each name of :data:`REMOVED` the running torch lacks, imports torchax and the modules
it loads lazily (its lowerings, decompositions and export, which name them too), and removes the
stand-ins again: afterwards ``torch.ops`` is as torch made it, and torchax's tables hold the
stand-ins only as keys nothing dispatches to (a stand-in equals no real op). On a torch that has
every name (the pinned 2.9) it changes nothing and torchax loads as it always does.

Importing this module imports nothing of torch or torchax.

Example:
    >>> install()
    >>> any(isinstance(f, _Finder) for f in sys.meta_path) or "torchax" in sys.modules
    True
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import threading
from typing import Any, Sequence

__all__ = ["LAZY", "REMOVED", "install", "missing"]

# (namespace, op) -> the overloads of it torchax 0.0.13 names at import (amp.py, decompositions.py,
# ops/jaten.py): those torch 2.13 and 2.14 removed. An op torch removed whole is listed with them.
REMOVED: dict[tuple[str, str], tuple[str, ...]] = {
    ("aten", "prod"): ("dim_Dimname",),
    ("aten", "cholesky"): ("default",),
    ("aten", "qr"): ("default",),
    ("aten", "index_copy"): ("dimname",),
    ("aten", "index_copy_"): ("dimname",),
    ("aten", "index_add"): ("dimname",),
    ("aten", "all"): ("dimname", "dimname_out"),
    ("aten", "index_fill"): ("Dimname_Scalar", "Dimname_Tensor"),
    ("aten", "index_fill_"): ("Dimname_Scalar", "Dimname_Tensor"),
    ("aten", "norm"): ("names_ScalarOpt_dim", "names_ScalarOpt_dim_dtype", "names_dtype_out", "names_out"),
    ("aten", "std"): ("names_dim", "names_out", "correction_names", "correction_names_out"),
    ("aten", "std_mean"): ("names_dim", "correction_names"),
    ("aten", "unbind"): ("Dimname",),
}

# torchax's modules that name those ops but load only at first use (Environment.load_ops, the
# export): imported while the stand-ins exist.
LAZY = ("torchax.ops.jaten", "torchax.ops.jtorch", "torchax.ops.jc10d", "torchax.decompositions",
        "torchax.export")

# torch's own modules torchax imports, imported before any stand-in exists so that none of them
# sees one (torch._decomp's tables are built from the real namespace).
_TORCH_FIRST = ("torch._decomp", "torch._refs", "torch._prims", "torch.export", "torch.func",
                "torch.distributed._functional_collectives", "torch.utils._python_dispatch")

_lock = threading.Lock()


class _AbsentOp:
    """A stand-in for an op overload the running torch does not have: hashable, named as torch
    names its ops (``name()``), and refusing to run."""

    def __init__(self, qualname: str):
        self._qualname = qualname

    def name(self) -> str:
        return self._qualname

    def __repr__(self) -> str:
        return f"<absent op {self._qualname}: not in this torch>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{self._qualname} does not exist in this torch (a stand-in torchax's tables name)")


class _AbsentPacket(_AbsentOp):
    """A stand-in for an op the running torch removed whole, with its overloads."""

    def __init__(self, qualname: str, overloads: Sequence[str]):
        super().__init__(qualname)
        self._overloads = list(overloads)
        for overload in overloads:
            setattr(self, overload, _AbsentOp(f"{qualname}.{overload}"))

    def overloads(self) -> list[str]:
        return list(self._overloads)


def _has(owner: Any, name: str) -> bool:
    try:
        getattr(owner, name)
    except (AttributeError, RuntimeError):
        return False
    return True


def _absent() -> list[tuple[Any, str, _AbsentOp]]:
    """(owner, attribute, stand-in) for each name of :data:`REMOVED` the running torch lacks: a
    whole op on its namespace, or an overload on its op. Imports torch."""
    import torch

    out: list[tuple[Any, str, _AbsentOp]] = []
    for (ns, op), overloads in REMOVED.items():
        namespace = getattr(torch.ops, ns)
        if not _has(namespace, op):
            out.append((namespace, op, _AbsentPacket(f"{ns}.{op}", overloads)))
            continue
        packet = getattr(namespace, op)
        out += [(packet, o, _AbsentOp(f"{ns}.{op}.{o}")) for o in overloads if not _has(packet, o)]
    return out


def missing() -> list[str]:
    """The names of :data:`REMOVED` the running torch lacks ("aten.prod.dim_Dimname", "aten.cholesky");
    empty on a torch that has them all. Imports torch."""
    return [stand_in.name() for _, _, stand_in in _absent()]


def _install_stand_ins() -> list[tuple[Any, str]]:
    absent = _absent()
    if not absent:
        return []
    for module in _TORCH_FIRST:
        importlib.import_module(module)
    for owner, name, stand_in in absent:
        setattr(owner, name, stand_in)
    return [(owner, name) for owner, name, _ in absent]


class _Loader(importlib.abc.Loader):
    """torchax's own loader, run with the stand-ins in place."""

    def __init__(self, inner: importlib.abc.Loader):
        self._inner = inner

    def create_module(self, spec: Any) -> Any:
        return self._inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        installed = _install_stand_ins()
        try:
            self._inner.exec_module(module)
            if installed:
                sys.modules[module.__name__] = module  # as the import system has it while this runs
                for name in LAZY:
                    importlib.import_module(name)
        finally:
            for owner, name in reversed(installed):
                delattr(owner, name)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds ``torchax`` as the other finders do and hands it :class:`_Loader`; used once."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "torchax":
            return None
        with _lock:
            if self in sys.meta_path:
                sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _Loader(spec.loader)
        return spec


def install() -> None:
    """Makes the next ``import torchax`` in this process go through :class:`_Finder` (module
    docstring); nothing when torchax is already imported or the finder already waits."""
    with _lock:
        if "torchax" in sys.modules or any(isinstance(f, _Finder) for f in sys.meta_path):
            return
        sys.meta_path.insert(0, _Finder())
