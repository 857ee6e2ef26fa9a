"""Stage 2, the fp64 golden: the reference in float64 from the inputs and parameters both sides
received (rounded to the run's dtype), so its error measures each side's arithmetic, not the
shared input quantisation; inside it a model's own narrowing stays float64 (:mod:`..widening`).

Plain (:data:`PLAIN`), it is one more CPU run. With localize, the localisation's golden run is the
golden (:mod:`.localization`): its copy of the reference (:class:`GoldenWeights`) holds the weights
in the run's dtype, every op reading them wider (float64 for the golden, float32 for a narrow
run's exact shadows), and swaps in the run's own for a CPU shadow.

Example:
    >>> import torch
    >>> golden = GoldenWeights(torch.nn.Linear(2, 2), torch.bfloat16)
    >>> golden.model.weight.dtype, golden.model.weight.stored.dtype   # read as float64, held in bf16
    (torch.float64, torch.bfloat16)
"""

from __future__ import annotations

import contextlib
import sys
from collections import OrderedDict
from typing import Any

import torch

from torch_xla_ext._compat import dispatch, storage
from torch_xla_ext._compat.pytree import tree_map
from torch_xla_ext.parity.casts import cast_on_cpu, prepare
from torch_xla_ext.parity.pipeline import Stage
from torch_xla_ext.parity.record import RunRecord
from torch_xla_ext.parity.cpu import run_cpu

__all__ = ["PLAIN", "GoldenWeights", "plain_golden", "widened_class"]


def plain_golden(record: RunRecord) -> None:
    """The golden as one plain fp64 CPU run of the reference (without localisation, or when the
    localisation's shadows failed). Where the exact replay of the XLA run of the same model had
    float64 copies of its float32 parameters made (``ProgramRun.widened_parameters``: the same
    values, those the run received widened exactly), the golden's parameters are those copies."""
    r = record.request
    program = record.xla.program if record.xla is not None else None
    given = program.widened_parameters() if program is not None and not r.separate_reference else {}
    record.golden, _ = run_cpu(r.reference, r.inputs, r.kwargs, torch.float64, r.seed, via=r.dtype,
                               stage="fp64 golden", given=given)


PLAIN = Stage("fp64 golden", plain_golden, reads=("request",), optional=("xla",), writes=("golden",),
              seconds="golden", release="trim")


def widened_class(dtype: Any = None):
    """``_Widened``: a tensor stored in a narrower float that every op sees as ``dtype`` (default
    float64), one class (and one cache) per dtype, made once."""
    dtype = torch.float64 if dtype is None else dtype
    if dtype in _WIDENED:
        return _WIDENED[dtype]

    aten = torch.ops.aten
    wide = dtype

    class _Widened(torch.Tensor):
        """A weight kept in the run's dtype (``stored``) that reads as a wider float: each op that
        takes it gets ``stored`` widened (exactly: every narrower float is one), so the golden
        computes in fp64 on the weights the run's dtype gives them while holding them in that
        dtype (a quarter of a float64 copy's memory for bf16); a shadow in float32 likewise."""

        @staticmethod
        def __new__(cls, stored):
            return dispatch.make_wrapper_subclass(cls, stored, dtype=wide)

        def __init__(self, stored):
            self.stored = stored

        def __repr__(self):
            return f"_Widened({self.stored!r})"

        # The widened copies most recently read, up to ``budget`` bytes: a module's weights are
        # read once by its golden call and again by its own and each enclosing module's fp64
        # shadow, all within its enclosing block's turn, so a budget of a block's weights widens
        # each about once. Entries keep their ``stored`` tensor (its id stays its own).
        cache: OrderedDict = OrderedDict()
        budget = 0
        held = 0
        # A copy that left the cache with nothing else on its memory, kept (one per shape and
        # strides) for the next weight of its shape: writing into it costs about a sixth of
        # widening into fresh memory, whose first touch of every page is most of the cost (a
        # 2048x5632 bf16 weight to float64: 5 ms against 32 ms). A block's weights repeat.
        spare: dict = {}

        @classmethod
        def widened(cls, t):
            hit = cls.cache.get(id(t.stored))
            if hit is not None:
                cls.cache.move_to_end(id(t.stored))
                return hit[1]
            spare = cls.spare.pop(_layout(t.stored), None)
            widened = spare.copy_(t.stored) if spare is not None else t.stored.to(wide)
            del spare
            size = widened.numel() * widened.element_size()
            if size <= cls.budget:
                cls.cache[id(t.stored)] = (t.stored, widened)
                cls.held += size
                while cls.held > cls.budget:
                    _, (_, old) = cls.cache.popitem(last=False)
                    cls.held -= old.numel() * old.element_size()
                    # Only a copy nothing else holds (no op kept it or a view of it) is reused. It
                    # has its weight's layout (to() and copy_() keep it).
                    if sys.getrefcount(old) == 2 and storage.sole_holder(old):
                        cls.spare.setdefault(_layout(old), old)
                    del old
            return widened

        @classmethod
        def reset(cls, budget: int) -> None:
            cls.cache.clear()
            cls.spare.clear()
            cls.budget, cls.held = budget, 0

        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            if func in (aten.detach.default, aten.alias.default):
                return cls(args[0].stored.detach())

            def widen(t):  # any dtype's: a weight tied to one outside a float32 shadow stays float64
                return type(t).widened(t) if type(t) in _WIDENED.values() else t

            return func(*tree_map(widen, args), **tree_map(widen, kwargs or {}))

    _WIDENED[dtype] = _Widened
    return _Widened


_WIDENED: dict = {}


def _layout(t: Any) -> tuple:
    """A tensor's shape and strides: which spare copy a widened weight can be written into."""
    return tuple(t.shape), t.stride()


class GoldenWeights:
    """The fp64 golden's copy of the reference, whose modules also run as the CPU shadow in the
    run's dtype.

    With a run dtype, the copy is the reference cast to that dtype exactly as ``casts.prepare``
    casts it for a CPU eager run (W/2 for bf16), each floating parameter wrapped so that every op
    reads it in float64 (``_Widened``: the golden's float64 weights, value for value, without a
    float64 copy of the model: at real sizes that copy, 2W, was the localisation's peak) and each
    floating buffer held in float64. The CPU shadow puts the unwrapped parameters and the run
    dtype's buffers in place for its call: no cast, no copy. Without a run dtype (the inputs'
    dtypes), the golden is a float64 copy and the shadow casts each weight for its call.

    ``shadow_dtype`` is what a module's exact shadow computes in (the caller's choice, float64 or,
    for a run in a narrow dtype, float32); :meth:`in_shadow_dtype` puts that dtype's weights in place."""

    def __init__(self, reference: Any, dtype: Any, shadow_dtype: Any = None):
        self.shadow_dtype = torch.float64 if dtype is None or shadow_dtype is None else shadow_dtype
        self._shadow: dict[int, Any] = {}  # id(golden tensor) -> its float32-shadow tensor
        if dtype is None:
            made: list = []
            self.model = prepare(reference, "cpu", torch.float64, made=made)
            self._run = {id(c): torch.nn.Parameter(cast_on_cpu(o, None), requires_grad=False)
                         if isinstance(c, torch.nn.Parameter) else cast_on_cpu(o, None) for c, o in made}
            self._widened = False
            return
        widened = widened_class()
        self.model = prepare(reference, "cpu", dtype)
        # The widened copies held at once: an eighth of a float64 model (W/4), and as many bytes
        # of float32 copies for the shadows of a narrow run.
        budget = sum(p.numel() for p in self.model.parameters() if p.is_floating_point())
        widened.reset(budget)
        if self.shadow_dtype == torch.float32:
            widened_class(torch.float32).reset(budget)
        self._widened = True
        self._run: dict[int, Any] = {}  # id(golden tensor) -> its run-dtype tensor
        wrapped: dict[int, Any] = {}  # tied parameters stay tied
        swaps: list[tuple[Any, str, Any]] = []
        for m in self.model.modules():
            for name, p in m._parameters.items():
                if p is None or not p.is_floating_point() or p.dtype == torch.float64:
                    continue
                if id(p) not in wrapped:
                    wrapped[id(p)] = torch.nn.Parameter(widened(p.detach()), requires_grad=False)
                    self._run[id(wrapped[id(p)])] = p
                    if self.shadow_dtype == torch.float32:
                        self._shadow[id(wrapped[id(p)])] = torch.nn.Parameter(
                            widened_class(torch.float32)(p.detach()), requires_grad=False)
                swaps.append((m, name, wrapped[id(p)]))
            for name, b in m._buffers.items():
                if b is None or not b.is_floating_point() or b.dtype == torch.float64:
                    continue
                if id(b) not in wrapped:
                    wrapped[id(b)] = b.to(torch.float64)
                    self._run[id(wrapped[id(b)])] = b
                    if self.shadow_dtype == torch.float32:
                        self._shadow[id(wrapped[id(b)])] = b.to(torch.float32)
                swaps.append((m, name, wrapped[id(b)]))
        for m, name, t in swaps:  # setattr: modules that cache their weights (an RNN's _flat_weights) follow
            setattr(m, name, t)

    def close(self) -> None:
        """Lets go of the widened copies still held."""
        if self._widened:
            for dtype in _WIDENED:
                widened_class(dtype).reset(0)

    def in_run_dtype(self, module: Any):
        """``module`` (of :attr:`model`) with its weights in the run's dtype for the block."""
        return _swapped(module, self._run)

    def in_shadow_dtype(self, module: Any):
        """``module`` with its weights read in :attr:`shadow_dtype` for the block (a no-op for float64)."""
        return _swapped(module, self._shadow)


@contextlib.contextmanager
def _swapped(module: Any, table: dict[int, Any]):
    """``module``'s parameters and buffers replaced by ``table[id(tensor)]`` for the block."""
    swapped = [(m, name, t) for m in module.modules() for tensors in (m._parameters, m._buffers)
               for name, t in tensors.items() if t is not None and id(t) in table]
    try:
        for m, name, t in swapped:  # setattr, as in GoldenWeights.__init__
            setattr(m, name, table[id(t)])
        yield
    finally:
        for m, name, t in swapped:
            setattr(m, name, t)
