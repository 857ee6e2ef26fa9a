"""torch_xla's own users of xla_builder.call_jax: the SPMD backward of scan over XLAPatchedLinear
(EinsumLinear) layers goes Scan.backward -> _backward_shard_alike -> shard_as -> call_jax, which
fails in stock torch_xla 2.9 without flax (torchax not importable). With jax_call.install() it runs, on 4 CPU devices
(CPU_NUM_DEVICES), and matches the CPU gradient.

Not bit-equal: XLA computes the einsum-based linear backward with a different summation order
than CPU addmm/mm, and the 2x2 mesh splits the reductions; fp32 default tolerances apply."""

import copy
import os

OWN_PROCESS = "SPMD mode and CPU_NUM_DEVICES=4 are process-wide"
os.environ["CPU_NUM_DEVICES"] = "4"

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import torch_xla  # noqa: E402
import torch_xla.core.xla_builder as xb  # noqa: E402
import torch_xla.distributed.spmd as xs  # noqa: E402
import torch_xla.runtime as xr  # noqa: E402
from torch_xla.distributed.spmd.xla_sharding import EinsumLinear, apply_xla_patch_to_nn_linear  # noqa: E402
from torch_xla.experimental.scan_layers import scan_layers  # noqa: E402

from tests.jax_call.without_torchax import without_torchax  # noqa: E402
from torch_xla_ext import jax_call  # noqa: E402

xr.use_spmd()


def make_model(seed):
    torch.manual_seed(seed)
    return [torch.nn.Sequential(torch.nn.Linear(16, 16)) for _ in range(3)], torch.randn(8, 16)


def xla_backward(cpu_layers, x_cpu):
    mesh = xs.Mesh(np.arange(xr.global_runtime_device_count()), (2, 2), ("data", "model"))
    layers = [apply_xla_patch_to_nn_linear(copy.deepcopy(layer)).to("xla") for layer in cpu_layers]
    for layer in layers:
        assert isinstance(layer[0], EinsumLinear)  # forward/backward through XLAPatchedLinear
        xs.mark_sharding(layer[0].weight, mesh, ("model", None))
    x = x_cpu.clone().to("xla").requires_grad_(True)
    xs.mark_sharding(x, mesh, ("data", None))
    scan_layers(layers, x).sum().backward()
    torch_xla.sync()
    return layers, x


def test_several_cpu_devices():
    assert xr.global_runtime_device_count() == 4
    assert xr.is_spmd()


def test_stock_call_jax_fails_without_flax():
    assert not jax_call.is_installed()
    cpu_layers, x_cpu = make_model(0)
    with without_torchax(), pytest.raises(AssertionError, match="Jax is required for this feature"):
        xla_backward(cpu_layers, x_cpu)


def test_installed_call_jax_runs_backward_and_matches_cpu():
    cpu_layers, x_cpu = make_model(1)
    jax_call.install()
    try:
        before = jax_call.cache_info()
        layers, x = xla_backward(cpu_layers, x_cpu)
        after = jax_call.cache_info()
    finally:
        jax_call.uninstall()
    # shard_as ran through our call_jax: the carry (8x16) and the layer weights and biases.
    assert after.lowerings - before.lowerings == 3
    # The CPU reference runs after the XLA backward: a CPU backward first in this process makes
    # torch's autograd engine size its device queues before the XLA SPMD backward and fail an
    # internal assert ("device_ready_queues_").
    x_ref = x_cpu.clone().requires_grad_(True)
    y = x_ref
    for layer in cpu_layers:
        y = layer(y)
    y.sum().backward()
    torch.testing.assert_close(x.grad.cpu(), x_ref.grad)
    for ours, ref in zip(layers, cpu_layers):
        torch.testing.assert_close(ours[0].weight.grad.cpu(), ref[0].weight.grad)
        torch.testing.assert_close(ours[0].bias.grad.cpu(), ref[0].bias.grad)
