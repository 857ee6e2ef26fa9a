"""load() of torch_xla's own save_as_stablehlo directories of the kinds torch_xla's StableHLO tests
make: MLIR debug info (text that does not parse: the bytecode is read), complex64 state, list and
float arguments; and the typed errors for what cannot run here: a pt2e-quantized module (the
`quant` dialect) and dynamic shapes (naming the argument). Each runnable one is checked against
torch_xla loading and executing the same directory (StableHLOGraphModule.load)."""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch_xla
from torch_xla import stablehlo as shlo

from torch_xla_ext import export  # noqa: E402

from tests.export import bounds  # noqa: E402  (JAX's XLA vs torch_xla's: the summation-order bound)


def _save(model, args, path, dynamic_shapes=None, options=None):
    ep = torch.export.export(model, args, dynamic_shapes=dynamic_shapes)
    shlo.save_as_stablehlo(ep, str(path), options)
    return ep


def _theirs(path, args):
    dev = torch_xla.device()
    gm = shlo.StableHLOGraphModule.load(str(path))
    res = gm(*[a.to(dev) if isinstance(a, torch.Tensor) else a for a in args])
    return [r.cpu().numpy() for r in torch.utils._pytree.tree_leaves(res)]


class Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 16)

    def forward(self, x):
        return torch.relu(self.fc(x))


DEBUG_INFO_CHILD = """
import sys, torch
from torch_xla import stablehlo as shlo
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU())
options = shlo.StableHLOExportOptions()
options.export_node_metadata = True
shlo.save_as_stablehlo(torch.export.export(model, (torch.rand(2, 4),)), sys.argv[1], options)
"""


def _child(code, path, **env):
    proc = subprocess.run([sys.executable, "-c", code, str(path)], env=dict(os.environ, PJRT_DEVICE="CPU", **env),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_debug_info_text_falls_back_to_bytecode(tmp_path):
    # torch_xla reads XLA_HLO_DEBUG (which export_node_metadata sets) once per process: whether an
    # export carries debug info depends on the process's first one, so this one runs in a child.
    _child(DEBUG_INFO_CHILD, tmp_path)
    args = (torch.rand(2, 4),)
    text = (tmp_path / "functions" / "forward.mlir").read_text()
    assert "XLA_MLIR_DEBUGINFO_BEGIN" in text  # bare string locations: MLIR cannot parse this text
    loaded = export.load(tmp_path)
    assert [i.kind for i in loaded.manifest.inputs] == ["parameter", "parameter", "user_input"]
    bounds.assert_same_program(export.run(loaded, args[0].numpy()), _theirs(tmp_path, args)[:1], "run vs torch_xla")


def test_export_with_node_metadata_keeps_a_parsable_module(tmp_path):
    torch.manual_seed(0)
    args = (torch.rand(2, 4),)
    bundle = export.export(Linear(), args, options=export.ExportOptions(export_node_metadata=True))
    bundle.save(tmp_path)  # module.mlir is text MLIR prints and parses back
    loaded = export.load(tmp_path)
    want = export.run(bundle, args[0].numpy())[0]
    np.testing.assert_array_equal(export.run(loaded, args[0].numpy())[0], want)


class Rotary(torch.nn.Module):
    """llama-style: a complex64 buffer of rotations applied to a float input viewed as complex."""

    def __init__(self):
        super().__init__()
        self.register_buffer("freqs_cis", torch.polar(torch.ones(8), torch.linspace(0.0, 3.0, 8)))

    def forward(self, x):
        return torch.view_as_real(torch.view_as_complex(x) * self.freqs_cis)


def test_complex_buffer(tmp_path):
    args = (torch.randn(8, 2),)
    _save(Rotary(), args, tmp_path)
    loaded = export.load(tmp_path)
    (state,) = [i for i in loaded.manifest.inputs if i.kind == "parameter"]
    assert (state.name, state.dtype) == ("freqs_cis", "complex64")
    bounds.assert_same_program(export.run(loaded, args[0].numpy()), _theirs(tmp_path, args)[:1], "run vs torch_xla")


class LayerNorm(torch.nn.Module):
    def forward(self, x, shape, w, b, eps):
        return torch.ops.aten.native_layer_norm(x, shape, w, b, eps)[0]


def test_list_and_float_arguments(tmp_path):
    """torch_xla's test: native_layer_norm(x, [8], w, b, eps)."""
    args = (torch.randn(2, 8), [8], torch.randn(8), torch.randn(8), 1e-5)
    _save(LayerNorm(), args, tmp_path)
    loaded = export.load(tmp_path)
    # torch_xla's meta names the Python values' types; they are not arguments of main
    assert [(u["position"], u["dtype"]) for u in loaded.manifest.unused_inputs] == [
        (1, "python:list"), (4, "python:float")]
    loaded.save(tmp_path / "again")  # and our bundle of it validates on load
    again = export.load(tmp_path / "again")
    got = export.run(again, args[0].numpy(), [8], args[2].numpy(), args[3].numpy(), 1e-5)[0]
    bounds.assert_same_program([got], _theirs(tmp_path, args)[:1], "run vs torch_xla")
    # Our own export flattens the list: its int is a Python constant run() checks.
    bundle = export.export(LayerNorm(), args)
    assert [(u["name"], u["dtype"], u.get("value")) for u in bundle.manifest.unused_inputs] == [
        ("shape[0]", "python:int", 8), ("eps", "python:float", 1e-5)]
    leaves = [args[0].numpy(), 8, args[2].numpy(), args[3].numpy(), 1e-5]
    np.testing.assert_array_equal(export.run(bundle, *leaves)[0], got)


def test_quantized_module_is_a_typed_error_naming_the_dialect(tmp_path):
    from torch.ao.quantization.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torch.ao.quantization.quantizer.xnnpack_quantizer import (XNNPACKQuantizer,
                                                                     get_symmetric_quantization_config)

    torch.manual_seed(0)
    args = (torch.randn(2, 8),)
    m = torch.export.export(torch.nn.Sequential(torch.nn.Linear(8, 8)).eval(), args).module()
    m = prepare_pt2e(m, XNNPACKQuantizer().set_global(get_symmetric_quantization_config()))
    m(*args)
    m = convert_pt2e(m, fold_quantize=False)
    _save(m, args, tmp_path)
    assert "!quant.uniform" in (tmp_path / "functions" / "forward.mlir").read_text()
    with pytest.raises(export.BundleError, match=r"uses the MLIR dialect 'quant'") as e:
        export.load(tmp_path)
    assert str(tmp_path) in str(e.value)
    with pytest.raises(export.BundleError, match=r"uses the MLIR dialect 'quant'"):
        export.export(m, args)


DYNAMIC_CHILD = """
import sys, torch
from torch_xla import stablehlo as shlo
model = torch.nn.Sequential(torch.nn.Linear(4, 16))
ep = torch.export.export(model, (torch.rand(3, 4),), dynamic_shapes=({0: torch.export.Dim("batch")},))
shlo.save_as_stablehlo(ep, sys.argv[1])
"""


def test_dynamic_shape_is_a_typed_error_naming_the_argument(tmp_path):
    # torch_xla exports unbounded dynamism only with this process-wide switch: in a child process.
    _child(DYNAMIC_CHILD, tmp_path, EXPERIMENTAL_XLA_UNBOUNDED_DYNAMISM="1")
    with pytest.raises(export.BundleError,
                       match=r"main's argument 2 \(user input at position 0\): type tensor<\?x4xf32> has "
                             r"dynamic dimension\(s\) \[0\]") as e:
        export.load(tmp_path)
    assert os.fspath(tmp_path) in str(e.value)
