"""`torch-xla-ext doctor`: one report over the four components on one model.

The embedded example (:mod:`.block`) is a small pre-norm transformer block that touches every
problem this project exists for: it all-reduces through :func:`torch_xla_ext.collectives.all_reduce`
(with a scale), calls a JAX function with an unused argument through
:func:`torch_xla_ext.jax_call.call_jax`, has a Dynamo graph break (a ``print``) and a CPU-fallback op
(``digamma``), and runs in fp32 and bf16. The report directory holds ``report.md``, ``report.json``,
the PNG plots and the exported bundle.

The package, one module a job: :mod:`.block` (the embedded example), :mod:`.sections` (one module
per section), :mod:`.report` (sections, statuses, the report's files), :mod:`.runner` (which
sections run, each turned into a section whatever happens).

Example:
    >>> from torch_xla_ext import doctor
    >>> model, (x,) = doctor.example()                   # the embedded block and its input
    >>> type(model).__name__, tuple(x.shape)
    ('DoctorBlock', (2, 8, 32))
    >>> report = doctor.run("doctor-report")  # minutes on 2 cores; tests/doctor and docs/doctor.md run it  # doctest: +SKIP
    >>> print(report.summary())               # the run above is skipped here  # doctest: +SKIP
    torch-xla-ext doctor: embedded example (DoctorBlock: attention + MLP, call_jax gate, print, digamma, all_reduce)
      ok  parity        fp32 PASS (reassociation), bf16 FAIL (rounding placement); ...
"""

from __future__ import annotations

from torch_xla_ext import _versions

_versions.require("doctor")  # before anything here imports torch

from torch_xla_ext.doctor.block import DoctorBlock, example, example_inputs, example_model  # noqa: E402
from torch_xla_ext.doctor.report import DoctorReport, Section, SectionFailed, json_safe  # noqa: E402
from torch_xla_ext.doctor.runner import run  # noqa: E402
from torch_xla_ext.doctor.sections.export import export_section  # noqa: E402
from torch_xla_ext.doctor.sections.graph_breaks import graph_breaks_section  # noqa: E402
from torch_xla_ext.doctor.sections.jax_call import jax_call_section  # noqa: E402
from torch_xla_ext.doctor.sections.parity import parity_section  # noqa: E402

__all__ = ["DoctorBlock", "DoctorReport", "Section", "SectionFailed", "example", "example_inputs", "example_model",
           "export_section", "graph_breaks_section", "jax_call_section", "json_safe", "parity_section", "run"]
