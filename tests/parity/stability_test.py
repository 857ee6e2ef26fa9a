"""Causes that hold on any CPU: verify's verdicts and causes on zoo models in fp32 and bf16 do
not move when XLA sums in other orders: with XLA:CPU's Eigen kept to one thread
(``XLA_FLAGS=--xla_cpu_multi_thread_eigen=false``) and with another intra-op thread count
(``PJRT_NPROC=1``: there torch_xla's and jaxlib's XLA sum f32 products in different orders, so
the run and its replay differ in bits). The oracle is the same run in the default configuration;
the bit-equal counts are printed (they may move; the causes may not). A verdict is torch.testing's
tolerance check on XLA's own output, which moves with the summation order too: it may move only
where every difference is rounding in both runs (resnet18's near-zero bf16 logits sit on bf16's
relative tolerance), and the test prints it.

Two models here, the zoo's two whose bits move with the configuration (resnet18 and
mobilenet_v3: convolutions, batch norm, pooling, hardswish); ``bench/parity_stability.py`` sweeps
the whole zoo with more configurations. Two Bazel targets, one per configuration.
"""

import json
import os
import subprocess
import sys

import pytest

from tests.parity.stability_worker import held

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "stability_worker.py")
MODELS = ("resnet18", "mobilenet_v3")
CONFIGS = {
    "eigen": {"XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false"},  # Eigen on one thread
    "threads": {"PJRT_NPROC": "1"},  # one intra-op thread
}


def sweep(tmp_path, extra: dict) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "PJRT_NPROC", "NPROC")}
    env.update(PJRT_DEVICE="CPU", PYTHONPATH=os.pathsep.join(p for p in sys.path if p), **extra)
    out = tmp_path / f"stability-{len(os.listdir(tmp_path))}.json"
    done = subprocess.run([sys.executable, WORKER, str(out), ",".join(MODELS), "fp32,bf16"], env=env,
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def default(tmp_path_factory):
    return sweep(tmp_path_factory.mktemp("default"), {})


@pytest.mark.parametrize("config", ["eigen", "threads"])
def test_verdicts_and_causes_do_not_move_with_the_summation_order(default, config, tmp_path):
    other = sweep(tmp_path, CONFIGS[config])
    for a, b in zip(default, other):
        assert (a["model"], a["dtype"]) == (b["model"], b["dtype"])
        print(f"{config}: {a['model']} {a['dtype']}: bit-equal to the replay {a['bit_equal']}/{a['elements']} "
              f"-> {b['bit_equal']}/{b['elements']}, distance/bound {a['distance_over_bound']:.3g} -> "
              f"{b['distance_over_bound']:.3g}")
        assert b["reproduced"] and a["reproduced"], (a, b)
        ok, note = held(a, b)
        if note:
            print(f"  {note}")
        assert ok, (config, note, a, b)
