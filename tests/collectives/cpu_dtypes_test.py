"""all_reduce of bf16/f16 on XLA:CPU: torch_xla 2.9 fails at execution, and because it threads one
token through every all-reduce, each later all-reduce in the process fails the same way. Our
wrapper refuses it up front with a typed error and a float32 hint."""

import subprocess
import sys
import textwrap

import pytest
import torch
import torch_xla

from torch_xla_ext import collectives


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_wrapper_refuses_half_precision_on_cpu(dtype):
    x = torch.ones(4, dtype=dtype).to(torch_xla.device())
    before = collectives.next_sequence()
    with pytest.raises(collectives.CollectiveArgumentError, match=r"XLA:CPU cannot all-reduce .*float32"):
        collectives.all_reduce("sum", x, scale=0.5)
    assert collectives.recorded_calls(since=before) == []  # nothing lowered, nothing recorded


def test_float32_reduce_with_the_hint_works():
    x = torch.arange(4, dtype=torch.bfloat16).to(torch_xla.device())
    y = collectives.all_reduce("sum", x.float(), scale=0.5).to(x.dtype)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.cpu(), torch.arange(4, dtype=torch.bfloat16) * 0.5, rtol=0, atol=0)


def test_why_torch_xla_half_all_reduce_must_not_reach_the_runtime():
    # In a fresh process: torch_xla's own traceable all-reduce of bf16 fails at execution; plain
    # float32 work still runs, but the next (float32) all-reduce depends on the failed one's
    # token and fails with the same error.
    code = textwrap.dedent("""
        import torch, torch_xla
        dev = torch_xla.device()
        x = torch.ones(4, dtype=torch.bfloat16).to(dev)
        try:
            torch.ops._c10d_functional.all_reduce(x, "sum", "").cpu()
        except RuntimeError as e:
            print("first:", str(e).splitlines()[0])
        print("plain:", (torch.ones(2).to(dev) * 3).cpu().tolist())
        try:
            print("later:", torch.ops._c10d_functional.all_reduce(torch.ones(2).to(dev), "sum", "").cpu().tolist())
        except RuntimeError as e:
            print("later failed:", str(e).splitlines()[0])
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert "first: AllReduce for datatype 'bf16' is not supported" in out.stdout, out.stderr[-2000:]
    assert "plain: [3.0, 3.0]" in out.stdout
    assert "later failed: AllReduce for datatype 'bf16' is not supported" in out.stdout
