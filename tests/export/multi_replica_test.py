"""num_replicas=N against the truth: torch_xla itself on N CPU devices (CPU_NUM_DEVICES=N, one
thread per device, replica 0 compiling first: see multi_replica_worker.py), and a JAX-native
reference (psum/pmax under shard_map, on the 2 JAX CPU devices conftest.py asks for).

torch_xla's own race when its device threads compile concurrently is shown by the manual test
torch_xla_race_test.py, not here: this file is deterministic."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, PartitionSpec as P

from tests.export import bounds
from tests.export import models

from torch_xla_ext import export  # noqa: E402

N = 2
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def setup():
    model, args = models.two_all_reduces()
    bundle = export.export(model, args)
    rng = np.random.default_rng(1)
    per_replica = [tuple(rng.standard_normal(tuple(a.shape)).astype(np.float32) for a in args) for _ in range(N)]
    return model, bundle, per_replica


def torch_xla_replicas(tmp_path, per_replica, *flags, timeout=240):
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, **{f"r{r}_a{k}": a for r, rep in enumerate(per_replica) for k, a in enumerate(rep)})
    env = dict(os.environ, CPU_NUM_DEVICES=str(N), PJRT_DEVICE="CPU",
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.run([sys.executable, os.path.join(HERE, "multi_replica_worker.py"), str(inputs),
                           str(tmp_path / "out.npz"), *flags],
                          env=env, capture_output=True, text=True, timeout=timeout)
    return proc, (np.load(tmp_path / "out.npz") if proc.returncode == 0 else None)


def test_run_n_replicas_equals_torch_xla_on_n_cpu_devices(setup, tmp_path):
    _, bundle, per_replica = setup
    proc, truth = torch_xla_replicas(tmp_path, per_replica)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert list(truth["world_sizes"]) == [N] * N
    ours = export.run(bundle, *per_replica, num_replicas=N)
    assert len(ours) == N
    for r in range(N):
        # The same program on two XLA builds: the summation-order bound (bounds.py); a 2-way
        # all-reduce sum or max does not add an order of its own.
        bounds.assert_same_program([ours[r][0]], [truth[f"r{r}"]], "run vs torch_xla", label=f"replica {r}")
    np.testing.assert_array_equal(ours[0][0], ours[1][0])  # an all-reduce result is replicated


def test_run_n_replicas_equals_shard_map_psum(setup):
    model, bundle, per_replica = setup
    w = model.lin.weight.detach().numpy()
    b = model.lin.bias.detach().numpy()
    off = model.offset.numpy()
    mesh = Mesh(np.array(jax.devices("cpu")[:N]), ("r",))

    def body(x, y):  # per replica: x (1, 2, 4), y (1, 2, 4)
        h = jax.lax.psum(x[0] @ w.T + b + off, "r") * np.float32(0.5)
        h = jnp.tanh(h * np.float32(3.0)) + y[0]
        return jax.lax.pmax(h, "r")[None]

    f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("r"), P("r")), out_specs=P("r")))
    xs = np.stack([rep[0] for rep in per_replica])
    ys = np.stack([rep[2] for rep in per_replica])
    ref = np.asarray(f(xs, ys))
    ours = export.run(bundle, *per_replica, num_replicas=N)
    for r in range(N):
        # JAX's own lowering of the same math (its dot_general and tanh, bias added in another
        # order) is a different program of the same float32 ops: the same summation-order bound.
        bounds.assert_same_program([ours[r][0]], [ref[r]], "run vs shard_map", label=f"replica {r}")
    # every weight inlined: run passes the inlined values to each replica as it passes weights
    lean = export.inline_constants(export.strip_tokens(bundle), weights=True)
    assert lean.resources and lean.manifest.num_user_inputs == len(per_replica[0])
    inlined = export.run(lean, *per_replica, num_replicas=N)
    for r in range(N):
        bounds.assert_same_program([inlined[r][0]], [ref[r]], "inlined run vs shard_map", label=f"replica {r}")


def test_run_rejects_wrong_replica_count(setup):
    _, bundle, per_replica = setup
    with pytest.raises(export.RunInputError, match="expected 2 per-replica tuples"):
        export.run(bundle, per_replica[0], num_replicas=2)
    with pytest.raises(export.RunInputError, match=r"user_inputs\[1\]: expected 3 user inputs"):
        export.run(bundle, per_replica[0], per_replica[1][:2], num_replicas=2)
