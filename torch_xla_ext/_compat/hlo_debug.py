"""torch_xla's IR debug metadata (private `_XLAC` entry points), in one place: the switch that makes
IR nodes record the Python frames that created them (:func:`set_ir_debug`, read by the script
trace's graph capture), and module paths in the HLO op metadata (parity's localisation).

torch_xla writes each HLO instruction's ``OpMetadata`` (``op_type``, ``op_name``, source line)
only when ``XLA_HLO_DEBUG=1`` was in the environment when the process first lowered a graph (it
reads the variable once). The ``op_name`` is the IR node's custom prefix (set with
``_set_xla_custom_op_name_prefix``) followed by its op type, so :func:`module_scopes` labels the
output of every aten op run inside a module's forward with that module's ``named_modules()``
path; :func:`split_metadata` reads the labels back per instruction and returns the proto without
metadata (with it, jaxlib's HLO->StableHLO import names each op's location after its op_name and
the HLO instruction names are lost).

Measured on torch_xla 2.9: with IR debugging on (``XLA_HLO_DEBUG`` turns it on), a node torch_xla
creates under its own IR scope (the scalar ``aten::add``/``aten::mul``: ``aten__add.1/aten__add``)
takes the scope instead of our prefix, so :func:`module_scopes` turns IR debugging off while the
forward runs (nodes then carry no Python frames either; the metadata is still written at lowering);
a node the IR cache shares between modules (a scalar constant) keeps the last label; a stack depth
of 0 crashes lowering (``basic_string::_M_create``), so the prefix asks for one frame.
"""

from __future__ import annotations

import contextlib
import os
import re
from typing import Any, Iterator

ENV = "XLA_HLO_DEBUG"
NEEDS = "module path needs XLA_HLO_DEBUG=1 set before torch_xla is imported"
NO_MODULE = "no op carries a module path: fn is not an nn.Module (module paths come from its named_modules())"
_BEGIN, _END = "<txe.module>", "</txe.module>"
_LABEL = re.compile(re.escape(_BEGIN) + r"(.*?)" + re.escape(_END))
# One instruction of HloModule.to_string(): "%name = type op(...), ..., metadata={... op_name="..." ...}".
_INSTRUCTION = re.compile(r'^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=.*?metadata=\{[^}]*?op_name="((?:[^"\\]|\\.)*)"')


def set_ir_debug(on: bool) -> None:
    """IR nodes created from now on record the Python frames that created them (or stop). It does
    not change graph hashes (``XLA_HLO_DEBUG`` does, even set to 0)."""
    import torch_xla

    torch_xla._XLAC._set_ir_debug(bool(on))


def ir_debug() -> bool:
    """Whether IR nodes record their Python frames now."""
    import torch_xla

    return bool(torch_xla._XLAC._get_ir_debug())


def requested() -> bool:
    """Whether the environment asks torch_xla for op metadata (it only counts if it was set before
    the process first lowered a graph; :func:`split_metadata` tells whether it took)."""
    return os.environ.get(ENV, "").strip().lower() in ("1", "true", "yes", "on")


def enable_for_process() -> None:
    """Sets ``XLA_HLO_DEBUG=1`` unless the user set it: for our CLI, before torch_xla is imported."""
    os.environ.setdefault(ENV, "1")


@contextlib.contextmanager
def module_scopes(model: Any) -> Iterator[None]:
    """While active, every XLA tensor an aten op returns inside the forward of a submodule of
    ``model`` (an ``nn.Module``; anything else: no labels) carries that innermost module's dotted
    ``named_modules()`` path ("" for ``model`` itself) as its IR node's op-name prefix."""
    import torch
    from torch.utils import _pytree
    from torch.utils._python_dispatch import TorchDispatchMode
    import torch_xla

    if not isinstance(model, torch.nn.Module) or not requested():
        yield
        return
    stack: list[str] = []

    class _Label(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if stack:
                prefix = f"{_BEGIN}{stack[-1]}{_END}"
                for t in _pytree.tree_leaves(out):
                    if isinstance(t, torch.Tensor) and t.device.type == "xla":
                        try:
                            torch_xla._XLAC._set_xla_custom_op_name_prefix(t, prefix, 1)
                        except RuntimeError:  # not an XLA tensor underneath (scan's functional tracing)
                            pass
            return out

    def enter(path: str):
        def hook(_module, _args):
            stack.append(path)
        return hook

    def leave(_module, _args, _out):
        if stack:
            stack.pop()

    handles = []
    was_on = ir_debug()
    try:
        for path, module in model.named_modules():
            handles.append(module.register_forward_pre_hook(enter(path)))
            handles.append(module.register_forward_hook(leave, always_call=True))
        # IR debugging (on with XLA_HLO_DEBUG) gives nodes made under torch_xla's own IR scope
        # (the scalar aten::add/mul, e.g. every residual add) that scope as op_name prefix in place
        # of our label; off while the nodes are made, they keep the label. The op metadata itself
        # only needs XLA_HLO_DEBUG at lowering.
        set_ir_debug(False)
        with _Label():
            yield
    finally:
        set_ir_debug(was_on)
        for h in handles:
            h.remove()


def split_metadata(proto: bytes) -> tuple[bytes, dict[str, str] | None]:
    """``proto`` (an HloModuleProto) without op metadata, and each instruction's module path from
    :func:`module_scopes`' labels (instruction name -> path; instructions without a label are
    left out). The paths are None when the proto has no op metadata at all (``XLA_HLO_DEBUG`` was
    not on when the process first lowered); then ``proto`` is returned as it is."""
    from jax._src.lib import _jax

    if not requested():  # torch_xla wrote no metadata; skip printing the module to find out
        return proto, None
    module = _jax.HloModule.from_serialized_hlo_module_proto(proto)
    with_meta = _jax.HloPrintOptions.short_parsable()
    with_meta.print_metadata = True
    paths: dict[str, str] = {}
    seen = False
    for line in module.to_string(with_meta).splitlines():
        m = _INSTRUCTION.match(line)
        if m is None:
            continue
        seen = True
        label = _LABEL.match(m.group(2))
        if label is not None:
            paths[m.group(1)] = label.group(1)
    if not seen:
        return proto, None
    plain = _jax.HloPrintOptions.short_parsable()
    plain.print_metadata = False
    plain.print_large_constants = True
    return _jax.hlo_module_from_text(module.to_string(plain)).as_serialized_hlo_module_proto(), paths
