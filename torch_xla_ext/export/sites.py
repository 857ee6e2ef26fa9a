"""Where in the model's code: the nn.Module path and the source line of an error (from its
traceback's frames) or of a torch.export node (from its own ``nn_module_stack`` and
``stack_trace``), for the refusals of every exporter.

Example:
    >>> import torch
    >>> class Net(torch.nn.Module):
    ...     def forward(self, x):
    ...         return x.relu()
    >>> ep = torch.export.export(Net(), (torch.ones(2),))
    >>> node = next(n for n in ep.graph.nodes if n.op == "call_function")
    >>> site = node_site(node)
    >>> site["op"], site["source_line"]
    ('aten.relu.default', 'return x.relu()')
"""

from __future__ import annotations

import importlib.util
import os
import re
import sysconfig
from typing import Any, Sequence

__all__ = ["chain", "guard_site", "module_paths", "node_site", "site_fields", "site_of", "where"]

# The libraries whose frames are never "the model's code" (those installed): the model runs
# through them.
_LIBRARIES = ("torch", "torch_xla", "torchax", "jax")


def _library_dirs() -> tuple[str, ...]:
    """Directories whose frames are never "the model's code": torch, torch_xla and torchax (where
    installed), this package and the standard library."""
    dirs = [os.path.dirname(os.path.dirname(os.path.abspath(__file__))), sysconfig.get_paths()["stdlib"]]
    for name in _LIBRARIES:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            dirs.append(os.path.dirname(spec.origin))
    return tuple(os.path.realpath(d) + os.sep for d in dirs)


def site_of(frames: Sequence[Any], module_paths: dict[int, str]) -> dict[str, str | None]:
    """{"module_path", "module_type", "source", "source_line"} of a stack given innermost frame
    first: the innermost frame outside torch/torch_xla/torchax/the stdlib is the source line; the
    innermost frame whose `self` is a submodule of the model (by identity) gives the module path."""
    import linecache

    libs = _library_dirs()
    out: dict[str, str | None] = {"module_path": None, "module_type": None, "source": None, "source_line": None}
    for frame, lineno in frames:
        filename = frame.f_code.co_filename
        if out["source"] is None and not os.path.realpath(filename).startswith(libs) and not filename.startswith("<"):
            out["source"] = f"{filename}:{lineno}"
            out["source_line"] = linecache.getline(filename, lineno).strip() or None
        owner = frame.f_locals.get("self") if out["module_path"] is None else None
        if owner is not None and id(owner) in module_paths:
            out["module_path"] = module_paths[id(owner)]
            out["module_type"] = type(owner).__name__
        if out["source"] is not None and out["module_path"] is not None:
            break
    return out


def module_paths(model: Any) -> dict[int, str]:
    """{id(submodule): its path} of an nn.Module ({} for anything else)."""
    import torch

    if not isinstance(model, torch.nn.Module):
        return {}
    return {id(m): name for name, m in model.named_modules(remove_duplicate=False)}


def traceback_frames(error: BaseException) -> list[tuple[Any, int]]:
    """(frame, line) of an exception's traceback, innermost first."""
    tb, frames = error.__traceback__, []
    while tb is not None:
        frames.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    return frames[::-1]


def chain(error: BaseException) -> list[BaseException]:
    """The error and its explicit causes (`raise ... from`); not `__context__`, which can be any
    exception that was being handled somewhere up the stack."""
    seen, out, e = set(), [], error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        out.append(e)
        e = e.__cause__
    return out


def guard_site(error: BaseException, model: Any) -> dict[str, str | None]:
    """Where an error (torch.export's) was raised in the model's code (the innermost exception of
    the chain whose traceback passes through it)."""
    paths = module_paths(model)
    best = {"module_path": None, "module_type": None, "source": None, "source_line": None}
    for e in chain(error):
        site = site_of(traceback_frames(e), paths)
        if site["source"] is not None and (best["source"] is None or site["module_path"] is not None):
            best = site
    return best


_FRAME = re.compile(r'File "([^"]+)", line (\d+)[^\n]*\n\s*(.*)')


def node_site(node: Any) -> dict[str, str | None]:
    """{"op", "module_path", "module_type", "source", "source_line"} of a torch.export node, from
    its own metadata: the innermost nn.Module of ``nn_module_stack``, the innermost frame of
    ``stack_trace`` (the line of the model's code that called the op)."""
    site: dict[str, str | None] = {"module_path": None, "module_type": None, "source": None, "source_line": None,
                                   "op": str(node.target)}
    stack = node.meta.get("nn_module_stack") or {}
    if stack:
        path, kind = list(stack.values())[-1]
        site["module_path"], site["module_type"] = path, str(getattr(kind, "__name__", kind)).rsplit(".", 1)[-1]
    frames = _FRAME.findall(node.meta.get("stack_trace") or "")
    if frames:
        f, line, code = frames[-1]
        site["source"], site["source_line"] = f"{f}:{line}", code.strip() or None
    return site


def where(site: dict[str, str | None]) -> str:
    """"block.attn (Attention) at model.py:12 `y = x @ w`": a site in words ("" when unknown)."""
    parts = []
    if site.get("module_path") is not None:
        parts.append(f"{site['module_path'] or '(root)'} ({site['module_type']})")
    if site.get("source"):
        parts.append(f"at {site['source']}" + (f" `{site['source_line']}`" if site.get("source_line") else ""))
    return " ".join(parts)


def site_fields(site: dict[str, str | None]) -> dict[str, Any]:
    """The keyword arguments of ExportLoweringError that say where."""
    return {"module_path": site.get("module_path"), "source": site.get("source"),
            "source_line": site.get("source_line")}
