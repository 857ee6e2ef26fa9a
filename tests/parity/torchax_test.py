"""Parity under frontend="torchax": a model whose differences are rounding only gets no "real
difference" (fp32 and bf16), a 2% single-weight bug planted on the torchax side is found at its
module, a capture made through torchax is compared from its file, and bad input (an unknown
frontend, a capture of another frontend, a device for torchax, a model torchax cannot run) raises a
typed error naming it.

The oracles: the fp64 golden and CPU eager (verify's own), where the bug was planted
(``planted.py``), and JAX's own device list for the device the report names."""

import jax
import pytest
import torch

from tests.parity import planted, torchax_models
from torch_xla_ext import _frontend, parity
from torch_xla_ext.parity.errors import ParityError
from torch_xla_ext.parity.report import REAL_DIFFERENCE


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_rounding_only_is_no_real_difference(dtype):
    model, args = torchax_models.stack()
    r = parity.verify(model, args, dtype=dtype, frontend="torchax", localize=True)
    assert r.frontend == "torchax"
    assert r.device == jax.devices()[0].platform.upper()
    assert r.hlo_text.startswith("module @jit")  # the program is JAX's lowering of the compiled forward
    assert r.emulation != "unavailable" and r.reproduced is True, r.emulation
    assert all(o.cause != REAL_DIFFERENCE for o in r.outputs), r.summary
    assert r.first_divergent_module is None, r.module_table()
    # every module call of the run is localised (3 blocks of 5 modules, the head, the root)
    assert {m.name for m in r.modules} >= {"blocks.0.fc1", "blocks.2.norm", "head", "<root>"}


def test_planted_weight_bug_found_at_its_module():
    model, args = torchax_models.stack()
    plan = ("weight", "blocks.1.fc2", 0.02)
    broken = planted.plant(model, plan)
    r = parity.verify(broken, args, reference=model, dtype="fp32", frontend="torchax", localize=True)
    assert not r.passed
    assert r.first_divergent_module == "blocks.1.fc2", r.module_table()
    flagged = {"" if m.name == "<root>" else m.name for m in r.modules if m.diverges}  # the root's path is ""
    assert all(planted.allowed(p, planted.owners(model, plan)) for p in flagged), flagged


def test_capture_through_torchax_compared_from_its_file(tmp_path):
    model, args = torchax_models.stack()
    path = parity.capture(model, args, dtype="bf16", frontend="torchax").save(tmp_path / "torchax.safetensors")
    cap = parity.load_capture(path)
    assert cap.info["frontend"] == "torchax" and isinstance(cap.program, str)
    r = parity.compare_capture(path, model, args, frontend="torchax")
    assert r.modules and r.first_divergent_module is None, r.module_table()
    assert all(o.cause != REAL_DIFFERENCE for o in r.outputs), r.summary
    with pytest.raises(ParityError, match="made through torchax, not torch_xla"):
        parity.compare_capture(path, model, args, frontend="torch_xla")
    with pytest.raises(_frontend.UnknownFrontendError, match="frontend: 'jax' is not a frontend"):
        parity.compare_capture(path, model, args, frontend="jax")


@pytest.mark.parametrize("call", ["verify", "localize", "capture", "scan_layers"])
def test_unknown_frontend_is_named(call):
    model, args = torchax_models.stack()
    fn = {"verify": lambda: parity.verify(model, args, frontend="torch-xla"),
          "localize": lambda: parity.localize(model, args, frontend="torch-xla"),
          "capture": lambda: parity.capture(model, args, frontend="torch-xla"),
          "scan_layers": lambda: parity.scan_layers(list(model.blocks), args[0], frontend="torch-xla")}[call]
    with pytest.raises(_frontend.UnknownFrontendError, match="frontend: 'torch-xla' is not a frontend; known are"):
        fn()


def test_torchax_refuses_what_it_does_not_have():
    model, args = torchax_models.stack()
    with pytest.raises(ParityError, match="scan_layers checks torch_xla's scan_layers, which torchax does not have"):
        parity.scan_layers(list(model.blocks), args[0], frontend="torchax")
    with pytest.raises(ParityError, match="device: the torchax frontend runs on JAX's default device"):
        parity.capture(model, args, frontend="torchax", device="xla:0")


class _CpuTable(torch.nn.Module):
    """Adds a table made on the CPU (no device=): torchax cannot mix it with its own tensors."""

    def forward(self, x):
        return x + torch.arange(x.shape[-1], dtype=x.dtype)  # the CPU tensor


def test_a_model_torchax_cannot_run_is_named_with_its_line():
    with pytest.raises(parity.FrontendRunError) as e:
        parity.verify(_CpuTable(), (torch.ones(2, 4),), frontend="torchax")
    message = str(e.value)
    assert message.startswith("torchax cannot run _CpuTable (it ran on the CPU)")
    assert "torchax_test.py" in message and "# the CPU tensor" in message


def test_cli_names_the_unknown_frontend(capsys):
    from torch_xla_ext.cli import main

    assert main(["parity", "--model", "tests.parity.torchax_models:stack", "--frontend", "jax"]) == 2
    assert "--frontend: 'jax' is not a frontend" in capsys.readouterr().err


def test_cli_runs_through_torchax(capsys):
    from torch_xla_ext.cli import main

    assert main(["parity", "--model", "tests.parity.torchax_models:stack", "--frontend", "torchax", "--dtype",
                 "fp32"]) == 0
    out = capsys.readouterr()
    assert "torchax" in out.err and out.out.startswith("Parity verdict: PASS (float32)")
