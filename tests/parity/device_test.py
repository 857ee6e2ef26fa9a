"""The device: no command overrides the one the user's environment selects, `--device` picks one on
purpose, every parity report names the device it ran on (checked against torch_xla's own
runtime), and on a device other than CPU the explanation says its rounding rules are XLA:CPU's.

No GPU or TPU here: the non-CPU paths run with real selections torch_xla cannot start (TPU without
libtpu), which must fail loudly instead of measuring XLA:CPU."""

import json
import os
import subprocess
import sys

import torch_xla.runtime as xr


from tests.parity import factories

from torch_xla_ext import parity  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT_S = 300


def _env(**extra):
    path = os.pathsep.join([HERE] + [p for p in sys.path if p])
    env = {k: v for k, v in os.environ.items() if k != "PJRT_DEVICE"}
    return dict(env, PYTHONPATH=path, **extra)


def test_a_report_names_the_device_it_ran_on():
    model, args = factories.linear()
    r = parity.verify(model, args, dtype="fp32")
    assert r.device == xr.device_type() == "CPU"  # torch_xla's own answer
    assert str(r).startswith(f"Parity verdict: {r.verdict.value} (float32) on XLA:CPU")
    assert r.to_dict()["device"] == "CPU"
    assert "not verified" not in r.explanation  # the non-CPU caveat is for other devices only


def _cli(args, **env):
    return subprocess.run([sys.executable, "-m", "torch_xla_ext", *args], env=_env(**env), cwd=HERE,
                          capture_output=True, text=True, timeout=TIMEOUT_S)


def test_the_environments_device_is_not_overridden(tmp_path):
    """PJRT_DEVICE=TPU on a host without one: the command fails on TPU; it used to run on CPU."""
    out = tmp_path / "r.json"
    proc = _cli(["parity", "--model", "factories:linear", "--dtype", "fp32", "--json", str(out)], PJRT_DEVICE="TPU")
    assert proc.returncode != 0 and "libtpu" in proc.stderr, proc.stderr[-2000:]
    assert not out.exists()


def test_device_option_overrides_the_environment_on_purpose(tmp_path):
    out = tmp_path / "r.json"
    failed = _cli(["parity", "--model", "factories:linear", "--dtype", "fp32", "--device", "TPU"], PJRT_DEVICE="CPU")
    assert failed.returncode != 0 and "libtpu" in failed.stderr, failed.stderr[-2000:]
    ran = _cli(["--device", "cpu", "parity", "--model", "factories:linear", "--dtype", "fp32", "--json", str(out)],
               PJRT_DEVICE="TPU")
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert json.loads(out.read_text())["device"] == "CPU" and "on XLA:CPU" in ran.stdout
    bad = _cli(["--device", "no such device", "inspect", str(tmp_path)])
    assert bad.returncode == 2 and "--device: expected a PJRT device name" in bad.stderr


def test_explanation_on_another_device_says_the_rules_are_xla_cpus():
    """In a process whose environment selects TPU: the sentence parity's explanation appends."""
    code = ("from torch_xla_ext import _device\nfrom torch_xla_ext.parity import wording\n"
            "print(_device.current()); print(wording.device_caveat())")
    proc = subprocess.run([sys.executable, "-c", code], env=_env(PJRT_DEVICE="TPU"), capture_output=True,
                          text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-2000:]
    device, sentence = proc.stdout.strip().splitlines()[-2:]
    assert device == "TPU"
    assert sentence == ("XLA ran on TPU, and this report applied XLA:CPU's rules (given): TPU's own matmul precision "
                        "would read as a real difference; rerun with rules='auto' (--rules auto) to replay the "
                        "precision each dot's precision_config asks of TPU.")
