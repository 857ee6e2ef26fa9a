"""The XLA device a run uses, as the user's environment selects it: ``PJRT_DEVICE``, or, when it
is unset, torch_xla's own default (a TPU when libtpu finds one, else CPU). Nothing here picks the
CPU behind the user's back; the CLI's ``--device`` sets ``PJRT_DEVICE`` on purpose, and every
report names :func:`current`.

Example:
    >>> select("CPU")      # what `torch-xla-ext --device CPU ...` does, before torch_xla starts
    >>> current()
    'CPU'
"""

from __future__ import annotations

import os
import sys

from torch_xla_ext.errors import InvalidArgumentError

ENV = "PJRT_DEVICE"


def select(device: str | None) -> None:
    """Sets ``PJRT_DEVICE`` to ``device`` (e.g. "CPU", "TPU", "CUDA"); None leaves the environment's
    choice alone. torch_xla reads it once, when its runtime starts: call this before."""
    if device is None:
        return
    if not isinstance(device, str) or not device.strip() or not device.replace("_", "").isalnum():
        raise InvalidArgumentError(f"--device: expected a PJRT device name such as CPU, TPU or CUDA, got {device!r}")
    name = device.strip().upper()
    started = os.environ.get(ENV)
    if "torch_xla" in sys.modules and started and started.split("_")[0] != name.split("_")[0]:
        raise InvalidArgumentError(f"--device {name}: torch_xla is already imported with {ENV}={started}; "
                                   f"it reads the device once, so choose it before importing torch_xla")
    os.environ[ENV] = name


def current() -> str:
    """The device type torch_xla runs on ("CPU", "TPU", "CUDA", ...): ``PJRT_DEVICE`` as torch_xla
    set or read it, or "unselected" before torch_xla has chosen one."""
    if "torch_xla" in sys.modules:
        try:
            import torch_xla.runtime as xr

            kind = xr.device_type()
            if kind:
                return str(kind)
        except Exception:  # a runtime that failed to start still has its environment variable
            pass
    value = os.environ.get(ENV)
    return value.split("_")[0].upper() if value else "unselected"


def is_cpu(device: str | None = None) -> bool:
    """Whether ``device`` (default: :func:`current`) is XLA:CPU, the device parity's rounding rules
    and cause attribution were established on."""
    return (device or current()) == "CPU"
