"""What a refused export must say, checked against independent oracles: torch.export's own error
(the file and line it reports for the failing call), the model's module tree and the guarding
module's source (inspect), and torch_xla's own metrics for the lazy trace's host round trips."""

from __future__ import annotations

import inspect
import re

import pytest
import torch
import torch_xla
import torch_xla.debug.metrics as met

from torch_xla_ext import errors, export


def torch_export_call_site(model, args, kwargs) -> tuple[str, int]:
    """(file, line) of the call torch.export's own message says raised its error."""
    with pytest.raises(Exception) as info:
        torch.export.export(model, args, kwargs)
    m = re.search(r'The following call raised this error:\s+File "([^"]+)", line (\d+)', str(info.value))
    assert m, f"torch.export's message names no call: {str(info.value)[:500]}"
    return m.group(1), int(m.group(2))


def lazy_host_fallbacks(module, args, kwargs) -> dict[str, int]:
    """torch_xla's counters of ops it ran on the host (aten::*) during one lazy forward pass of
    `module` (moved to the device and back)."""
    device = torch_xla.device()
    module.to(device)
    xargs = tuple(a.to(device) if isinstance(a, torch.Tensor) else a for a in args)
    xkwargs = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    torch_xla.sync()
    before = {n: met.counter_value(n) or 0 for n in met.counter_names() if n.startswith("aten::")}
    with torch.no_grad():
        module(*xargs, **xkwargs)
    torch_xla.sync()
    after = {n: met.counter_value(n) or 0 for n in met.counter_names() if n.startswith("aten::")}
    module.to("cpu")
    return {n: v - before.get(n, 0) for n, v in after.items() if v - before.get(n, 0) > 0}


def inputs_of(model, args, kwargs, module) -> tuple[tuple, dict]:
    """The arguments `module` receives in an eager CPU forward pass of `model`."""
    seen = []
    handle = module.register_forward_pre_hook(lambda m, a, kw: seen.append((a, kw)) if not seen else None,
                                              with_kwargs=True)
    try:
        with torch.no_grad():
            model(*args, **kwargs)
    finally:
        handle.remove()
    return seen[0]


def check_refused(model, args, kwargs, guarding_type: str, torch_export_fails: bool = True):
    """`torch_export_fails`: torch.export raises on the model (its message names the call); else
    it makes a program with a data-dependent value, which torch_xla's exporter cannot lower."""
    if torch_export_fails:
        file, line = torch_export_call_site(model, args, kwargs)
    with pytest.raises(export.ExportLoweringError) as info:
        export.export(model, args, kwargs)
    e = info.value
    assert isinstance(e, errors.TorchXlaExtError) and isinstance(e, NotImplementedError)
    if torch_export_fails:  # where: torch.export's own call site
        assert e.source == f"{file}:{line}", (e.source, file, line)
    else:
        file, line = e.source.rsplit(":", 1)[0], int(e.source.rsplit(":", 1)[1])
    # inside the forward of the module the path names
    sub = model.get_submodule(e.module_path)
    assert type(sub).__name__ == guarding_type
    lines, first = inspect.getsourcelines(type(sub).forward)
    assert first <= line < first + len(lines)
    assert e.source_line == lines[line - first].strip()
    assert e.module_path in str(e) and f"{file}:{line}" in str(e)
    # torch_xla's lazy trace is cut too: the guarding module alone, on its real inputs, makes
    # torch_xla run ops on the host (its own counters); every cut we name is such an op
    host_ops = lazy_host_fallbacks(sub, *inputs_of(model, args, kwargs, sub))
    assert host_ops, "torch_xla ran the forward as one graph; the refusal would be wrong"
    named = {c["op"].split(".")[1] for c in e.cuts if c["module_path"] == e.module_path}
    assert named and named <= {n.split("::")[1] for n in host_ops}, (named, host_ops)
    assert all(c["count"] >= 1 and c["source"] for c in e.cuts)
    return e
