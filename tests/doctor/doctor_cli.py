"""`torch-xla-ext doctor` in a fresh interpreter, as a user runs it: the package found where this
test process imports it from, the CPU selected, and a timeout so a hang fails the test."""

import os
import subprocess
import sys

import torch_xla_ext


def run(*args: str, cwd: str, timeout: float = 1200) -> subprocess.CompletedProcess:
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(torch_xla_ext.__file__)))
    path = os.pathsep.join(p for p in (pkg_parent, os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, PJRT_DEVICE="CPU", PYTHONPATH=path)
    return subprocess.run([sys.executable, "-m", "torch_xla_ext", "doctor", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)
