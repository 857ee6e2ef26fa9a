"""Stage 5, localisation, for any nn.Module: each submodule's own error, apart from what it
inherited.

The XLA run is captured per module (:mod:`..capturing`). The reference then runs on the CPU in fp64
(the golden, from the inputs and parameters rounded to the run's dtype) with the same hooks, and
inside each module's hook the reference module runs again on the inputs the XLA module received
(the shadow of torch.ao.ns): exactly, which gives the module's exact output for those inputs (in
fp64; in fp32 for a bf16/f16 run, whose roundings are 2^13 to 2^16 times coarser, as the unrounded
replay), and in the run's dtype on CPU eager, which gives the rounding error CPU eager makes for
them. So, per module call (errors are root-mean-square differences over its floating-point outputs):

* total error: XLA's output vs the golden's;
* inherited error: XLA's inputs vs the golden's;
* own error: XLA's output vs the exact shadow (what this module adds);
* rounding level: CPU eager's shadow vs the exact shadow (what rounding costs in this module's own
  ops, measured), at least ``FLOOR_ULPS`` units of roundoff of the output's RMS. Under another
  device's rules (a TPU's bf16 matmul passes) the CPU shadow's matmuls round as that device's do
  (:mod:`..matmul_precision`), and the unit of roundoff is that precision's when it is coarser.

A module diverges when own error / rounding level exceeds ``divergence_factor(dtype)``: that ratio is the
one figure the flag, the module table and the explanation read. Calls are in completion order (a
module after its children), so the first divergent module is the innermost one where XLA first
leaves the reference. Both runs happen in one process (``localize``, ``verify(localize=True)``) or
in two (``capture`` on the XLA host, ``compare_capture`` on a CPU machine). With localize, this
stage's golden run is the run's fp64 golden. Values beyond the dtype's range (the ``finfo.min`` of attention masks) are compared
as the dtype's extremes.

Example:
    >>> import torch
    >>> from torch_xla_ext import parity
    >>> model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16))
    >>> x = torch.randn(2, 16)
    >>> r = parity.verify(model, (x,), dtype="bf16", localize=True)
    >>> r.first_divergent_module is None                # bf16 rounding explains every module
    True
    >>> [row.split()[0] for row in r.module_table().splitlines()]   # each module's own error, ...
    ['module', '0', '1', '2', '<root>']
"""

from __future__ import annotations

import math
from typing import Any

import torch

from torch_xla_ext.parity import memory
from torch_xla_ext.parity.captures import Capture, ModuleCall
from torch_xla_ext.parity.capturing import record_calls
from torch_xla_ext.parity.casts import move
from torch_xla_ext.parity.errors import CaptureError
from torch_xla_ext.parity.leaves import float_leaves, tensor_leaves
from torch_xla_ext.parity.matmul_precision import on_cpu, shadow_precision
from torch_xla_ext.parity.pipeline import Stage
from torch_xla_ext.parity.program.rules import XLA_CPU, Rules, resolve
from torch_xla_ext.parity.record import ModulePass, RunRecord
from torch_xla_ext.parity.report import ModuleParity
from torch_xla_ext.parity.stages.golden import GoldenWeights, plain_golden
from torch_xla_ext.parity.user_code import UserFailure, call, user_rng_preserved
from torch_xla_ext.parity.widening import default_dtype, narrowing, widened

__all__ = ["DIVERGENCE_FACTORS", "FLOOR_ULPS", "OF_CAPTURE", "STAGE", "divergence", "divergence_factor", "module_pass",
           "rms_error"]

# The rule: own error (RMS) > factor x rounding level, the rounding level being CPU eager's RMS
# error for the same module on the same inputs, at least FLOOR_ULPS units of roundoff
# (finfo.eps / 2) of the output's RMS. From measurement (docs/parity.md, bench/localize_matrix.py):
# one correctly rounded op errs by at most half an ulp per element, an RMS under one unit of
# roundoff of the output's RMS, so the floor is what a module whose CPU kernel is exact (a gather,
# a copy) may still cost where XLA rounds. The factor is twice the greatest own/rounding ratio
# measured over every untouched module call of the zoo and Qwen2: 1.81 in bf16 (XLA's bf16
# average pool accumulates in bf16) and 2.47 in fp32 (summation order of small fp32 dots, where
# rounding is not the output's last rounding). A 2% weight error is 2.56 units of roundoff in bf16
# (5.12x the floor), above 3.6; in fp32 it is ~3e5x.
DIVERGENCE_FACTORS = {"narrow": 3.6, "wide": 5.0}  # narrow: bf16/f16 (eps > float32's); wide: fp32, fp64
FLOOR_ULPS = 1.0
LARGE_OUTPUT = 1 << 20  # elements of a module call's outputs (8 MB in float64) worth a heap trim


def _narrow(dtype: Any) -> bool:
    """Whether a run in ``dtype`` (None: the inputs' own) rounds coarser than float32 (bf16, f16)."""
    return torch.finfo(dtype or torch.float32).eps > torch.finfo(torch.float32).eps


def divergence_factor(dtype: Any) -> float:
    """The threshold on own/rounding for a run in ``dtype`` (a torch dtype; None: the inputs' own)."""
    return DIVERGENCE_FACTORS["narrow" if _narrow(dtype) else "wide"]


def effective_eps(dtype: Any, rules: Rules = XLA_CPU) -> float:
    """The machine epsilon a run's roundings are made of: its dtype's, or, when the rules' matmul
    precision is coarser (a TPU's bf16 passes in an f32 run), that precision's (2^(1-bits))."""
    eps = float(torch.finfo(dtype or torch.float32).eps)
    precision = shadow_precision(rules)
    return max(eps, 2.0 ** (1 - precision.bits)) if precision.rounds else eps


def _substitute(tree: Any, path: str, mapping: dict[str, Any], convert: Any) -> Any:
    """``tree`` with the tensors at the paths of ``mapping`` replaced (converted), following the
    containers ``leaves.tensor_leaves`` names (tuples, lists, dicts, named tuples)."""
    if isinstance(tree, torch.Tensor):
        return convert(mapping[path]) if path in mapping else tree
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        return type(tree)(*(_substitute(getattr(tree, f), f"{path}.{f}", mapping, convert) for f in tree._fields))
    if isinstance(tree, (list, tuple)):
        return type(tree)(_substitute(v, f"{path}[{i}]", mapping, convert) for i, v in enumerate(tree))
    if isinstance(tree, dict):
        return {k: _substitute(v, f"{path}[{k!r}]", mapping, convert) for k, v in tree.items()}
    return tree


def _flat(leaves: dict[str, Any], limit: float, paths: list[str]) -> Any:
    """The floating-point tensors at ``paths`` as one float64 vector, clamped to ±limit: always a
    fresh tensor (never a view of a leaf), so callers may work on it in place."""
    # One copy per tensor (to(copy=True), then clamped in place): the logits of a large
    # vocabulary are tens of MB in f64, and every comparison makes several such vectors.
    parts = [leaves[p].detach().to(torch.float64, copy=True).clamp_(-limit, limit).reshape(-1) for p in paths]
    if len(parts) == 1:
        return parts[0]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)


def _flat_read(leaves: dict[str, Any], limit: float, paths: list[str]) -> Any:
    """:func:`_flat` for reading only: one float64 tensor already within ±limit (a module's fp64
    output) is returned as a view, not copied; clamping would not change a value of it."""
    if len(paths) == 1:
        t = leaves[paths[0]].detach()
        if t.dtype == torch.float64 and t.is_contiguous():
            lo, hi = torch.aminmax(t)  # paths hold no empty tensor (_common_paths)
            if float(lo) >= -limit and float(hi) <= limit:  # False for NaN: then clamped as a copy
                return t.reshape(-1)
    return _flat(leaves, limit, paths)


def _rms_of(v: Any) -> float:
    """sqrt(mean(v^2)) without overflow (values may sit at the dtype's extremes). ``v`` is
    overwritten (a fresh vector of the caller's: no temporary of its size is made)."""
    if not v.numel():
        return 0.0
    v = v.abs_()  # (|v|/m)^2 == (v/m)^2 bit for bit
    m = float(v.max())
    if m == 0.0 or not math.isfinite(m):
        return m
    return m * float(v.div_(m).square_().mean().sqrt())


def _common_paths(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return [p for p, x in a.items()
            if p in b and x.is_floating_point() and b[p].is_floating_point() and x.shape == b[p].shape and x.numel()]


def rms_error(a: dict[str, Any], b: dict[str, Any], limit: float) -> float:
    """Root mean square of a - b over the floating-point tensors both name (values clamped to
    ±limit; NaN on both sides agrees, NaN on one side is an infinite error)."""
    paths = _common_paths(a, b)
    if not paths:
        return 0.0
    x, y = _flat(a, limit, paths), _flat_read(b, limit, paths)
    d = x.sub_(y)  # x is ours (fresh): the difference in place
    del x
    if bool(torch.isnan(d).any()):  # clamped values hold no infinity: NaN on one side or both
        d[torch.isnan(_flat(a, limit, paths)) & torch.isnan(y)] = 0.0
        if bool(torch.isnan(d).any()):
            return math.inf
    del y
    return _rms_of(d)


def _rms(outputs: dict[str, Any], limit: float) -> float:
    paths = [p for p, t in outputs.items() if t.is_floating_point() and t.numel()]
    if not paths:
        return 0.0
    return _rms_of(_flat(outputs, limit, paths).nan_to_num_(0.0))


def divergence(own: float, cpu_rounding: float, scale: float, eps: float) -> tuple[float, float]:
    """(rounding level, own/rounding ratio) of one module call: the one figure the rule, the
    module table and the explanation read. The rounding level is CPU eager's RMS error on the same
    inputs, at least ``FLOOR_ULPS`` units of roundoff of the output's RMS scale."""
    level = max(cpu_rounding, FLOOR_ULPS * (eps / 2) * scale)
    if own == 0:
        return level, 0.0
    return level, (own / level if level > 0 else math.inf)


def _same_values(xla: dict[str, Any], golden: dict[str, Any]) -> bool:
    """Whether a call's XLA inputs are the golden's, value for value (floats compared in float64;
    a NaN anywhere counts as different)."""
    if xla.keys() != golden.keys():
        return False
    for p, x in xla.items():
        g = golden[p]
        if x.shape != g.shape or x.is_floating_point() != g.is_floating_point():
            return False
        if not (torch.equal(x.to(torch.float64), g.to(torch.float64)) if x.is_floating_point()
                else (x.dtype == g.dtype and torch.equal(x, g))):
            return False
    return True


def module_pass(cap: Capture, reference: Any, inputs: tuple, kwargs: dict, seed: int = 0, *,
                consume: bool = False, eager: list[ModuleCall] | None = None, rules: Rules = XLA_CPU) -> ModulePass:
    """The fp64 golden run of ``reference`` with the shadows of every module call compared with
    the capture's (the module docstring's rule). With ``consume``, each module call's tensors are
    dropped from ``cap`` (and ``eager``) once compared (``cap`` keeps only its final outputs).
    ``eager``: CPU eager's own module calls in the run's dtype (``record_calls``; the list is
    emptied); where a call's XLA inputs are both the golden's and CPU eager's, CPU eager's output
    is its CPU shadow and its golden call its exact shadow, so neither runs again (the model and
    its outermost blocks, fed token ids). ``inputs`` and ``kwargs`` are checked by the caller (``check_inputs``).
    ``rules``: the device whose matmul precision the run had (:mod:`..program.rules`); under rules
    that round f32 matmuls, the CPU shadow computes its matmuls at that precision and the rounding
    floor is that precision's unit roundoff (CPU eager's own calls, which did not, stand in for none)."""
    tdtype = cap.run_dtype
    limit = float(torch.finfo(tdtype or torch.float32).max)
    eps = effective_eps(tdtype, rules)
    factor = DIVERGENCE_FACTORS["narrow" if eps > float(torch.finfo(torch.float32).eps) else "wide"]
    xla_calls = {(c.path, c.call): c for c in cap.calls}
    # Only a call whose XLA inputs are CPU eager's can stand in for a CPU shadow: the others'
    # tensors go before the golden's model is made.
    eager_calls = {(c.path, c.call): c for c in eager or () if not shadow_precision(rules).rounds
                   and (c.path, c.call) in xla_calls and _same_values(xla_calls[(c.path, c.call)].inputs, c.inputs)}
    if eager is not None:
        eager.clear()
    found: dict[tuple[str, int], dict[str, float]] = {}

    with user_rng_preserved():
        torch.manual_seed(seed)
        # The exact shadow of a narrow run computes in float32, whose roundoff is 2^13 to 2^16
        # times finer than the run's roundings (the unrounded replay's argument,
        # replays.unrounded_precision): its figures are float64's to within that roundoff.
        golden = GoldenWeights(reference, tdtype, torch.float32 if _narrow(tdtype) else torch.float64)
        wide = golden.shadow_dtype
        shadow_name = "fp64" if wide == torch.float64 else "fp32"
        to_wide = lambda t: t.detach().to(wide, copy=True) if t.is_floating_point() else t.clone()  # noqa: E731
        as_run = lambda t: t.detach().clone()  # noqa: E731

        def on_call(module: Any, path: str, n: int, a: tuple, k: dict, out: Any, golden_in: dict) -> None:
            xla = xla_calls.get((path, n))
            if xla is None:
                raise CaptureError(f"the capture has no call {n} of module {path or '<root>'}: the XLA run and the "
                                   f"reference take different paths through the model")
            # A call with large outputs (a big vocabulary's logits): its shadows and comparisons
            # make float64 tensors of that size on top of the golden, so the pages the golden run
            # freed so far go back to the OS first (a trim only: cheap, but not for every call).
            large = sum(t.numel() for t in xla.outputs.values()) > LARGE_OUTPUT
            if large:
                memory.release("trim")
            inherited = rms_error(xla.inputs, golden_in, limit)
            # XLA gave this call exactly what the golden gave it (token ids, the first
            # embeddings): its exact shadow would repeat the golden's own call.
            as_golden = inherited == 0.0 and _same_values(xla.inputs, golden_in)
            seen = eager_calls.pop((path, n), None)
            # CPU eager's own call had these inputs: its output is the CPU shadow.
            cpu_leaves = seen.outputs if seen is not None and as_golden else None
            # The shadows leave the golden's RNG stream where the golden alone would have it.
            with torch.random.fork_rng(devices=[]):
                if as_golden:
                    shadow = out
                else:
                    # Inside widened(): the golden's float64 mode would make the cast to float32 float64.
                    with golden.in_shadow_dtype(module), widened(wide):
                        sa, sk = _substitute((a, k), "", xla.inputs, to_wide)
                        shadow = call(f"{shadow_name} shadow of {path or '<root>'}", module, sa, sk)
                    del sa, sk
                if cpu_leaves is None:
                    with narrowing():  # the CPU shadow runs in the run's dtype, as written
                        ca, ck = _substitute((a, k), "", xla.inputs, as_run)
                        if tdtype is not None:
                            ca, ck = move(ca, "cpu", tdtype), move(ck, "cpu", tdtype)
                        # The golden's own module, its weights in the run's dtype for this call.
                        with golden.in_run_dtype(module), on_cpu(rules):
                            cpu_shadow = call(f"CPU shadow of {path or '<root>'}", module, ca, ck)
                        del ca, ck
                    cpu_leaves = dict(tensor_leaves(cpu_shadow))
                    del cpu_shadow
            del seen
            shadow_leaves = dict(tensor_leaves(shadow))
            golden_out = dict(tensor_leaves(out))
            if large:
                memory.release("trim")
            found[(path, n)] = {
                "own": rms_error(xla.outputs, shadow_leaves, limit),
                "rounding": rms_error(cpu_leaves, shadow_leaves, limit),
                "total": rms_error(xla.outputs, golden_out, limit),
                "inherited": inherited,
                "scale": _rms(shadow_leaves, limit),
            }
            if consume:  # compared: this call's XLA tensors are not read again
                xla.inputs, xla.outputs = {}, {}

        torch.manual_seed(seed)
        # The golden starts from the inputs rounded to the run's dtype, as XLA received them. The
        # rounding happens before the float64 mode, which would turn a cast to bf16 into float64.
        g_args = move(move(inputs, "cpu", tdtype), "cpu", torch.float64)
        g_kwargs = move(move(kwargs, "cpu", tdtype), "cpu", torch.float64)
        try:
            with default_dtype(torch.float64):
                golden_calls, golden_out = record_calls(golden.model, g_args, g_kwargs, stage="fp64 golden",
                                                        on_call=on_call, keep=False)
            del g_args, g_kwargs
        finally:
            golden.close()
        del golden
    modules = []
    for order, c in enumerate(golden_calls):
        e = found[(c.path, c.call)]
        level, ratio = divergence(e["own"], e["rounding"], e["scale"], eps)
        modules.append(ModuleParity(c.path, c.call, c.depth, order, e["total"], e["inherited"], e["own"], level,
                                    e["scale"], ratio > factor, cpu_rounding=e["rounding"], threshold=factor))
    first = next((m for m in modules if m.diverges), None)
    golden_leaves = [(p, t.detach()) for p, t in float_leaves(golden_out, "the reference")]
    return ModulePass(tuple(modules), first, golden_leaves, FLOOR_ULPS)


def _module_pass(record: RunRecord, ours: bool) -> None:
    """The localisation stage: the module pass over the run's capture; its golden is the run's.
    A shadow that fails (a module that cannot run alone) leaves the verdict and says there is no
    localisation; the golden itself failing is the EXCEPTION verdict. ``ours``: the capture is
    verify's own, whose tensors are dropped as they are compared, and the capture after."""
    r = record.request
    rules = record.replayed.rules if record.replayed is not None else resolve(r.rules, None, record.device)
    try:
        found = module_pass(record.capture, r.reference, r.inputs, r.kwargs, r.seed, consume=ours,
                            eager=record.cpu_calls, rules=rules)
        record.modules, record.golden = found, found.golden
    except UserFailure as f:
        if f.stage == "fp64 golden":
            raise
        with user_rng_preserved():  # a shadow failed: the golden alone, no localisation
            plain_golden(record)
        record.notes.append(f"The per-module localisation failed ({f}); no localisation.")
    record.cpu_calls = None
    if ours:
        record.capture = None


_DECLARED = dict(reads=("request", "capture", "device"), optional=("cpu_calls", "replayed"),
              writes=("modules", "golden", "notes"), seconds="compare modules", release="trim")
# verify's: its own capture, consumed as it is compared.
STAGE = Stage("localisation", lambda record: _module_pass(record, ours=True), drops=("cpu_calls", "capture"), **_DECLARED)
# compare_capture's: the loaded capture, whose outputs the comparison reads after.
OF_CAPTURE = Stage("localisation", lambda record: _module_pass(record, ours=False), drops=("cpu_calls",), **_DECLARED)
