"""Whole models recorded on an NVIDIA H100 (XLA:GPU), compared here as a GPU user would compare them.

tests/parity/fixtures/h100/README.md says how each recording was made: the zoo's gpt2, bert, llama
and vit, and the CNN of ``convnet.py``, captured in fp32 on XLA:CPU with torch_xla 2.9
(``parity.capture(model, args, kwargs, dtype="fp32")``), the capture's program run on the H100 on the
capture's arguments. Here each model's capture is made again (the test checks it is the same program
on the same arguments, by the recordings' hashes) and its outputs are swapped for the GPU's, with the
device type CUDA: what ``parity.capture`` on that GPU would have written. No GPU is needed.

Oracles: the GPU's own outputs, and fp64 goldens of the model. With default arguments
(``rules="auto"``: gpu-tf32, read from each dot's precision_config DEFAULT and the device) the lead
sentence names TF32 and the replay reproduces the GPU within the bound; under XLA:CPU's rules, given,
the report says the GPU's precision would read as a real difference; and a 2% change to one weight of
the reference, against the same recording, is a real difference found at that module, not TF32.

Each model captures once (one torch_xla run) and compares three times; the targets split the models
(tests/parity/BUILD)."""

import copy
import dataclasses
import hashlib
import importlib.util
import json
import pathlib

import numpy as np
import pytest
import torch

from tests import zoo
from tests.parity import planted
from torch_xla_ext import parity

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "h100"
MANIFEST = json.loads((FIXTURES / "recordings.json").read_text())
MODELS = ("gpt2", "bert", "llama", "vit", "convnet")


def _tf32(a: np.ndarray) -> np.ndarray:
    """float32 rounded to TensorFloat-32, to nearest even (as in make_manifest.py)."""
    bits = a.view(np.uint32).astype(np.uint64)
    return ((((bits + 0xFFF + ((bits >> 13) & 1)) >> 13) << 13).astype(np.uint32)).view(np.float32)


def _build(name: str):
    if name != "convnet":
        return zoo.build(name)
    spec = importlib.util.spec_from_file_location("h100_convnet", FIXTURES / "convnet.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.convnet()


def _same_run(name: str, cap) -> None:
    """The capture made here is the program the GPU ran, on the arguments it ran on: each argument
    bit for bit, or equal once rounded to TF32 (what the GPU's matmuls multiply: torchvision's ViT
    initialises its patch embedding with trunc_normal_, whose erfinv differs by an f32 ulp on a few
    elements between CPUs)."""
    recorded = MANIFEST[name]
    text = parity.Program.from_hlo_proto(cap.program).text
    assert hashlib.sha256(text.encode()).hexdigest() == recorded["program_sha256"]
    assert len(cap.program_args) == len(recorded["arguments"])
    for k, (a, want) in enumerate(zip(cap.program_args, recorded["arguments"])):
        a = np.ascontiguousarray(a)
        assert (str(a.dtype), list(a.shape)) == (want["dtype"], want["shape"]), k
        if hashlib.sha256(a.tobytes()).hexdigest() != want["sha256"]:
            assert hashlib.sha256(_tf32(a).tobytes()).hexdigest() == want["tf32_sha256"], k


def _as_recorded(name: str, cap):
    """``cap`` with the GPU's outputs (the program's results in order) and device type CUDA. The
    model's own call returns the outputs, so its recorded outputs are the GPU's too."""
    recorded = np.load(FIXTURES / "outputs_default.npz")
    values = [torch.from_numpy(recorded[f"{name}/{k}"].copy()) for k in range(len(cap.outputs))]
    assert [tuple(v.shape) for v in values] == [tuple(t.shape) for t in cap.outputs.values()]
    outputs = dict(zip(cap.outputs, values))
    calls = list(cap.calls)
    root = calls[-1]
    assert root.path == "" and len(root.outputs) == len(outputs)
    for (path, t), v in zip(root.outputs.items(), values):
        assert tuple(t.shape) == tuple(v.shape), path
    calls[-1] = dataclasses.replace(root, outputs=dict(zip(root.outputs, values)))
    return dataclasses.replace(cap, calls=calls, outputs=outputs, device="xla:0", device_type="CUDA")


@pytest.fixture(scope="module", params=MODELS)
def recorded(request):
    name = request.param
    model, args, kwargs = _build(name)
    cap = parity.capture(model, args, kwargs, dtype="fp32")
    _same_run(name, cap)
    return name, model, args, kwargs, _as_recorded(name, cap)


def test_default_arguments_name_the_gpus_tf32_and_the_replay_is_within_the_bound(recorded):
    name, model, args, kwargs, cap = recorded
    r = parity.compare_capture(cap, model, args, kwargs)
    assert r.device == "CUDA" and r.rules == "gpu-tf32"
    assert r.rules_source.startswith("read from the program's precision_config (DEFAULT on ")
    assert r.rules_source.endswith("and the device (CUDA)")
    # The GPU against the gpu-tf32 replay of its program: within the bound on every output; and
    # the replay with XLA:CPU's f32 matmuls does not reproduce it.
    for o in r.outputs:
        assert o.reproduced and o.replay_distance <= o.replay_bound, (o.path, o.replay_distance, o.replay_bound)
        assert o.xla_cpu_reproduced is False and o.cause == "matmul precision", (o.path, o.cause)
    print(name, [(o.path, f"{o.replay_distance:.3g} <= {o.replay_bound:.3g}",
                  f"bit-equal {o.emulated.total - o.emulated.mismatched}/{o.emulated.total}") for o in r.outputs])
    assert r.verdict == parity.Verdict.FAIL  # TF32 is far outside fp32's tolerance of CPU eager
    lead = r.summary
    print(lead)
    assert "the cause is the GPU's matmul precision" in lead and "TensorFloat-32" in lead and "gpu-tf32" in lead
    assert "torch_xla.backends.set_mat_mul_precision('highest') computes them in f32" in lead
    assert "real difference" not in lead
    assert r.first_divergent_module is None, r.module_table()


def test_under_xla_cpus_rules_the_gpus_precision_reads_as_a_real_difference_and_the_report_says_so(recorded):
    name, model, args, kwargs, cap = recorded
    r = parity.compare_capture(cap, model, args, kwargs, rules="xla-cpu")
    assert r.rules == "xla-cpu" and r.rules_source == "given"
    assert set(r.causes.values()) == {"real difference"} and r.reproduced is False
    assert ("XLA ran on CUDA, and this report applied XLA:CPU's rules (given): CUDA's own matmul precision would "
            "read as a real difference; rerun with rules='auto'") in r.explanation


def test_a_two_percent_weight_change_is_a_real_difference_at_its_module_not_tf32(recorded):
    """The reference's middle linear/conv weight x 1.02, against the unchanged recording: the lead
    is a real difference at that module (own error 40x its TF32 rounding level in BERT's case)."""
    name, model, args, kwargs, cap = recorded
    plan = ("weight", planted.middle_weight(model), 0.02)
    reference = planted.plant(model, plan)
    r = parity.compare_capture(copy.deepcopy(cap), reference, args, kwargs)
    assert r.rules == "gpu-tf32"
    # An output the bug moves by less than TF32's rounding (BERT's pooler, behind attention's
    # softmax: 7e-7 RMS) is still explained by the GPU's precision; the others are real differences.
    assert "real difference" in r.causes.values() and set(r.causes.values()) <= {"real difference",
                                                                               "matmul precision"}, r.causes
    assert r.first_divergent_module == plan[1], r.module_table()
    bugged = planted.owners(reference, plan)
    assert all(planted.allowed(m.path, bugged) for m in r.modules if m.diverges), r.module_table()
    lead = r.summary
    assert "real difference" in lead and f"the first divergent module is {plan[1]}" in lead
    assert "TensorFloat-32" not in lead and "matmul precision" not in lead
