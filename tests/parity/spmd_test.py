"""The #8747 configuration under SPMD on 4 CPU devices (CPU_NUM_DEVICES=4): the input is
sharded over a 4-device mesh; XLA still equals the rounded replay within its bound (bit-equality
is a printed figure), and fp32 passes. The device count must be set before torch_xla starts its runtime."""

import os

# tests/conftest.py runs this file in a pytest process of its own (Bazel gives every file one).
OWN_PROCESS = "sets CPU_NUM_DEVICES before torch_xla starts and turns SPMD on at import (xr.use_spmd())"

os.environ["CPU_NUM_DEVICES"] = "4"
os.environ.setdefault("PJRT_DEVICE", "CPU")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import torch_xla  # noqa: E402
import torch_xla.distributed.spmd as xs  # noqa: E402
import torch_xla.runtime as xr  # noqa: E402

from torch_xla_ext import parity  # noqa: E402
from torch_xla_ext._compat.scan import scan_layers  # noqa: E402

xr.use_spmd()


def test_four_cpu_devices_are_available():
    assert xr.global_runtime_device_count() == 4


class ShardedStack(torch.nn.Module):
    def __init__(self, layers, mesh):
        super().__init__()
        self.layers = torch.nn.ModuleList(layers)
        self.mesh = mesh

    def forward(self, x):
        if x.device.type == "xla":
            # (3, 4, 5, 128): shard the size-4 dim over the 4 devices.
            xs.mark_sharding(x, self.mesh, (None, "data", None, None))
            return scan_layers(list(self.layers), x)
        for layer in self.layers:
            x = layer(x)
        return x


@pytest.fixture(scope="module")
def setup():
    mesh = xs.Mesh(np.arange(4), (4,), ("data",))
    layers, reference, x = parity.scan_patched_linear_example()
    return ShardedStack(layers, mesh), ShardedStack(reference, None), x


def test_spmd_bf16_is_rounding_placement(setup):
    fn, reference, x = setup
    r = parity.verify(fn, (x,), dtype="bf16", reference=reference)
    assert "mhlo.sharding" in r.hlo_text or "@Sharding" in r.hlo_text  # the program really is sharded
    (o,) = r.outputs
    assert r.verdict == parity.Verdict.FAIL and o.xla_vs_cpu.mismatched > 0
    # The replays run the program on one device with its shardings dropped: still within the bound.
    assert r.reproduced and o.replay_distance <= o.replay_bound and o.emulated.total == 7680
    print(f"SPMD bf16 XLA vs rounded replay: {o.emulated.total - o.emulated.mismatched}/7680 bit-equal")
    assert r.hlo_math == "same"
    assert o.cause == "rounding placement" and "Rounding placement explains" in r.explanation


def test_spmd_fp32_passes(setup):
    fn, reference, x = setup
    r = parity.verify(fn, (x,), dtype="fp32", reference=reference)
    assert r.passed
    (o,) = r.outputs  # bit-equality with CPU eager is a figure (summation order depends on the CPU)
    print(f"SPMD fp32 XLA vs CPU eager: {o.xla_vs_cpu.ulp_histogram.get('0', 0)}/{o.xla_vs_cpu.total} bit-identical")
    assert o.cause in (None, "reassociation")
