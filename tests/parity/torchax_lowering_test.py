"""An op torchax lowers to other math than eager, under frontend="torchax": with aten.gelu's lowering
planted as GELU's tanh form (torchax's public ``override_op_definition``), the report leads with
the cause "op lowering" and names the module, the aten op, the model's line and the function that
computed it. Two controls that would fail the other way: without the plant the same model gets
rounding causes only and torchax's own lowerings of its ops pass the op audit; a 2% weight bug is
still a real difference at its module, the audit finding every op it ran agreeing with eager.

The oracles are not our code: numpy in float64 of GELU's exact (erf) form and of the planted tanh
form on the module's own input (the difference the report shows at that module must be the size
numpy predicts), the model's source (its line), what the test planted (the op and its function),
and where the weight bug was planted (planted.py)."""

import inspect
import json
import math

import numpy as np
import pytest
import torch

from tests.parity import planted
from torch_xla_ext import parity
from torch_xla_ext._compat import torchax_run
from torch_xla_ext.parity.errors import ParityError
from torch_xla_ext.parity.report import OP_LOWERING, REAL_DIFFERENCE, REASSOCIATION, ROUNDING_PLACEMENT, OpAudit
from torch_xla_ext.parity.stages import op_audit

_C = math.sqrt(2.0 / math.pi)  # GELU's tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))


class Expand(torch.nn.Module):
    def __init__(self, d: int, h: int):
        super().__init__()
        self.proj = torch.nn.Linear(d, h)

    def forward(self, x):
        return torch.nn.functional.gelu(self.proj(x))  # the gelu line


class MLP(torch.nn.Module):
    """An MLP whose GELU runs in one named submodule, ``up``."""

    def __init__(self, d: int = 16, h: int = 64):
        super().__init__()
        self.up = Expand(d, h)
        self.down = torch.nn.Linear(h, d)

    def forward(self, x):
        return self.down(self.up(x))


def _model():
    torch.manual_seed(0)
    # Inputs of spread 2: GELU's pre-activations reach |h| ~ 2, where its tanh form departs most.
    return MLP().eval(), (2.0 * torch.randn(8, 16),)


def gelu_tanh(x, approximate="none"):
    """The planted lowering of aten.gelu: its tanh form whatever ``approximate`` asks (torch ops on
    torchax's tensors, as an ``override_op_definition`` function computes)."""
    return 0.5 * x * (1.0 + torch.tanh(_C * (x + 0.044715 * x * x * x)))


def _planted():
    return torchax_run.overridden({torch.ops.aten.gelu.default: gelu_tanh})


def _gelu_line() -> str:
    lines, start = inspect.getsourcelines(Expand.forward)
    k = next(i for i, line in enumerate(lines) if "# the gelu line" in line)
    return f"{inspect.getsourcefile(Expand)}:{start + k}"


def _numpy_gelus(model: MLP, x: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """GELU of ``up``'s pre-activations in numpy float64: (exact erf form, the planted tanh form)."""
    w = model.up.proj.weight.detach().double().numpy()
    b = model.up.proj.bias.detach().double().numpy()
    h = x.double().numpy() @ w.T + b
    exact = 0.5 * h * (1.0 + np.vectorize(math.erf)(h / math.sqrt(2.0)))
    return exact, 0.5 * h * (1.0 + np.tanh(_C * (h + 0.044715 * h ** 3)))


def test_planted_gelu_lowering_is_named_with_its_module_op_and_line():
    model, (x,) = _model()
    with _planted():
        r = parity.verify(model, (x,), frontend="torchax", localize=True)
    (o,) = r.outputs
    assert o.cause == OP_LOWERING and o.same_math is False, r.summary
    assert r.first_divergent_module == "up", r.module_table()
    a = r.op_audit
    assert a is not None and a.module == "up" and a.error is None and a.found is not None, a
    f = a.found
    assert f.op == "aten.gelu.default" and f.overridden
    assert f.lowering == f"{gelu_tanh.__module__}.{gelu_tanh.__qualname__}"
    assert f.module == "up" and f.source == _gelu_line() and f.source_line.endswith("# the gelu line")

    lead = r.summary
    assert lead.startswith("FAIL:") and lead.count(". ") == 0, lead  # one sentence
    for words in ("the cause is an op torchax lowers differently from eager", "aten.gelu.default in up at",
                  _gelu_line(), f.lowering, "override_op_definition(torch.ops.aten.gelu.default"):
        assert words in lead, (words, lead)

    # The op's figure is numpy's greatest |tanh form - erf form| on the module's input, far beyond
    # float64 rounding; the module's own error (RMS, the run's f32 output against the module in fp64
    # on its inputs) is numpy's RMS of it, up to float32 rounding (~1e-7 of a difference of ~1e-4).
    exact, tanh = _numpy_gelus(model, x)
    predicted = float(np.abs(tanh - exact).max())
    assert predicted > 1e6 * f.bound
    assert abs(f.difference - predicted) <= 1e-6 * predicted, (f.difference, predicted)
    rms = float(np.sqrt(np.mean((tanh - exact) ** 2)))
    up = next(m for m in r.modules if m.name == "up")
    assert abs(up.own_error - rms) <= 0.01 * rms, (up.own_error, rms)

    assert OpAudit.from_dict(json.loads(r.to_json())["op_audit"]) == a  # the JSON round-trips


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_without_the_plant_only_rounding_and_torchax_own_lowerings_agree(dtype):
    model, (x,) = _model()
    r = parity.verify(model, (x,), dtype=dtype, frontend="torchax", localize=True)
    assert all(o.cause in (None, REASSOCIATION, ROUNDING_PLACEMENT) for o in r.outputs), r.summary
    assert r.op_audit is None and r.first_divergent_module is None, r.summary  # nothing to audit
    # Audited anyway, torchax's own lowerings of the module's ops (F.linear, aten.gelu) agree with eager.
    a = op_audit.audit(model, torch.float32, "up", 0, (x,), {})
    assert a.error is None and a.found is None and a.compared >= 2, a


def test_planted_weight_bug_stays_a_real_difference_at_its_module():
    model, (x,) = _model()
    plan = ("weight", "up.proj", 0.02)
    broken = planted.plant(model, plan)
    r = parity.verify(broken, (x,), reference=model, frontend="torchax", localize=True)
    (o,) = r.outputs
    assert o.cause == REAL_DIFFERENCE and o.same_math is False, r.summary
    assert r.first_divergent_module == "up.proj", r.module_table()
    flagged = {"" if m.name == "<root>" else m.name for m in r.modules if m.diverges}
    assert all(planted.allowed(p, planted.owners(model, plan)) for p in flagged), flagged
    a = r.op_audit  # the module ran its ops as eager does: no op is blamed
    assert a is not None and a.module == "up.proj" and a.error is None and a.found is None and a.compared >= 1, a
    assert "lowers differently" not in r.summary and "report.op_audit" in r.summary, r.summary
    assert OpAudit.from_dict(json.loads(r.to_json())["op_audit"]) == a


def test_a_saved_audit_missing_a_field_is_named():
    saved = {"module": "up", "call": 0, "compared": 3, "found": {"op": "aten.gelu.default"}, "error": None}
    with pytest.raises(ParityError, match="op_audit.found: missing field 'lowering'"):
        OpAudit.from_dict(saved)
    with pytest.raises(ParityError, match="op_audit: missing field 'compared'"):
        OpAudit.from_dict({"module": "up", "call": 0})
