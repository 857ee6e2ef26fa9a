"""A backend failure is a finding: a mode that fails (torch_xla's stack raising while compiling or
running a step, a worker that dies or times out) keeps every other mode's figures and is named by
its FX node, aten op, the model's source line, the exception and whose code raised it, with what
to try. Checked on torchvision architectures (ConvNeXt, Swin) we did not design, forward and
training, and against the real upstream failure (the canary of the message text we match)."""

import inspect
import json

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F
import torch_xla

from torch_xla_ext import graph_breaks as gb

from tests.graph_breaks import factories

DEVICE = torch_xla.device()
(ADAPTIVE_POOL,) = [k for k in gb.KNOWN_FAILURES if k["aten_op"] == "aten::adaptive_avg_pool2d"]


def pool(x):
    x = x.contiguous(memory_format=torch.channels_last)
    return F.adaptive_avg_pool2d(x, 1)  # the line the finding must point at


def test_canary_torch_xla_still_fails_adaptive_avg_pool2d_with_the_text_we_match():
    """The real upstream failure: torch_xla 2.9's openxla path on a channels_last input. If a
    torch_xla upgrade fixes it or rewords it, this test says the known-failure entry is stale."""
    torch._dynamo.reset()
    x = torch.randn(1, 8, 4, 4).to(DEVICE)
    with pytest.raises(Exception) as info:
        with torch.no_grad():
            torch.compile(pool, backend="openxla")(x)
    assert ADAPTIVE_POOL["message"] in str(info.value)
    f = gb.describe_failure(info.value)
    assert f["aten_op"] == "aten::adaptive_avg_pool2d" and f["known"] == ADAPTIVE_POOL
    assert f["exception"].startswith("RuntimeError: " + ADAPTIVE_POOL["message"])
    assert f["raised_by"].startswith("torch_xla's C++ kernel") and f["layer"] == "torch_xla"
    assert f["node"]["op"] == "call_function" and f["node"]["target"].endswith("adaptive_avg_pool2d")
    line = inspect.getsourcelines(pool)[1] + 2
    assert (f["source"]["file"], f["source"]["line"]) == (__file__, line)
    assert "adaptive_avg_pool2d(x, 1)" in f["source"]["code"]
    # The workaround the finding suggests runs there, and computes the same value as CPU eager.
    torch._dynamo.reset()
    with torch.no_grad():
        y = torch.compile(lambda t: t.contiguous(memory_format=torch.channels_last).mean((-2, -1), keepdim=True),
                          backend="openxla")(x)
    torch.testing.assert_close(y.cpu(), pool(x.cpu()), rtol=1e-6, atol=1e-6)


def test_the_workaround_runs_the_architectures_that_fail():
    """The known workaround, applied to both torchvision architectures: dynamo then runs them and
    agrees with CPU eager."""
    class Mean(torch.nn.Module):
        def forward(self, x):
            return x.mean((-2, -1), keepdim=True)

    for factory in (factories.small_convnext, factories.small_swin):
        model, (x,) = factory()
        with torch.no_grad():
            ref = model(x)
        model.avgpool = Mean()
        torch._dynamo.reset()
        with torch.no_grad():
            y = torch.compile(model.to(DEVICE), backend="openxla")(x.to(DEVICE))
        torch.testing.assert_close(y.cpu(), ref, rtol=1e-4, atol=1e-5)


def check_finding(f, mode, file_suffix):
    assert f["mode"] == mode and f["kind"] == "exception"
    assert f["exception"].startswith("RuntimeError: Expected XLA tensor")
    assert f["aten_op"] == "aten::adaptive_avg_pool2d" and f["known"]["workaround"]
    assert f["source"]["file"].endswith(file_suffix) and "avgpool" in f["source"]["code"]
    assert f["raised_by"].startswith("torch_xla's C++ kernel") and "AOTAutograd" in f["raised_by"]


def test_compare_keeps_lazy_figures_and_names_the_failure_forward(tmp_path):
    cmp = gb.compare("tests.graph_breaks.factories:small_convnext", warmup=1, steps=1)
    lazy, dyn = cmp.modes["lazy"], cmp.modes["dynamo"]
    assert lazy.ok and not dyn.ok and list(cmp.failures) == ["dynamo"]
    # Lazy mode's figures are torch_xla's: one compile, one execution per step.
    assert lazy.report.compiles >= 1 and lazy.steady.executions >= 1 and len(lazy.step_ms) == 1
    check_finding(dyn.failure, "dynamo", "torchvision/models/convnext.py")
    assert dyn.failure["where"] == "warmup step 1 of 1"
    md = cmp.to_markdown()
    for text in ("Finding: dynamo mode failed", "aten::adaptive_avg_pool2d", "convnext.py:", "What to try",
                 "x.mean((-2, -1), keepdim=True)", "lazy mode ran the same forward pass", "torch.compiler.disable"):
        assert text in md, text
    d = json.loads(cmp.to_json())
    assert d["modes"]["dynamo"]["failure"]["aten_op"] == "aten::adaptive_avg_pool2d"
    assert d["modes"]["lazy"]["failure"] is None and d["modes"]["lazy"]["report"]["executions"] >= 1
    page = open(cmp.write_html(str(tmp_path / "c.html"))).read()
    assert "Finding: dynamo mode failed" in page and "What to try" in page


def test_a_training_step_failure_is_a_finding_too():
    cmp = gb.compare(factories.small_swin, modes=("dynamo",), train=True, warmup=1, steps=1, isolation="in-process")
    f = cmp.modes["dynamo"].failure
    check_finding(f, "dynamo", "torchvision/models/swin_transformer.py")
    assert f["step"] == "training step"
    # What ran before the failure is kept: Dynamo compiled the step's first frame.
    assert cmp.modes["dynamo"].report.dynamo_compiles >= 1


def test_a_worker_that_dies_is_a_finding_naming_the_signal_and_its_stderr():
    cmp = gb.compare("tests.graph_breaks.factories:segfault", modes=("lazy",), warmup=1, steps=1)
    f = cmp.modes["lazy"].failure
    assert f["kind"] == "worker died" and f["exit_code"] == -11 and "SIGSEGV" in f["exception"]
    assert "about to crash in native code" in "\n".join(f["stderr_tail"])
    assert "SIGSEGV" in cmp.to_markdown() and "about to crash in native code" in cmp.to_markdown()


def test_bad_input_still_raises():
    with pytest.raises(gb.GraphBreakError, match="must return \\(model, args\\)"):
        gb.compare("tests.graph_breaks.factories:not_a_pair", modes=("lazy",), steps=1)


def test_a_failure_while_the_bridge_runs_a_graph_is_described_by_its_frames():
    """torch_xla 2.9's bridge fails at run time on a training step that returns `loss.detach()`
    (a graph it never compiled, see docs/graph_breaks.md): no FX node runs there, and the
    innermost frame is the bridge's call into torch_xla's C++ runtime."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4).to(DEVICE)
    x = torch.randn(2, 4).to(DEVICE)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(x):
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        return loss.detach()

    torch_xla.sync()
    with pytest.raises(RuntimeError) as info:
        torch.compile(step, backend="openxla")(x)
        torch_xla.sync()
    f = gb.describe_failure(info.value)
    assert f["layer"] == "XLA runtime" and "_XLAC._run_cached_graph" in f["raised_by"]
    assert "torch_xla's openxla bridge" in f["raised_by"] and "torch_xla's openxla bridge" in f["layers"]
    assert f["node"] is None and f["known"] is None


def one_value_norm(x):
    return F.batch_norm(x, None, None, training=True)  # one value per channel: PyTorch refuses


def test_a_failure_in_pytorchs_own_code_is_named_as_pytorchs():
    """The same failure as torchvision's efficientnet_b0 training step at batch 1 (its squeeze-
    excitation block normalises one value per channel): raised by PyTorch's own check while
    Dynamo runs the node on fake tensors, so the advice starts with the CPU eager check."""
    torch._dynamo.reset()
    x = torch.randn(1, 4).to(DEVICE)
    with pytest.raises(Exception) as info:
        torch.compile(one_value_norm, backend="openxla")(x)
    with pytest.raises(ValueError):  # the oracle: CPU eager fails the same way
        one_value_norm(x.cpu())
    f = gb.describe_failure(info.value)
    assert f["layer"] == "PyTorch" and f["raised_by"].startswith("PyTorch (functional.py:")
    assert f["aten_op"] == "aten::batch_norm" and f["node"]["target"].endswith("batch_norm")
    assert f["source"]["line"] == inspect.getsourcelines(one_value_norm)[1] + 1
    cmp = gb.Comparison({}, 0, 1)
    assert cmp.try_instead(dict(f, mode="dynamo"))[0].startswith("Run the same step eagerly on the CPU")
