"""What differs between two calls of a jitted function, as JAX's tracing cache sees them: their
signatures (``_compat.jax_cache_key``: each leaf's path and abstract value, static values) and the
changes between them, in JAX's names (``args[2]``, ``kwargs``) and JAX's spelling of types
(``i32[2,8]``, ``f32[]{weak_type=True}``), which :mod:`.functions` then names in torch's terms.

The nearest earlier signature is JAX 0.7's measure of its closest cache key: a different pytree
counts its leaves that appeared or went away; otherwise each differing leaf counts the
difference of its shape lists plus its weak type (at least 1); the latest wins a tie.

Example:
    >>> old = [["args[2]", "i32", [1, 8], False]]
    >>> new = [["args[2]", "i32", [2, 8], False]]
    >>> diff(new, old)
    (1, [{'what': 'input', 'jax_name': 'args[2]', 'before': 'i32[1,8]', 'now': 'i32[2,8]', 'old': [1, 8], 'new': [2, 8], 'old_dtype': 'i32', 'new_dtype': 'i32', 'weak_type': False}])
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Sequence

from torch_xla_ext._compat.jax_cache_key import STATIC, type_text

__all__ = ["diff", "digest", "nearest"]

Signature = Sequence[Sequence[Any]]

# "args[2]['w']" -> ("args[2]", "['w']"); "args[2].hyperparams" -> ("args[2]", ".hyperparams")
_LAST_KEY = re.compile(r"^(.*?)(\[[^\]]*\]|\.[A-Za-z_]\w*)$")


def digest(sig: Signature, function: str = "") -> str:
    """A short digest of a function's signature: equal in two processes exactly when JAX keys the
    two calls alike (the same compiled program)."""
    return hashlib.sha1(repr((function, [list(x) for x in sig])).encode()).hexdigest()[:12]


def _list_distance(a: Sequence[Any], b: Sequence[Any]) -> int:
    n = min(len(a), len(b))
    return max(len(a), len(b)) - n + sum(x != y for x, y in zip(a[:n], b[:n]))


def diff(new: Signature, old: Signature) -> tuple[int, list[dict[str, Any]]]:
    """(how far apart, the changes) from ``old`` to ``new``. A change is ``what``: ``structure``
    (a container whose keys changed: ``added``, ``removed``), ``static`` (a static value:
    ``before``, ``now``) or ``input`` (a leaf's shape, dtype or weak type: ``before``/``now`` in
    JAX's text, ``old``/``new`` shapes, dtypes, ``weak_type`` when that differs), each with its
    ``jax_name``."""
    names_new, names_old = [x[0] for x in new], [x[0] for x in old]
    if names_new != names_old:
        groups: dict[str, dict[str, Any]] = {}
        for mine, other, key in ((names_new, set(names_old), "added"), (names_old, set(names_new), "removed")):
            for name in mine:
                if name in other:
                    continue
                m = _LAST_KEY.match(name)
                container, leaf = (m.group(1), m.group(2)) if m else (name, "")
                g = groups.setdefault(container, {"what": "structure", "jax_name": container, "added": [], "removed": []})
                g[key].append(leaf.strip("[]'.") if leaf else name)
        changes = list(groups.values())
        return max(1, sum(len(c["added"]) + len(c["removed"]) for c in changes)), changes
    size, changes = 0, []
    for a, b in zip(new, old):
        if list(a) == list(b):
            continue
        name = a[0]
        if a[1] == STATIC or b[1] == STATIC:
            changes.append({"what": "static", "jax_name": name, "before": type_text(b), "now": type_text(a)})
            size += 1
            continue
        weak = a[3] != b[3]
        this = _list_distance(a[2], b[2]) + int(weak)
        changes.append({"what": "input", "jax_name": name, "before": type_text(b, weak), "now": type_text(a, weak),
                        "old": list(b[2]), "new": list(a[2]), "old_dtype": b[1], "new_dtype": a[1], "weak_type": weak})
        size += max(1, this)
    return size, changes


def nearest(sig: Signature, history: Sequence[tuple[int, int, Signature]]) -> tuple[int, int, list[dict[str, Any]]]:
    """(k, call, changes) of the earlier signature nearest to ``sig`` among ``history`` ((k, call,
    signature), oldest first; not empty): JAX 0.7's closest key, the latest on a tie."""
    if not history:
        raise ValueError("nearest: no earlier signature to compare with")
    best: tuple[int, int, int, list[dict[str, Any]]] | None = None
    for k, call, old in history:
        size, changes = diff(sig, old)
        if best is None or size <= best[0]:
            best = (size, k, call, changes)
    _, k, call, changes = best  # type: ignore[misc]  # history is not empty
    return k, call, changes
