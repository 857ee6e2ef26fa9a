"""Localisation for any nn.Module: each submodule's own error, apart from what it inherited.

The XLA run is captured per module (:mod:`.capturing`). The reference then runs on the CPU in fp64
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
  ops, measured), at least ``FLOOR_ULPS`` units of roundoff of the output's RMS.

A module diverges when own error / rounding level exceeds ``divergence_factor(dtype)``: that ratio is the
one figure the flag, the module table and the explanation read. Calls are in completion order (a
module after its children), so the first divergent module is the innermost one where XLA first
leaves the reference. Both runs happen in one process (:func:`localize`, ``verify(localize=True)``) or
in two (:func:`~torch_xla_ext.parity.capture.capture` on the XLA host, ``compare_capture`` on a
CPU machine). Values beyond the dtype's range (the ``finfo.min`` of attention masks) are compared
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

import dataclasses
import math
import time
from typing import Any, NamedTuple

from torch_xla_ext.parity import explain as _explain
from torch_xla_ext.parity import runners
from torch_xla_ext.parity._golden import GoldenWeights
from torch_xla_ext.parity._checks import check_inputs, tolerances
from torch_xla_ext.parity._outputs import output_parity
from torch_xla_ext.parity.capturing import Capture, ModuleCall, load_capture, record_calls
from torch_xla_ext.parity.errors import CaptureError, ParityError, ParityTypeError
from torch_xla_ext.parity.report import ModuleParity, ParityReport, Verdict

__all__ = ["DIVERGENCE_FACTORS", "FLOOR_ULPS", "ModulePass", "compare", "compare_capture", "divergence_factor",
           "module_pass", "plot_modules", "rms_error", "with_modules"]

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
    import torch

    return torch.finfo(dtype or torch.float32).eps > torch.finfo(torch.float32).eps


def divergence_factor(dtype: Any) -> float:
    """The threshold on own/rounding for a run in ``dtype`` (a torch dtype; None: the inputs' own)."""
    return DIVERGENCE_FACTORS["narrow" if _narrow(dtype) else "wide"]


def _substitute(tree: Any, path: str, mapping: dict[str, Any], convert: Any) -> Any:
    """``tree`` with the tensors at the paths of ``mapping`` replaced (converted), following the
    containers ``runners.tensor_leaves`` names (tuples, lists, dicts, named tuples)."""
    import torch

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
    import torch

    # One copy per tensor (to(copy=True), then clamped in place): the logits of a large
    # vocabulary are tens of MB in f64, and every comparison makes several such vectors.
    parts = [leaves[p].detach().to(torch.float64, copy=True).clamp_(-limit, limit).reshape(-1) for p in paths]
    if len(parts) == 1:
        return parts[0]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)


def _flat_read(leaves: dict[str, Any], limit: float, paths: list[str]) -> Any:
    """:func:`_flat` for reading only: one float64 tensor already within ±limit (a module's fp64
    output) is returned as a view, not copied; clamping would not change a value of it."""
    import torch

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
    import torch

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
    import torch

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


class ModulePass(NamedTuple):
    """What the golden run with the per-module shadows gives: every module call's figures, the
    first divergent one, the golden's own float outputs by path (the fp64 golden of the whole
    run), and the seconds it took."""

    modules: tuple[ModuleParity, ...]
    first: ModuleParity | None
    golden: list[tuple[str, Any]]
    seconds: float


def module_pass(cap: Capture, reference: Any, inputs: tuple, kwargs: dict, seed: int = 0, *,
                consume: bool = False, eager: list[ModuleCall] | None = None) -> ModulePass:
    """The fp64 golden run of ``reference`` with the shadows of every module call compared with
    the capture's (the module docstring's rule). With ``consume``, each module call's tensors are
    dropped from ``cap`` (and ``eager``) once compared (``cap`` keeps only its final outputs).
    ``eager``: CPU eager's own module calls in the run's dtype (``record_calls``; the list is
    emptied); where a call's XLA inputs are both the golden's and CPU eager's, CPU eager's output
    is its CPU shadow and its golden call its exact shadow, so neither runs again (the model and
    its outermost blocks, fed token ids). ``inputs`` and ``kwargs`` are checked by the caller (``check_inputs``)."""
    import torch

    tdtype = cap.run_dtype
    limit = float(torch.finfo(tdtype or torch.float32).max)
    eps = float(torch.finfo(tdtype or torch.float32).eps)
    factor = divergence_factor(tdtype)
    xla_calls = {(c.path, c.call): c for c in cap.calls}
    # Only a call whose XLA inputs are CPU eager's can stand in for a CPU shadow: the others'
    # tensors go before the golden's model is made.
    eager_calls = {(c.path, c.call): c for c in eager or ()
                   if (c.path, c.call) in xla_calls and _same_values(xla_calls[(c.path, c.call)].inputs, c.inputs)}
    if eager is not None:
        eager.clear()
    t0 = time.perf_counter()
    found: dict[tuple[str, int], dict[str, float]] = {}

    with runners.user_rng_preserved():
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
                runners.release_freed_memory(collect=False)
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
                    with golden.in_shadow_dtype(module), runners.widened(wide):
                        sa, sk = _substitute((a, k), "", xla.inputs, to_wide)
                        shadow = runners.call(f"{shadow_name} shadow of {path or '<root>'}", module, sa, sk)
                    del sa, sk
                if cpu_leaves is None:
                    with runners.narrowing():  # the CPU shadow runs in the run's dtype, as written
                        ca, ck = _substitute((a, k), "", xla.inputs, as_run)
                        if tdtype is not None:
                            ca, ck = runners.move(ca, "cpu", tdtype), runners.move(ck, "cpu", tdtype)
                        # The golden's own module, its weights in the run's dtype for this call.
                        with golden.in_run_dtype(module):
                            cpu_shadow = runners.call(f"CPU shadow of {path or '<root>'}", module, ca, ck)
                        del ca, ck
                    cpu_leaves = dict(runners.tensor_leaves(cpu_shadow))
                    del cpu_shadow
            del seen
            shadow_leaves = dict(runners.tensor_leaves(shadow))
            golden_out = dict(runners.tensor_leaves(out))
            if large:
                runners.release_freed_memory(collect=False)
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
        g_args = runners.move(runners.move(inputs, "cpu", tdtype), "cpu", torch.float64)
        g_kwargs = runners.move(runners.move(kwargs, "cpu", tdtype), "cpu", torch.float64)
        try:
            with runners.default_dtype(torch.float64):
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
    golden_leaves = [(p, t.detach()) for p, t in runners.float_leaves(golden_out, "the reference")]
    return ModulePass(tuple(modules), first, golden_leaves, time.perf_counter() - t0)


def with_modules(report: ParityReport, found: ModulePass) -> ParityReport:
    """``report`` with the module figures and their words appended to its explanation."""
    words = _modules_words(list(found.modules), found.first)
    return dataclasses.replace(report, modules=found.modules,
                               first_divergent_module=found.first.name if found.first else None,
                               explanation=report.explanation + " " + words)


def compare(cap: Capture, reference: Any, inputs: Any = (), kwargs: dict | None = None, *, rtol: float | None = None,
            atol: float | None = None, seed: int = 0) -> ParityReport:
    """Per-module comparison of a capture with CPU runs of ``reference``: a report whose verdict
    compares the capture's final outputs with CPU eager and the fp64 golden (no replays: a
    capture holds no program), with every module's figures (:func:`module_pass`)."""
    import torch

    if not isinstance(cap, Capture):
        raise ParityTypeError(f"capture: expected a parity Capture, got {type(cap).__name__}")
    if not isinstance(reference, torch.nn.Module):
        raise ParityTypeError(f"reference: per-module comparison needs an nn.Module, got {type(reference).__name__}")
    inputs, kwargs = check_inputs(inputs, kwargs)
    tol = tolerances(rtol, atol)
    found = module_pass(cap, reference, inputs, kwargs, seed)
    seconds = {"compare modules": found.seconds}
    tdtype = cap.run_dtype
    with runners.user_rng_preserved():
        cpu, seconds["cpu"] = runners.run_cpu(reference, inputs, kwargs, tdtype, seed)
    golden = dict(found.golden)
    outputs = []
    for path, c in cpu:
        if path not in cap.outputs:
            raise CaptureError(f"the capture has no output {path or '<root>'} (it has {sorted(cap.outputs)})")
        o = output_parity(path, cap.outputs[path], c, golden[path], tol)
        outputs.append(dataclasses.replace(o, cause=_explain.output_cause(o, False)))
    verdict = Verdict.PASS if all(o.xla_vs_cpu.passed for o in outputs) else Verdict.FAIL
    status = f"unavailable: a capture holds no program (captured on {cap.device}, compared on the CPU)"
    explanation = _explain.explain(verdict, outputs, status, (), cap.dtype)
    report = ParityReport(verdict, explanation, cap.dtype, rtol, atol, outputs=tuple(outputs), emulation=status,
                          seconds=seconds)
    return with_modules(report, found)


def _modules_words(modules: list[ModuleParity], first: ModuleParity | None) -> str:
    """The localisation in words, from the figures the rule read (``own_to_rounding`` against
    ``threshold``), so the text, the table and the flags never disagree."""
    if not modules:
        return ""
    yardstick = (f"its rounding level (CPU eager's RMS error for the same module on the same inputs, at least "
                 f"{FLOOR_ULPS:g} unit(s) of roundoff of the output's RMS)")
    if first is None:
        worst = max(modules, key=lambda m: m.own_to_rounding if math.isfinite(m.own_to_rounding) else 0.0)
        return (f"Per module ({len(modules)} calls): no module's own error exceeds {worst.threshold:g}x {yardstick}, "
                f"so the outputs' error accumulates from rounding (greatest own/rounding ratio "
                f"{worst.own_to_rounding:.3g}, at {worst.name}).")
    before = [m for m in modules if m.order < first.order]
    return (f"Per module ({len(modules)} calls): the first divergent module is {first.name}: its own error "
            f"{first.own_error:.3g} (RMS, on the inputs XLA gave it) is {first.own_to_rounding:.3g}x {yardstick}, "
            f"{first.rounding_level:.3g}, beyond the threshold {first.threshold:g}x, while it inherited "
            f"{first.inherited_error:.3g}; the {len(before)} module call(s) that finished before it stay within "
            f"rounding. Start looking there (report.module_table()).")


def plot_modules(report: ParityReport, path: str) -> str | None:
    """A PNG of each module's errors by module depth (left: own error vs the rounding level per
    module call in completion order; right: own/rounding ratio by depth). Returns ``path``, or
    None (nothing written, the skip recorded by ``torch_xla_ext._plot``) without matplotlib.

    Example:
        >>> import torch
        >>> from torch_xla_ext import parity
        >>> model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16))
        >>> x = torch.randn(2, 16)
        >>> plot_modules(parity.verify(model, (x,), dtype="bf16", localize=True), "modules.png")
        'modules.png'
    """
    import os

    from torch_xla_ext import _plot

    if not isinstance(report, ParityReport):
        raise ParityTypeError(f"report: expected a ParityReport, got {type(report).__name__}")
    if not report.modules:
        raise ParityError("report: has no per-module localisation (verify(..., localize=True))")
    plt, _why = _plot.pyplot(os.path.basename(path))
    if plt is None:
        return None
    ms = list(report.modules)
    tiny = 1e-12
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 4.2), gridspec_kw={"width_ratios": [3, 1]})
    xs = range(len(ms))
    ax.semilogy(xs, [max(m.total_error, tiny) for m in ms], ".-", color="#999999", label="total error (vs fp64)")
    ax.semilogy(xs, [max(m.inherited_error, tiny) for m in ms], ".", color="#dd8452", label="inherited (inputs)")
    ax.semilogy(xs, [max(m.own_error, tiny) for m in ms], "o", color="#4c72b0", label="own (shadow)")
    ax.semilogy(xs, [max(m.rounding_level, tiny) for m in ms], "_", color="#55a868", markersize=10,
                label="CPU eager's rounding, same inputs")
    for i, m in enumerate(ms):
        if m.diverges:
            ax.axvline(i, color="#c44e52", alpha=0.25 if m.name != report.first_divergent_module else 0.9)
    if len(ms) <= 60:
        ax.set_xticks(list(xs))
        ax.set_xticklabels([("  " * m.depth) + m.name.split(".")[-1] if m.path else "<root>" for m in ms],
                           rotation=90, fontsize=6)
    ax.set_xlabel("module call (completion order: children before parents)")
    ax.set_ylabel("greatest absolute error")
    title = report.first_divergent_module or "none"
    ax.set_title(f"{report.dtype}: first divergent module: {title}", fontsize=9)
    ax.legend(fontsize=7)
    depths = sorted({m.depth for m in ms})
    ratios = [max((min(m.own_to_rounding, 1e6) for m in ms if m.depth == d), default=0.0) for d in depths]
    ax2.bar([str(d) for d in depths], [max(r, tiny) for r in ratios], color="#4c72b0")
    ax2.axhline(ms[0].threshold, color="#c44e52", linestyle="--", label=f"divergence ({ms[0].threshold:g}x)")
    ax2.set_yscale("log")
    ax2.set_xlabel("module depth")
    ax2.set_ylabel("greatest own / rounding")
    ax2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def compare_capture(capture_or_path: Any, reference: Any, inputs: Any = (), kwargs: dict | None = None, *,
                    rtol: float | None = None, atol: float | None = None, seed: int = 0):
    """Compares a capture (a :class:`Capture` or its file) with CPU runs of ``reference`` on the
    same inputs: the verdict on the final outputs (CPU eager in the capture's dtype, fp64 golden)
    and every module's own, inherited and total error (:mod:`.localization`). Runs without XLA.

    Example:
        >>> import torch
        >>> from torch_xla_ext import parity
        >>> model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16))
        >>> x = torch.randn(2, 16)
        >>> parity.capture(model, (x,), dtype="bf16").save("xla_run.safetensors")
        'xla_run.safetensors'
        >>> report = compare_capture("xla_run.safetensors", model, (x,))
        >>> report.first_divergent_module is None          # a module name when one diverges
        True
    """
    cap = capture_or_path if isinstance(capture_or_path, Capture) else load_capture(capture_or_path)
    return compare(cap, reference, inputs, kwargs, rtol=rtol, atol=atol, seed=seed)
