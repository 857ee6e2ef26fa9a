"""What parity under torchax skips on JAX's CPU, checked against the work it skips:

* the compiled run of a float32 program is its own rounded replay (XLA:CPU's rules, JAX's CPU):
  the rounded replay, compiled and run as the replays would, equals the run's outputs bit for bit
  (the figure is printed) and within the replay bound, so not compiling it loses nothing; under
  another device's rules, with localize, or for a bf16 program, the rounded replay is compiled as
  before;
* the x64-on trace is left out where no torch call makes a float64 tensor: the int64 tensors it
  names are those torch's own CPU run of the model makes (a TorchFunctionMode of this test's own
  on the CPU model is the oracle), and GPT-2's positions are such tensors.
"""

import numpy as np
import pytest
import torch

from tests.parity import torchax_models
from torch_xla_ext import parity
from torch_xla_ext.parity.casts import to_numpy
from torch_xla_ext.parity.causes import replay_figures
from torch_xla_ext.parity.program.stablehlo import Program
from torch_xla_ext.parity.stages import replays, torchax_run


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=256, n_positions=64,
                                       use_cache=False, return_dict=False)).eval()
    return model, (torch.randint(0, 256, (1, 16), generator=torch.Generator().manual_seed(1)),)


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(np.dtype(f"u{a.dtype.itemsize}"))


@pytest.mark.parametrize("name", ["stack", "gpt2"])
def test_the_compiled_run_is_its_own_rounded_replay(name):
    model, args = torchax_models.stack() if name == "stack" else _gpt2()
    run = torchax_run.run_torchax(model, args, {}, None, 0, True, own_replay=True)
    assert run.how is None and run.program.rounded_by_run  # the compiled path
    assert run.program.capture_proto is None  # no block-boundary trace for a replay that is not compiled
    program = Program(run.program.proto)
    compiled = replays.compile_replays(program)  # what the replays would have compiled and run
    rounded = compiled.rounded(run.program.args)
    exact = compiled.exact(run.program.args)
    equal = total = 0
    for (path, x), r, e in zip(run.outputs, rounded, exact):
        got = to_numpy(x)
        r = r.reshape(got.shape)
        assert r.dtype == got.dtype, (r.dtype, got.dtype)
        equal += int((_bits(got) == _bits(r)).sum())
        total += got.size
        *_, reproduced = replay_figures(x, r, e, program.longest_reduction)
        assert reproduced, path
    print(f"{name}: the compiled rounded replay equals the run bit for bit on {equal}/{total} elements")
    assert equal == total  # float32: the same program through the same XLA:CPU


def test_a_narrow_program_keeps_its_rounded_replay():
    """bf16: the rounded replay rounds where its rules place the roundings, which XLA:CPU need not
    (measured: half the elements of this model one bf16 ulp apart), so it is compiled."""
    model, args = torchax_models.stack()
    run = torchax_run.run_torchax(model, args, {}, torch.bfloat16, 0, True, own_replay=True)
    assert not run.program.rounded_by_run
    r = parity.verify(model, args, dtype="bf16", frontend="torchax")
    assert "compile rounded replay" in r.seconds and "The rounded replay is the XLA run itself" not in r.explanation


def test_verify_compiles_the_rounded_replay_only_under_other_rules():
    model, args = torchax_models.stack()
    own = parity.verify(model, args, dtype="fp32", frontend="torchax")
    assert "compile rounded replay" not in own.seconds and "compile exact replay" in own.seconds, own.seconds
    assert "The rounded replay is the XLA run itself" in own.explanation
    assert own.emulation == "matches" and own.reproduced is True
    other = parity.verify(model, args, dtype="fp32", frontend="torchax", rules="tpu-default")
    assert "compile rounded replay" in other.seconds, other.seconds
    assert "The rounded replay is the XLA run itself" not in other.explanation
    localized = parity.verify(model, args, dtype="fp32", frontend="torchax", localize=True)
    assert "compile rounded replay" in localized.seconds and localized.modules  # its module tensors come from it


class _Int64Calls(torch.overrides.TorchFunctionMode):
    """This test's own oracle: the torch calls of a CPU run whose result is an int64 tensor."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor) and out.dtype == torch.int64:
            self.calls.append(getattr(func, "__name__", repr(func)))
        return out


def test_int64_alone_costs_no_x64_trace_and_is_listed():
    model, args = _gpt2()
    oracle = _Int64Calls()
    with torch.no_grad(), oracle:
        model(*args)
    assert oracle.calls  # GPT-2 makes int64 tensors (its positions)
    run = torchax_run.run_torchax(model, args, {}, None, 0, True)
    assert run.wide is not None and run.wide.program is None  # listed, not traced again
    assert run.wide.narrowed and all(n.dtype == "int64" for n in run.wide.narrowed)
    assert len(run.wide.narrowed) == len(oracle.calls), ([n.op for n in run.wide.narrowed], oracle.calls)
    assert all(n.op.rsplit(".", 1)[-1].strip("_") == c.strip("_") for n, c in zip(run.wide.narrowed, oracle.calls))


def test_the_golden_takes_the_exact_replays_float64_weights():
    """The fp64 golden of the model the exact replay ran takes that replay's float64 copies of its
    float32 parameters (the same values: the run's float32 weights widened exactly) instead of
    widening the model again. Oracle: the golden made without them, bit for bit, and the memory
    its parameters sit in (the replay's copies, not fresh casts)."""
    from torch_xla_ext.parity.casts import prepare
    from torch_xla_ext.parity.cpu import run_cpu

    model, args = _gpt2()
    run = torchax_run.run_torchax(model, args, {}, None, 0, True, own_replay=True, share_weights=True)
    assert run.program.widening is not None and run.program.labels is not None
    program = Program(run.program.proto)
    compiled = replays.compile_replays(program, rounded=False)
    compiled.exact(run.program.args, widening=run.program.widening)  # takes every copy
    given = run.program.widened_parameters()
    names = {n for n, _ in model.named_parameters(remove_duplicate=False)}
    assert given and set(given) <= names  # by the model's own names (a tied weight under each)
    assert run.program.widened_parameters() == {}  # handed over once; the Widening holds them no longer
    shared, _ = run_cpu(model, args, {}, torch.float64, 0, via=None, given=given)
    plain, _ = run_cpu(model, args, {}, torch.float64, 0, via=None)
    for (p1, a), (p2, b) in zip(shared, plain):
        assert p1 == p2 and a.dtype == torch.float64
        assert torch.equal(a, b), p1  # bit for bit
    prepared = prepare(model, "cpu", torch.float64, given=given)
    pointers = {a.__array_interface__["data"][0] for a in given.values()}
    used = [p for p in prepared.parameters() if p.data_ptr() in pointers]
    assert len(used) == len({id(p) for p in model.parameters() if p.is_floating_point()})
    # A float64 parameter (torchax runs it in float32 with x64 off: its copy is of the narrowed
    # values) keeps its own cast, as does a cast through bfloat16.
    wide = torch.nn.Linear(2, 2).double()
    narrowed = {n: p.detach().float().double().numpy() + 1.0 for n, p in wide.named_parameters()}
    assert torch.equal(prepare(wide, "cpu", torch.float64, given=narrowed).weight, wide.weight)
    lin = torch.nn.Linear(2, 2)
    other = {n: p.detach().double().numpy() + 1.0 for n, p in lin.named_parameters()}
    assert torch.equal(prepare(lin, "cpu", torch.float64, via=torch.bfloat16, given=other).weight,
                       lin.weight.detach().bfloat16().double())
    assert torch.equal(prepare(lin, "cpu", torch.float64, given=other).weight, lin.weight.detach().double() + 1.0)


def test_a_widening_hands_its_copies_over_only_once_all_were_taken():
    from torch_xla_ext.parity.program.replay import Widening

    a, b = np.float32([1.5, 2.0]), np.float32([3.0])
    w = Widening([a, b], keep=True)
    w.take(0, np.dtype(np.float32), (2,))
    assert w.handed() == {}  # b not taken yet: the replay has not been through its arguments
    w = Widening([a, b], keep=True)
    w.take(0, np.dtype(np.float32), (2,)), w.take(1, np.dtype(np.float32), (1,))
    handed = w.handed()
    assert sorted(handed) == [0, 1] and handed[0][1].tolist() == [1.5, 2.0] and handed[0][0] == np.float32
    assert w.handed() == {}
    assert Widening([a, b]).handed() == {}  # without keep
