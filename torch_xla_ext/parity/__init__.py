"""Parity verdicts for XLA vs CPU: why outputs differ, not just that they do.

``verify`` runs a function on XLA and its reference on CPU eager (again where an output is off,
to catch a nondeterministic reference) and in fp64 (the golden, computed from the inputs and parameters as
both sides received them, i.e. already rounded to ``dtype``), and compares every floating-point
output with the C++ comparator of :mod:`torch_xla_ext.numerics`. It then replays the XLA run's
own program twice, compiled by XLA through JAX's CPU client: once rounded as the device rounds
(XLA:CPU's rules by default: bf16/f16 computed in f32 and rounded where the program rounds, per
cc/parity's rounding analysis; ``rules=`` applies a TPU's or GPU's precision for f32 matmuls) and
once exactly in fp64. Together they say which cause explains each output:

* rounding placement: XLA equals the rounded replay within the bound evaluation order allows and
  the exact replay equals the golden (pytorch/xla#8747: a bf16 dot rounded, then the bias add
  rounded again);
* matmul precision: the same under a device's rules (a TPU's bf16 passes for f32 matmuls), where
  XLA:CPU's f32 matmuls do not reproduce the run;
* reassociation: same math, equal accuracy, only the evaluation order differs (long fp32 dots);
* a real difference: the program is not the reference's math, or XLA does not execute it as
  its roundings predict.

Each entry point is a list of stages (:mod:`.stages`) over one run record (:mod:`.record`), run
by one runner (:mod:`.pipeline`).

``localize`` (or ``verify(..., localize=True)``) finds the first nn.Module whose own error is
beyond rounding, ``capture``/``compare_capture`` do it across processes through safetensors,
``scan_layers`` checks torch_xla's scan_layers per layer, ``assert_parity`` is the pytest form,
``write_model_explorer`` shows the per-op error in Model Explorer, and ``write_html`` /
``report.to_markdown()`` render a report (one lead sentence: verdict, cause, what to do; then
sections outputs, rounding, per module, figures).

Example:
    >>> import torch
    >>> from torch_xla_ext import parity
    >>> lin = torch.nn.Linear(128, 128)
    >>> report = parity.verify(lin, (torch.randn(8, 128),), dtype="bf16")
    >>> report.reproduced, report.hlo_math, report.causes
    (True, 'same', {'': 'rounding placement'})
"""

from torch_xla_ext import _versions

_versions.require("parity")  # before anything here imports torch

from torch_xla_ext.parity.api import assert_parity, capture, compare_capture, localize, verify
from torch_xla_ext.parity.captures import Capture, load_capture
from torch_xla_ext.parity.errors import (
    CaptureError,
    CaptureNotFoundError,
    FrontendRunError,
    HloCaptureError,
    ParityError,
    ParityTypeError,
    ReplayError,
)
from torch_xla_ext.parity.explorer import write_model_explorer
from torch_xla_ext.parity.html import write_html
from torch_xla_ext.parity.plot import plot_modules
from torch_xla_ext.parity.program.replay import Replay, replay, unrounded_precision
from torch_xla_ext.parity.program.rules import NAMES as RULES
from torch_xla_ext.parity.program.stablehlo import Program, RoundingPoint
from torch_xla_ext.parity.report import (CAUSES, LayerParity, ModuleParity, Narrowed, OpAudit, OpLowering, OutputParity,
                                         ParityReport, Verdict)
from torch_xla_ext.parity.scan import scan_layers, scan_patched_linear_example

__all__ = [
    "CAUSES", "Capture", "CaptureError", "CaptureNotFoundError", "FrontendRunError", "HloCaptureError", "LayerParity",
    "ModuleParity", "Narrowed", "OpAudit", "OpLowering", "OutputParity", "ParityError", "ParityReport", "ParityTypeError", "Program", "RULES", "Replay", "ReplayError",
    "RoundingPoint", "Verdict", "assert_parity", "capture", "compare_capture", "load_capture", "localize",
    "plot_modules", "replay", "scan_layers", "scan_patched_linear_example", "unrounded_precision", "verify",
    "write_html", "write_model_explorer",
]
