"""Checks shared by the zoo parity tests: a verify() report against an independent fp64 run, and
the fixture that verifies each zoo model once per test module.

The test runs the reference itself on the CPU (in the run's dtype, and in fp64 from the inputs
and parameters rounded to it) and checks the report's CPU-side figures against those; then that
each output's cause follows from the report's fp64 figures by the documented rule, that the
explanation starts with the verdict and names each cause with its outputs, and that the rounded
replay ran.
"""

import copy
import json

import torch
from torch.utils._pytree import tree_map

from torch_xla_ext import parity
from torch_xla_ext.parity import causes
from torch_xla_ext.parity.leaves import tensor_leaves


class _NoF32Upcast(torch.overrides.TorchFunctionMode):
    """fp64 stays fp64: ``x.to(torch.float32)`` and ``x.float()`` (T5's and Llama's RMSNorm and
    T5's softmax upcast) give float64, so the golden carries no f32 rounding (what parity's golden
    does too, written here apart)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func is torch.Tensor.float:
            func = torch.Tensor.double
        elif func is torch.Tensor.to:
            args = tuple(torch.float64 if a is torch.float32 else a for a in args)
            if kwargs.get("dtype") is torch.float32:
                kwargs["dtype"] = torch.float64
        return func(*args, **kwargs)


def bf16_case_fixture(names):
    """The module-scoped fixture ``case`` over the zoo models ``names``: (name, model, args,
    kwargs, ``parity.verify`` of the model in bf16), computed once per model and module."""
    import pytest

    from tests import zoo

    @pytest.fixture(scope="module", params=names)
    def case(request):
        model, args, kwargs = zoo.build(request.param)
        return request.param, model, args, kwargs, parity.verify(model, args, kwargs, dtype="bf16")

    return case


def independent_cpu_errors(model, args, kwargs, dtype):
    """{path: greatest |CPU eager - fp64|} computed here, not by parity."""

    def cast(v, dt):
        return v.to(dt) if isinstance(v, torch.Tensor) and v.is_floating_point() else v

    with torch.no_grad():
        run = copy.deepcopy(model).to(dtype)
        out = run(*tree_map(lambda v: cast(v, dtype), args), **tree_map(lambda v: cast(v, dtype), kwargs))
        gold = copy.deepcopy(model).to(dtype).to(torch.float64)
        before = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)  # transformers' masks fill finfo(fp64).min into default tensors
        try:
            gold_args = tree_map(lambda v: cast(cast(v, dtype), torch.float64), args)
            gold_kwargs = tree_map(lambda v: cast(cast(v, dtype), torch.float64), kwargs)
            with _NoF32Upcast():
                ref = gold(*gold_args, **gold_kwargs)
        finally:
            torch.set_default_dtype(before)
    got = dict(tensor_leaves(out))
    want = dict(tensor_leaves(ref))
    return {p: float((got[p].double() - want[p]).abs().max()) for p in got if got[p].is_floating_point()}


def reproduced(o):
    """The documented bound, restated (docs/parity.md): the run is its rounded replay up to
    evaluation order when their distance is within twice the smaller of their own errors against
    the program's exact math, plus one reordered sum of f32 roundoff, 2 sqrt(n) 2^-24 of the
    output's scale (n, the longest reduction, is below 2^16 on the zoo)."""
    core = 2 * min(o.run_rounding, o.replay_rounding)
    assert core <= o.replay_bound <= core + 2 * 2.0 ** 8 * 2.0 ** -24 * o.scale * 1.01, (o.path, o.replay_bound)
    return o.replay_distance <= o.replay_bound


def expected_cause(o, narrow):
    """The documented rule, restated: which cause the fp64 figures of one output imply."""
    if o.xla_vs_cpu.ulp_histogram.get("0", 0) == o.xla_vs_cpu.total:
        return None
    same = o.unrounded.passed or o.unrounded_error <= causes.MATH_NOISE_FRACTION * max(o.xla_error, o.cpu_error)
    if not same:
        return "real difference"
    if reproduced(o):
        return "rounding placement" if narrow else "reassociation"
    if o.xla_error <= causes.REASSOCIATION_FACTOR * max(o.cpu_error, o.emulated_error):
        return "reassociation"
    return "real difference"


def check_report(report, model, args, kwargs, dtype=torch.bfloat16):
    r = report
    assert r.verdict in (parity.Verdict.PASS, parity.Verdict.FAIL), r
    assert r.explanation.startswith(r.verdict.value + ":"), r.explanation[:200]
    # The rounded replay ran, on every output. It rounds where XLA rounds, but jaxlib's XLA sums
    # in its own order (Eigen's blocking depends on the CPU and the thread count): it equals
    # XLA bit for bit unless an f32 sum lands on the other side of a bf16 rounding boundary. So
    # bit-equality is a figure (reported below); what follows from the construction is that the
    # replay is as close to the fp64 golden as XLA itself, up to the documented REASSOCIATION_FACTOR,
    # and that XLA equals it within the bound (docs/parity.md).
    assert r.emulation in ("matches", "differs"), r.emulation
    for o in r.outputs:
        assert o.emulated_error is not None and o.emulated_error <= causes.REASSOCIATION_FACTOR * max(
            o.xla_error, o.cpu_error), (o.path, o.emulated_error, o.xla_error, o.cpu_error)
        assert o.reproduced, (o.path, o.replay_distance, o.replay_bound)
        print(json.dumps({"path": o.path, "xla_vs_replay_bit_equal": o.emulated.total - o.emulated.mismatched,
                          "elements": o.emulated.total, "max_ulp": o.emulated.max_ulp}))
    assert r.hlo_math in ("same", "differs")
    assert all(o.emulated is not None and o.emulated.total == o.xla_vs_cpu.total for o in r.outputs)
    # The program rounds to bf16, at least once twice in a row (the #8747 pattern and its kin).
    assert r.rounding_points and all(p.element_type == "bf16" for p in r.rounding_points)
    assert any(p.after for p in r.rounding_points)
    # CPU-side figures against an independent fp64 run.
    cpu_errors = independent_cpu_errors(model, args, kwargs, dtype)
    assert set(cpu_errors) == {o.path for o in r.outputs}
    for o in r.outputs:
        assert abs(o.cpu_error - cpu_errors[o.path]) <= 1e-9 * max(1.0, cpu_errors[o.path]), (o.path, o.cpu_error)
        assert o.cause == expected_cause(o, narrow=True), (o.path, o.cause)
        if o.cause == "rounding placement":  # the claim's two halves, from the figures
            assert o.replay_distance <= o.replay_bound and o.unrounded_error < o.xla_error
    # The explanation names every cause with its outputs and quotes the worst fp64 errors.
    for cause in {o.cause for o in r.outputs if o.cause}:
        paragraph = next(s for s in r.explanation.split(". ") if s.startswith(cause.capitalize()) or
                         s.startswith("A " + cause))
        for o in r.outputs:
            if o.cause == cause:
                assert (o.path or "<root>") in r.explanation, o.path
        assert paragraph
    worst = max(r.outputs, key=lambda o: o.xla_error)
    assert f"XLA's greatest error is {worst.xla_error:.3g}" in r.explanation
    assert f"CPU eager's is {worst.cpu_error:.3g}" in r.explanation
    return cpu_errors
