"""The stages of a per-module capture: a hooked XLA run that computes every module call's tensors
(``capture``'s one stage, :func:`hooked_run`; localize's second run when the rounded replay does not
reproduce the run, :data:`SECOND_RUN`), and a capture made elsewhere taken as the run
(``compare_capture``'s first stage, :func:`given`).

Example:
    >>> import torch
    >>> from torch_xla_ext.parity import api, pipeline
    >>> model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    >>> r = api.request(model, (torch.ones(1, 4),), dtype="fp32", role="model", localize=True)
    >>> record = pipeline.run(r, [HOOKED_RUN])
    >>> [c.path for c in record.capture.calls], record.device
    (['0', '1', ''], 'CPU')
"""

from __future__ import annotations

from typing import Any

from torch_xla_ext.parity.captures import Capture
from torch_xla_ext.parity.pipeline import SKIPPED, Outcome, Stage
from torch_xla_ext.parity.record import ProgramRun, RunRecord, XlaRun
from torch_xla_ext.parity import frontends

__all__ = ["HOOKED_RUN", "SECOND_RUN", "given", "hooked_run"]


def hooked_run(device: Any = None) -> Stage:
    """The model on XLA (``device``, default ``torch_xla.device()``) with hooks on every submodule,
    and the program the device ran."""

    def run(record: RunRecord) -> None:
        r = record.request
        record.capture = frontends.of(r.frontend).capture(r.fn, r.inputs, r.kwargs, r.dtype, r.seed, device,
                                                          program=True)
        record.capture.info["model"] = type(r.fn).__name__
        record.device = record.capture.device_type

    return Stage("XLA capture", run, reads=("request",), writes=("capture", "device"), seconds="XLA capture",
                 release="collect")


def _second_run(record: RunRecord) -> Outcome | None:
    """localize's capture from a second, hooked XLA run, when the replays gave none (the rounded
    replay does not reproduce the run within the bound)."""
    if record.capture is not None:
        return SKIPPED
    r = record.request
    record.capture = frontends.of(r.frontend).capture(r.fn, r.inputs, r.kwargs, r.dtype, r.seed)
    record.capture.info["source"] = "a second XLA run (the rounded replay does not reproduce the run)"
    return None


HOOKED_RUN = hooked_run()
SECOND_RUN = Stage("XLA capture", _second_run, reads=("request",), optional=("capture",), writes=("capture",),
                   seconds="XLA capture", release="collect")


def given(cap: Capture) -> Stage:
    """A capture made elsewhere as the run: its outputs and the program its device ran (with its
    arguments) are the XLA run's, its device type the run's device, and its module calls the
    run's capture."""

    def take(record: RunRecord) -> None:
        program = (ProgramRun(cap.program, list(cap.program_args)) if cap.program is not None else
                   ProgramRun(None, None, "the capture holds no program (made before captures kept one)"))
        record.xla = XlaRun(list(cap.outputs.items()), program)
        record.capture, record.device = cap, cap.device_type

    return Stage("capture", take, writes=("xla", "capture", "device"))
