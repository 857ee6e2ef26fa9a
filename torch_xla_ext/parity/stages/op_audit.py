"""The op audit, a stage the torchax frontend adds after the outputs are compared: when the program
torchax ran is not the reference's math (the exact replay leaves the fp64 golden), which op torchax
lowers to other math than eager PyTorch.

* **Which call**: the localisation's first divergent module's (the model's own forward when none
  diverges); without a localisation the audit does not run (a whole model op by op costs what a
  localisation spares: about 0.1 s per op).
* **Its inputs**: from ``fn`` itself on the CPU in float64 (weights and inputs rounded to the run's
  dtype first, as the golden's, and read as float64 by every op: ``golden.GoldenWeights``), run up
  to that call and stopped there; only the audited module is copied in float64.
* **Op by op**: torchax runs that module eagerly on JAX's CPU with JAX's x64 mode on and every float
  in float64 (the golden's widening), and each op it lowers is compared with torch's own on the CPU
  from the same inputs (``_compat/torchax_dispatch.py``). The first op, in the order ops finish
  (a decomposition's own ops before it), whose result leaves torch's beyond float64 rounding
  (:func:`..causes.lowering_differs`) is the finding: the op, the function torchax ran for it, and
  the module and the model's line that ran it (:mod:`..user_code`).

The outputs whose exact replay leaves the golden then get the cause "op lowering"
(:func:`..causes.cause`); with every op agreeing they stay "a real difference", and the report says
the audit cleared torchax's lowerings of those ops. It costs one partial CPU run and one module's
eager run, and runs only with a localisation, when an output would otherwise be a real difference
of the program's math.

Example:
    >>> import torch
    >>> a = audit(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU()), torch.float32, "", 0,
    ...           (torch.randn(2, 4),), {})
    >>> a.found is None, a.compared   # F.linear and aten.gelu, each as torch computes it
    (True, 2)
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from torch_xla_ext._compat import torchax_dispatch as _dispatch
from torch_xla_ext._compat.pytree import tree_map
from torch_xla_ext.errors import first_line
from torch_xla_ext.parity.casts import move, prepare
from torch_xla_ext.parity.causes import LOWERING_BOUND, lowering_differs, op_difference, program_differs
from torch_xla_ext.parity.pipeline import SKIPPED, Stage
from torch_xla_ext.parity.record import RunRecord
from torch_xla_ext.parity.report import OpAudit, OpLowering
from torch_xla_ext.parity.stages.golden import GoldenWeights
from torch_xla_ext.parity.user_code import live_frames, site
from torch_xla_ext.parity.widening import default_dtype
from torch_xla_ext.parity.x64 import call_name

__all__ = ["STAGE", "audit"]


class _Reached(Exception):
    """The CPU run reached the audited call and took its inputs: the rest of it is not run."""


class _Unavailable(Exception):
    """The audit cannot run; its message says why."""


def _inputs_of(model: Any, path: str, n: int, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """(args, kwargs) the ``n``-th call of ``model``'s module ``path`` receives, from a CPU run of
    ``model`` stopped there."""
    calls, taken = [0], []

    def pre_hook(_module: Any, a: tuple, k: dict) -> None:
        if calls[0] == n:
            taken.append(tree_map(lambda v: v.clone() if isinstance(v, torch.Tensor) else v, (a, k)))
            raise _Reached
        calls[0] += 1

    handle = model.get_submodule(path).register_forward_pre_hook(pre_hook, with_kwargs=True)
    try:
        model(*args, **kwargs)
    except _Reached:
        pass
    finally:
        handle.remove()
    if not taken:
        raise _Unavailable(f"the CPU run of fn makes {calls[0]} call(s) of {path}, not call {n}")
    return taken[0]


def audit(fn: Any, dtype: Any, path: str, n: int, inputs: tuple, kwargs: dict) -> OpAudit:
    """The op audit of the ``n``-th call of ``fn``'s module ``path`` ("": ``fn`` itself) on
    ``inputs`` and ``kwargs`` in a run of ``dtype`` (module docstring). What the model or torchax
    raises on the way is the audit's ``error``."""
    try:
        a, k = move(move(inputs, "cpu", dtype), "cpu", torch.float64), move(move(kwargs, "cpu", dtype), "cpu",
                                                                              torch.float64)
        if path:  # the run up to the call reads its weights as float64 without a float64 copy of the model
            golden = GoldenWeights(fn, dtype)
            try:
                with torch.no_grad(), default_dtype(torch.float64):
                    a, k = _inputs_of(golden.model, path, n, a, k)
            finally:
                golden.close()
            del golden
        # The audited module alone in float64 (its weights rounded to the run's dtype first).
        target = prepare(fn.get_submodule(path) if path else fn, "cpu", torch.float64, via=dtype)
        modules = ({id(m): ".".join(q for q in (path, p) if q) for p, m in target.named_modules()}
                   if isinstance(target, torch.nn.Module) else {})
        compared, found = [0], []

        def on_op(c: _dispatch.OpCall) -> bool:
            compared[0] += 1
            difference, scale = op_difference(c.result, c.eager, c.inputs)
            if not lowering_differs(difference, scale):
                return True
            module, source, text = site(live_frames(sys._getframe(1)), modules)
            found.append(OpLowering(call_name(c.func), c.lowering, c.overridden, module, source, text, difference,
                                    scale, LOWERING_BOUND * scale))
            return False  # the first is the finding: nothing after it is compared

        with torch.no_grad():
            _dispatch.audit(target, a, k, on_op, within=lambda: default_dtype(torch.float64))
    except _Unavailable as e:
        return OpAudit(path, n, error=str(e))
    except Exception as e:  # noqa: BLE001 - the model in float64, or torchax with x64 on, failing where the run did not: said, not raised
        return OpAudit(path, n, error=first_line(e, with_type=True))
    return OpAudit(path, n, compared[0], found[0] if found else None)


def _run(record: RunRecord) -> Any:
    """The stage: with a localisation, the audit of its first divergent module call (the model's
    forward when none diverges), when some output's program is not the reference's math. Without
    one it is skipped: a whole model op by op is what localisation spares."""
    if record.modules is None or not any(program_differs(o) for o in record.outputs):
        return SKIPPED
    r = record.request
    first = record.modules.first
    path, n = (first.path, first.call) if first is not None else ("", 0)
    record.op_audit = audit(r.fn, r.dtype, path, n, r.inputs, r.kwargs)
    return None


STAGE = Stage("op audit", _run, reads=("request", "outputs"), optional=("modules",), writes=("op_audit",),
              seconds="op audit", release="trim")
