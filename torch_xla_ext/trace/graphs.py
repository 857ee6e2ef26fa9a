"""What differs between two captured graphs of one code site.

A captured graph is the signature ``_compat.lazy.graph_signature`` reads from the pending graph
of a sync: its inputs and results as MLIR types, its ops in order (op, aten op, result type,
Python frames) and the small constants torch_xla compiled into it. :func:`diff` compares an
earlier graph with a later one and names, in this order:

* ``input``: an input whose type changed, by position (when both graphs have as many inputs), or
  ``inputs``: how many inputs each has and the types only one of them has (an optimizer's state
  that appeared after its first step is many more inputs of the parameters' shapes);
* ``constant``: a scalar compiled in as a constant that has another value (a Python number that
  changes from step to step);
* ``op``: the first op that differs (another op, or the same op on other shapes), with the aten
  op and the source line that created it;
* ``outputs``: how many results each has.

:func:`name_inputs` puts names on changed inputs from a look at the tensors in scope
(:mod:`~torch_xla_ext.trace.snapshot`): a tensor whose new shape and dtype is the input's.
:func:`rank_changes` orders a compile's changes so what the user can act on leads.

Example:
    >>> import dataclasses
    >>> from torch_xla_ext.trace.schema import Graph
    >>> old = Graph(k=1, graph_hash="a", args=["tensor<4x16xi64>", "tensor<8x8xf32>"], results=["tensor<f32>"],
    ...             constants=[], ops=[["stablehlo.add", "aten__add", "tensor<4x16xi64>", 0]],
    ...             frames=[[["/t/train.py", 9, "f"]]])
    >>> new = dataclasses.replace(old, k=2, args=["tensor<4x24xi64>", "tensor<8x8xf32>"],
    ...                           ops=[["stablehlo.add", "aten__add", "tensor<4x24xi64>", 0]])
    >>> [(c["what"], c.get("old"), c.get("new")) for c in diff(old, new)]
    [('input', [4, 16], [4, 24]), ('op', 'aten::add -> tensor<4x16xi64>', 'aten::add -> tensor<4x24xi64>')]
"""

from __future__ import annotations

import collections
import re
from typing import Any, Callable

from torch_xla_ext import _dtypes
from torch_xla_ext.trace.schema import Graph

__all__ = ["actionable", "diff", "name_inputs", "parse_type", "rank_changes"]

_TENSOR = re.compile(r"^tensor<(?:((?:\d+|\?)(?:x(?:\d+|\?))*)x)?([^x>][^>]*)>$")


def parse_type(t: str) -> tuple[list[int], str]:
    """``tensor<4x16xi64>`` -> ([4, 16], "int64"); a type it cannot read -> ([], the text)."""
    m = _TENSOR.match(t.strip())
    if not m:
        return [], t
    dims = [int(d) if d != "?" else -1 for d in m.group(1).split("x")] if m.group(1) else []
    row = _dtypes.by_mlir(m.group(2))
    return dims, row.name if row is not None else m.group(2)


def _aten(name: str) -> str:
    """torch_xla's location name of an op (``aten__addmm``, ``xla__device_data``) as ``aten::addmm``."""
    if "__" in name:
        ns, _, op = name.partition("__")
        return f"{ns}::{op.split('.')[0]}"
    return name


def diff(old: Graph, new: Graph, is_library: Callable[[str], bool] | None = None,
         limit: int = 6) -> list[dict[str, Any]]:
    """What differs from ``old`` to ``new`` (both captured graphs), see the module."""
    out: list[dict[str, Any]] = []
    a0, a1 = old.args, new.args
    if len(a0) == len(a1):
        changed = [(i, x, y) for i, (x, y) in enumerate(zip(a0, a1)) if x != y]
        for i, x, y in changed[:limit]:
            (s0, d0), (s1, d1) = parse_type(x), parse_type(y)
            c = {"what": "input", "index": i, "old": s0, "new": s1}
            if d0 != d1:
                c.update(old_dtype=d0, new_dtype=d1)
            else:
                c["dtype"] = d1
            out.append(c)
        if len(changed) > limit:
            out.append({"what": "more_inputs", "count": len(changed) - limit})
    else:
        c0, c1 = collections.Counter(a0), collections.Counter(a1)
        added, removed = c1 - c0, c0 - c1
        out.append({"what": "inputs", "old": len(a0), "new": len(a1),
                    "added": _types(added, limit), "removed": _types(removed, limit)})
    out.extend(_constants(old, new, is_library, limit))
    op = _first_op(old, new, is_library)
    if op is not None:
        out.append(op)
    if len(old.results) != len(new.results):
        out.append({"what": "outputs", "old": len(old.results), "new": len(new.results)})
    return out


def _types(counter: "collections.Counter[str]", limit: int) -> list[dict[str, Any]]:
    rows = []
    for t, n in counter.most_common(limit):
        shape, dtype = parse_type(t)
        rows.append({"shape": shape, "dtype": dtype, "count": n})
    return rows


def _site(sig: Graph, frames_id: int, is_library: Callable[[str], bool] | None) -> str:
    frames = sig.frames[frames_id] if 0 <= frames_id < len(sig.frames) else []
    if not frames:
        return ""
    pick = next((f for f in frames if is_library is None or not is_library(f[0])), frames[0])
    return f"{pick[0]}:{pick[1]}"


def _constants(old: Graph, new: Graph, is_library: Any, limit: int) -> list[dict[str, Any]]:
    """Scalars compiled in whose value changed, or that became inputs (or constants): torch_xla
    compiles a Python number in when it is special (0 or 1) and passes it as an input otherwise,
    so a learning rate warming up from 0 is a constant at first and an input later."""
    def keyed(sig: Graph) -> dict[tuple[str, str], list[Any]]:
        out: dict[tuple[str, str], list[Any]] = {}
        for index, _rtype, value in sig.constants:
            op = sig.ops[index] if index < len(sig.ops) else ["", "", "", -1]
            if op[1]:  # constants torch_xla made for an aten op (not XLA's own broadcasts)
                out.setdefault((_aten(op[1]), _site(sig, op[3], is_library)), []).append(value)
        return out

    def op_keys(sig: Graph) -> set[tuple[str, str]]:
        return {(_aten(op[1]), _site(sig, op[3], is_library)) for op in sig.ops if op[1]}

    k0, k1 = keyed(old), keyed(new)
    both = op_keys(old) & op_keys(new)  # a constant of an op only one graph has is a change of ops, not of a number
    rows = []
    for key in list(k1) + [k for k in k0 if k not in k1]:
        v0, v1 = k0.get(key), k1.get(key)
        if v0 == v1 or key not in both:
            continue
        row = {"what": "constant", "op": key[0], "site": key[1]}
        if v0 is None:
            row.update(old="(an input)", new=v1[0])
        elif v1 is None:
            row.update(old=v0[0], new="(an input)")
        else:
            diff = [(a, b) for a, b in zip(v0, v1) if a != b]
            if not diff and len(v0) == len(v1):
                continue
            a, b = diff[0] if diff else (v0, v1)
            row.update(old=a, new=b)
        rows.append(row)
    return rows[:limit]


def _first_op(old: Graph, new: Graph, is_library: Any) -> dict[str, Any] | None:
    o0, o1 = old.ops, new.ops
    for i in range(max(len(o0), len(o1))):
        x = o0[i] if i < len(o0) else None
        y = o1[i] if i < len(o1) else None
        if x is not None and y is not None and x[:3] == y[:3]:
            continue

        def text(op: list[Any] | None) -> str:
            if op is None:
                return "(graph ends)"
            return f"{_aten(op[1]) if op[1] else op[0]} -> {op[2]}"

        row: dict[str, Any] = {"what": "op", "index": i, "old": text(x), "new": text(y)}
        if x is not None and y is not None and x[:2] == y[:2]:
            row["same_op_other_type"] = True
        for label, sig, op in (("old_site", old, x), ("new_site", new, y)):
            if op is not None:
                row[label] = _site(sig, op[3], is_library)
        if not row.get("new_site"):
            # Ops made where no Python frame was recorded (autograd's backward, C++ decompositions):
            # also name the first differing op that has a source line.
            for j in range(i + 1, min(len(o0), len(o1))):
                if o0[j][:3] != o1[j][:3] and _site(new, o1[j][3], is_library):
                    row["first_with_source"] = {"index": j, "op": text(o1[j]), "site": _site(new, o1[j][3], is_library)}
                    break
        return row
    return None


def name_inputs(changes: list[dict[str, Any]], look: dict[str, list[Any]]) -> None:
    """Adds ``names`` (and ``role``) to each changed input, from the tensors in scope whose shape
    and dtype are the input's new ones (in place); a ``local`` tensor found that way is an input:
    its role becomes ``user_input`` in ``look``."""
    by_type: dict[tuple[tuple[int, ...], str], list[str]] = {}
    for name, (role, dtype, shape) in look.items():
        if shape:  # a 0-d input (a scalar) matches too many tensors to be named by its shape
            by_type.setdefault((tuple(shape), dtype), []).append(name)
    for c in changes:
        if c["what"] == "input":
            key = (tuple(c["new"]), c.get("new_dtype", c.get("dtype", "")))
            names = by_type.get(key, [])
        elif c["what"] == "inputs":
            # New inputs of the shapes of an optimizer's state are that state (created at its first step).
            state: dict[tuple[tuple[int, ...], str], list[str]] = {}
            for name, (role, dtype, shape) in look.items():
                if role == "optimizer_state":
                    state.setdefault((tuple(shape), dtype), []).append(name)
            if c["added"] and all(len(state.get((tuple(a["shape"]), a["dtype"]), [])) >= a["count"] for a in c["added"]):
                c["names"] = [n for a in c["added"] for n in state[(tuple(a["shape"]), a["dtype"])][:a["count"]]][:6]
                c["role"] = "optimizer_state"
                continue
            names = [n for a in c["added"] for n in by_type.get((tuple(a["shape"]), a["dtype"]), [])]
        else:
            continue
        if names:
            roles = collections.Counter(look[n][0] for n in names)
            c["names"] = names[:6]
            c["role"] = roles.most_common(1)[0][0]
            for n in names:
                if look[n][0] == "local":
                    look[n][0] = "user_input"
            if c["role"] == "local":
                c["role"] = "user_input"


# The order in which changes lead a compile's "what changed": what a user changes in their code
# first (the guard Dynamo says failed, an input's shape, a tensor in scope), then what the graph
# shows (a number compiled in, the first differing op), then what follows from those.
_ORDER = {w: i for i, w in enumerate((
    "guard", "input", "inputs", "more_inputs", "tensor_shape", "tensor_dtype", "constant", "op", "outputs",
    "tensor_appeared", "tensor_gone", "tensor_more", "same_graph", "not_captured"))}


def actionable(change: dict[str, Any], is_library: Callable[[str], bool]) -> bool:
    """False for a change the user cannot act on: a constant or op of the graph with no source
    line in code outside torch, torch_xla and the standard library (a constant XLA made while
    lowering a broadcast, an op of autograd's backward), which follows from another change."""
    if change.get("what") == "constant":
        site = str(change.get("site") or "")
    elif change.get("what") == "op":
        site = str(change.get("new_site") or change.get("old_site") or (change.get("first_with_source") or {}).get("site")
                   or "")
    else:
        return True
    file = site.rpartition(":")[0]
    return bool(file) and not is_library(file)


def rank_changes(changes: list[dict[str, Any]], is_library: Callable[[str], bool]) -> list[dict[str, Any]]:
    """``changes`` with what the user can act on first (in the order above), then what they
    cannot (:func:`actionable`), each group in its order; nothing is dropped.

    Example:
        >>> noise = {"what": "constant", "op": "aten::expand", "site": "", "old": [0.0, 0.0], "new": [0.0]}
        >>> shape = {"what": "input", "index": 0, "old": [4, 16], "new": [4, 24]}
        >>> [c["what"] for c in rank_changes([noise, shape], lambda f: False)]
        ['input', 'constant']
    """
    return sorted(changes, key=lambda c: (not actionable(c, is_library), _ORDER.get(c.get("what", ""), len(_ORDER))))
