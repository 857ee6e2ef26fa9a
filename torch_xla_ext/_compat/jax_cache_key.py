"""What JAX's tracing cache keys a call of a jitted function on (jax 0.7.1 to 0.12): the pytree of
``(args, kwargs)``, each leaf named by its path the way JAX's ``jax_explain_cache_misses`` names it
(``args[2]``, ``kwargs['position_ids']``, ``args[0]['lm_head.weight']``, ``args[2].hyperparams``:
``jax.tree_util.keystr``), each leaf's abstract value (``jax.typeof``: shape, dtype, weak type),
and the static arguments by value. Public APIs only.

A leaf is ``[name, dtype, shape, weak]`` (an array: ``["args[2]", "i32", [1, 8], False]``) or
``[name, "static", text]`` (a static argument, or a leaf JAX cannot type, by its ``repr``): plain
JSON, so the signature goes into a rank file as it is.

Example:
    >>> import numpy as np
    >>> signature((np.zeros((2, 3), np.float32), 1.5), {"mode": "mul"}, static_argnames=("mode",))
    [["kwargs['mode']", 'static', "'mul'"], ['args[0]', 'f32', [2, 3], False], ['args[1]', 'f32', [], True]]
"""

from __future__ import annotations

from typing import Any, Sequence

from torch_xla_ext._compat.jax_monitoring import short_dtype

__all__ = ["STATIC", "signature", "type_text"]

STATIC = "static"
_REPR = 80  # characters of a static value's repr kept


def signature(args: Sequence[Any], kwargs: dict[str, Any], static_argnums: Sequence[int] = (),
              static_argnames: Sequence[str] = ()) -> list[list[Any]]:
    """The leaves of a call as JAX keys its cache (see the module): static arguments first, then
    every leaf of the dynamic ones in JAX's flattening order."""
    import jax

    out: list[list[Any]] = []
    for i in static_argnums:
        if i < len(args):
            out.append([f"args[{i}]", STATIC, repr(args[i])[:_REPR]])
    for n in static_argnames:
        if n in kwargs:
            out.append([f"kwargs['{n}']", STATIC, repr(kwargs[n])[:_REPR]])
    dynamic = (tuple(None if i in static_argnums else a for i, a in enumerate(args)),
               {n: v for n, v in kwargs.items() if n not in static_argnames})
    leaves, _ = jax.tree_util.tree_flatten_with_path(dynamic)
    for path, leaf in leaves:
        name = ("args" if path[0].idx == 0 else "kwargs") + jax.tree_util.keystr(tuple(path[1:]))
        try:
            t = jax.typeof(leaf)
        except TypeError:
            out.append([name, STATIC, repr(leaf)[:_REPR]])
            continue
        out.append([name, short_dtype(str(t.dtype)), [int(d) for d in t.shape], bool(getattr(t, "weak_type", False))])
    return out


def type_text(leaf: Sequence[Any], weak: bool = False) -> str:
    """A leaf's type as JAX's explanation prints it: ``i32[2,8]``; with ``weak``, its weak type too
    (``f32[]{weak_type=True}``); a static value as its repr."""
    if leaf[1] == STATIC:
        return str(leaf[2])
    text = f"{leaf[1]}[{','.join(str(d) for d in leaf[2])}]"
    return text + (f"{{weak_type={leaf[3]}}}" if weak else "")
