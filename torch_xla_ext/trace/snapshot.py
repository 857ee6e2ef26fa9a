"""The XLA tensors a step can see, by name and role, and what changed between two looks.

When a graph compiles, the recorder looks at the frames of the code that triggered it (the user's
loop and its callers, up to the module) and names every XLA tensor it finds there, with the role
torch.export's input kinds use: ``parameter`` and ``buffer`` (of an ``nn.Module`` found there,
named by ``named_parameters()``), ``gradient`` (a parameter's ``.grad``), ``optimizer_state`` (a
``torch.optim.Optimizer``'s state, named by the parameter it belongs to) and ``local`` (a local or
global tensor, or one inside a dict, list or tuple there: ``batch["input_ids"]``; it becomes a
``user_input`` where a captured graph has an input of its shape). Only
shapes and dtypes are kept. :func:`diff` of two looks at the same code site says which tensors
changed shape or dtype, and which appeared or went away (an optimizer's state after its first
step).

Example:
    >>> old = {"ids": ["local", "int64", [4, 16]], "w": ["parameter", "float32", [8, 8]]}
    >>> new = {"ids": ["local", "int64", [4, 24]], "w": ["parameter", "float32", [8, 8]]}
    >>> diff(old, new)
    [{'what': 'shape', 'role': 'local', 'name': 'ids', 'old': [4, 16], 'new': [4, 24], 'dtype': 'int64'}]
"""

from __future__ import annotations

from typing import Any

__all__ = ["diff", "named_tensors", "summarize_groups"]

# A tensor found in a frame is "local" until the captured graph shows it among the graph's inputs
# ("user_input", set by graphs.name_inputs): a local may also be an output or an intermediate.
ROLES = ("parameter", "buffer", "gradient", "optimizer_state", "user_input", "local")
_PRIORITY = {r: i for i, r in enumerate(ROLES)}
_MAX_TENSORS = 20000
# What listing a user's module's parameters or an optimizer's state raises while they are being
# built or torn down (a lazy module, a state dict mid-update).
_CANNOT_LIST = (AttributeError, KeyError, NotImplementedError, RuntimeError, TypeError)


def named_tensors(frame: Any, is_library: Any, max_frames: int = 16) -> dict[str, list[Any]]:
    """name -> [role, dtype, shape] of the XLA tensors the frames from ``frame`` outwards can see
    (frames that ``is_library(file)`` are passed over)."""
    import torch

    found: dict[int, tuple[str, str, Any]] = {}  # id(tensor) -> (role, name, tensor)
    modules: list[tuple[str, Any]] = []
    optimizers: list[tuple[str, Any]] = []
    seen_objects: set[int] = set()

    def tensor(t: Any, role: str, name: str) -> None:
        if len(found) >= _MAX_TENSORS or not isinstance(t, torch.Tensor):
            return
        try:
            if t.device.type != "xla":
                return
        except (AttributeError, NotImplementedError, RuntimeError, TypeError):  # a tensor subclass that cannot say
            return
        prev = found.get(id(t))
        if prev is None or _PRIORITY[role] < _PRIORITY[prev[0]]:
            found[id(t)] = (role, name, t)

    def value(v: Any, name: str, depth: int) -> None:
        if isinstance(v, torch.Tensor):
            tensor(v, "local", name)
        elif isinstance(v, torch.nn.Module):
            if id(v) not in seen_objects:
                seen_objects.add(id(v))
                modules.append((name, v))
        elif isinstance(v, torch.optim.Optimizer):
            if id(v) not in seen_objects:
                seen_objects.add(id(v))
                optimizers.append((name, v))
        elif depth < 2 and _is_mapping(v):
            for i, (k, item) in enumerate(v.items()):
                if i >= 64:
                    break
                value(item, f"{name}[{k!r}]", depth + 1)
        elif depth < 2 and isinstance(v, (list, tuple)):
            for i, item in enumerate(v[:64]):
                value(item, f"{name}[{i}]", depth + 1)

    f, n = frame, 0
    while f is not None and n < max_frames:
        if not is_library(f.f_code.co_filename):
            n += 1
            items = f.f_locals.items() if f.f_code.co_name != "<module>" else f.f_globals.items()
            for k, v in list(items):
                if not k.startswith("__"):
                    value(v, str(k), 0)
        f = f.f_back

    param_names: dict[int, str] = {}
    for mname, m in modules:
        try:
            for pname, p in m.named_parameters():
                param_names.setdefault(id(p), f"{mname}.{pname}")
                tensor(p, "parameter", f"{mname}.{pname}")
                if p.grad is not None:
                    tensor(p.grad, "gradient", f"{mname}.{pname}.grad")
            for bname, b in m.named_buffers():
                tensor(b, "buffer", f"{mname}.{bname}")
        except _CANNOT_LIST:  # a module whose parameters cannot be listed now (anything else: the caller records it)
            continue
    for oname, opt in optimizers:
        try:
            for gi, group in enumerate(opt.param_groups):
                for pi, p in enumerate(group["params"]):
                    pname = param_names.get(id(p), f"param_groups[{gi}][{pi}]")
                    for key, s in opt.state.get(p, {}).items():
                        tensor(s, "optimizer_state", f"{oname}.state[{pname}].{key}")
        except _CANNOT_LIST:  # an optimizer whose state cannot be listed now
            continue
    out: dict[str, list[Any]] = {}
    for role, name, t in found.values():
        out[name] = [role, str(t.dtype).removeprefix("torch."), list(t.shape)]
    return out


def _is_mapping(v: Any) -> bool:
    from collections.abc import Mapping

    return isinstance(v, Mapping)


def diff(old: dict[str, list[Any]], new: dict[str, list[Any]], limit: int = 8) -> list[dict[str, Any]]:
    """What changed between two looks: tensors whose shape or dtype changed (``what`` shape /
    dtype, with ``old`` and ``new``), then groups that appeared or went away (``what`` appeared /
    gone: a role, how many, a few names). At most ``limit`` changed tensors are listed one by one."""
    out: list[dict[str, Any]] = []
    for name in new:
        if name in old:
            (r0, d0, s0), (r1, d1, s1) = old[name], new[name]
            if d0 != d1:
                out.append({"what": "dtype", "role": r1, "name": name, "old": d0, "new": d1, "shape": s1})
            elif s0 != s1:
                out.append({"what": "shape", "role": r1, "name": name, "old": s0, "new": s1, "dtype": d1})
    out.sort(key=lambda c: (-1 if c["role"] in ("user_input", "local") else _PRIORITY.get(c["role"], 9), c["name"]))
    if len(out) > limit:
        out = out[:limit] + [{"what": "more", "count": len(out) - limit}]
    for what, names in (("appeared", [n for n in new if n not in old]), ("gone", [n for n in old if n not in new])):
        src = new if what == "appeared" else old
        for role, members in summarize_groups(names, src).items():
            out.append({"what": what, "role": role, "count": len(members), "names": members[:4]})
    return out


def summarize_groups(names: list[str], look: dict[str, list[Any]]) -> dict[str, list[str]]:
    """names grouped by role, in role order."""
    groups: dict[str, list[str]] = {}
    for n in names:
        groups.setdefault(look[n][0], []).append(n)
    return {r: groups[r] for r in sorted(groups, key=lambda r: _PRIORITY.get(r, 9))}
