"""A mode that failed: what, where, whose, what to try.

:func:`describe_failure` reads the exception itself (through ``_compat.dynamo``, which knows how
Dynamo, AOTAutograd, the openxla bridge and torch_xla raise and wrap); :data:`KNOWN_FAILURES` are
failures of torch_xla's stack met on real models, each with the workaround verified on them.
"""

from __future__ import annotations

import os
from typing import Any

from torch_xla_ext._compat import dynamo as _dynamo
from torch_xla_ext.errors import first_line

__all__ = ["KNOWN_FAILURES", "describe_failure"]

# (aten op, the upstream message we match (its text is _compat.dynamo's, where its canary checks it
# still reads so), what happens, what to try).
KNOWN_FAILURES: tuple[dict[str, str], ...] = (
    {"aten_op": "aten::adaptive_avg_pool2d", "message": _dynamo.EXPECTED_XLA_TENSOR,
     "cause": "While AOTAutograd traces aten::adaptive_avg_pool2d on an input that is not in the default "
              "contiguous layout (a channels_last input, or what the permute/LayerNorm/permute blocks before "
              "ConvNeXt's and Swin's final pooling leave), the op restrides its output with aten::as_strided_, "
              "and torch_xla's kernel for that is handed AOTAutograd's functional tensor instead of an XLA "
              "tensor. Lazy mode never traces, so it runs the same model.",
     "workaround": "For an output size of 1 (global average pooling, nn.AdaptiveAvgPool2d(1)), compute the same "
                   "value as `x.mean((-2, -1), keepdim=True)` (e.g. replace `model.avgpool` with a module that "
                   "does that): checked under torch.compile(backend='openxla') on torchvision's convnext_tiny "
                   "and swin_t, and on a channels_last input."},
)


def describe_failure(exc: BaseException) -> dict[str, Any]:
    """What a failed compiled (or lazy) step tells a user, from the exception itself: the
    exception's first line, whose code raised it (the innermost layer among torch_xla's openxla
    bridge, AOTAutograd, Dynamo, torch_xla and the model's code; torch_xla's C++ kernel of an
    aten op; torch_xla's C++ runtime or XLA when the innermost Python frame is a call into
    ``_XLAC``), the FX node being run and its aten op, the model's source line, and a known
    workaround (:data:`KNOWN_FAILURES`) where there is one.

    The node and the op come from the frames the exception passed through (the FX interpreter's
    ``run_node(n)``, the operator being called), not from the message text.

    Example:
        >>> import torch, torch_xla
        >>> def pool(x):
        ...     return torch.nn.functional.adaptive_avg_pool2d(x.contiguous(memory_format=torch.channels_last), 1)
        >>> try:
        ...     torch.compile(pool, backend="openxla")(torch.randn(1, 8, 4, 4, device="xla"))
        ... except Exception as e:
        ...     f = describe_failure(e)
        >>> f["aten_op"], f["layer"], f["known"]["aten_op"]
        ('aten::adaptive_avg_pool2d', 'torch_xla', 'aten::adaptive_avg_pool2d')
    """
    chain = _dynamo.exception_chain(exc)
    inner = chain[-1]
    for e in chain:  # Dynamo's wrapper says only "backend='openxla' raised": report what it wraps
        if not _dynamo.is_dynamo_wrapper(e):
            inner = e
            break
    node = op = None
    op_on_xla = False
    deepest = None
    layers: list[str] = []
    for frame, lineno in _dynamo.exception_frames(exc):
        f_node, f_op, f_on_xla = _dynamo.frame_locals_call(frame)
        if f_node is not None:
            node = f_node
        if f_op is not None:
            op, op_on_xla = f_op, f_on_xla
        layer = _dynamo.frame_layer(frame.f_code.co_filename)
        if layer and layer not in layers:
            layers.append(layer)
        deepest = (frame.f_code.co_filename, lineno, frame.f_code.co_name)
    deepest_layer = _dynamo.frame_layer(deepest[0]) if deepest else None
    node_op = _dynamo.node_aten_op(node)
    if deepest and _dynamo.is_op_dispatch(deepest[0]) and op and op_on_xla:
        during = next((ly for ly in reversed(layers) if ly not in ("torch_xla", "PyTorch")), None)
        what = f" {node_op}" if node_op and node_op != op else " the graph"
        raised_by = f"torch_xla's C++ kernel for {op}" + (f", called while {during} traced{what}" if during else "")
        layer_key = "torch_xla"
    elif deepest_layer is not None:
        raised_by, layer_key = deepest_layer, deepest_layer
        # A torch_xla frame calling into its C++ runtime (_XLAC): compiling or running through XLA.
        call = _dynamo.xlac_call_at(deepest[0], deepest[1]) if deepest_layer != "Dynamo" else None
        if call is not None and deepest_layer != "AOTAutograd":
            raised_by = (f"torch_xla's C++ runtime or XLA beneath it (_XLAC.{call}, called by "
                         f"{deepest_layer})")
            layer_key = "XLA runtime"
        raised_by += f" ({os.path.basename(deepest[0])}:{deepest[1]} in {deepest[2]})"
    else:
        raised_by, layer_key = "the model's code", "model"
    source = None
    node_info = None
    if node is not None:
        node_info = {"name": node.name, "op": node.op, "target": _dynamo.target_name(node.target)}
        source = _dynamo.node_source(node)
    if source is None:
        source = _dynamo.user_frame(exc)
    text = str(inner).strip()
    first = first_line(inner) if text else ""
    if len(first) > 400:  # Dynamo's fake-tensor errors put every argument on the first line
        first = first[:400] + " ..."
    known = next((k for k in KNOWN_FAILURES if k["aten_op"] in (node_op, op) and _dynamo.message_has(text, k["message"])),
                 None)
    return {
        "exception": f"{type(inner).__name__}: {first}",
        "exception_type": f"{type(inner).__module__}.{type(inner).__qualname__}",
        "raised_by": raised_by,
        "layer": layer_key,
        "layers": layers,
        "node": node_info,
        "aten_op": node_op or op,
        "raised_in_op": op,
        "source": source,
        "known": dict(known) if known else None,
        "dynamo_compile_id": _dynamo.compile_id_of(exc),
    }
