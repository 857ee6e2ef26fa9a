"""torch's storage reference count (``torch._C._storage_Use_Count``), in one place.

Example:
    >>> import torch
    >>> from torch_xla_ext._compat import storage
    >>> t = torch.zeros(4)
    >>> storage.sole_holder(t)
    True
    >>> view = t[1:]
    >>> storage.sole_holder(t)
    False
"""

from __future__ import annotations

from typing import Any

__all__ = ["sole_holder"]


def sole_holder(t: Any) -> bool:
    """Whether ``t`` is the only tensor on its storage (no view of it, no other tensor sharing
    it), so its memory may be written over once ``t`` itself is no longer read. False where this
    torch does not say."""
    import torch

    use_count = getattr(torch._C, "_storage_Use_Count", None)
    if use_count is None:
        return False
    storage = t.untyped_storage()
    # The Python storage object made here holds one reference of its own.
    return use_count(storage._cdata) == 2
