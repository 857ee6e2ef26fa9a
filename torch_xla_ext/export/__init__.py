"""StableHLO export with a typed calling convention: what every `main` argument is (user input,
parameter, buffer, constant, collective token), what every collective does (reduce, groups,
token, scale), what every output is called, a bundle format that loads without pickle, a runner
that needs no torch, and the program as a `jax.export.Exported`.

Example:
    >>> import torch
    >>> from torch_xla_ext import export
    >>> model, x = torch.nn.Linear(4, 4), torch.randn(2, 4)
    >>> bundle = export.export(model, (x,))            # torch.export + torch_xla's exporter (frontend="torchax": torchax's)
    >>> [(i.kind, i.name) for i in bundle.manifest.inputs]
    [('parameter', 'bias'), ('parameter', 'weight'), ('user_input', 'input')]
    >>> bundle.save("m"); (out,) = export.run("m", x.numpy())     # the run needs JAX, not torch
    >>> bool(abs(out - model(x).detach().numpy()).max() < 1e-5)   # CPU eager, up to summation order
    True

One module per job, lowest first: `errors`; `manifest` (the calling convention, its schema and
cross-checks, the dtype table); `files` (the directory's names, untrusted file reading);
`graph` (main's value graph for the C++ analysis in cc/collectives/analysis.h);
`artifact_reader` (the portable artifact read in a process of its own); `program` (inlined
values, the portable artifact); `main_wrapper`, `tensor_file`; `transforms` (`strip_tokens`,
`inline_constants`, `to_jax`, `load_jax`, on Bundles); `bundle` (the Bundle, save/load; the
transforms taking a directory too); `runner` (`run` on PJRT CPU devices); `leaves` (user inputs
and outputs named by pytree path); `sites` (where in the model's code); `options`
(`ExportOptions`); `torch_program` (the model as a torch.export program: argument names, keyword
inputs, state kinds, output names); `view_rewrite`; `lazy` (torch_xla's lazy trace); one exporter
per frontend, `torch_xla_exporter` (torch.export + torch_xla) and `torchax_exporter` (torch.export
+ torchax's lowering to JAX); `exporter` (`export`: the frontend's exporter, chosen once). No
module imports one above it.

The JAX side (`load`, `run`, the transforms, `to_jax`, `load_jax`) imports JAX only, never torch,
and works on every JAX from the pin (0.7.1) to the newest tested (0.12) with only `jax[cpu]`,
numpy, ml_dtypes, flatbuffers and this wheel installed; each checks what it uses where it is
called (`_versions`, the gate).
"""

from torch_xla_ext import _versions

_versions.require_extension()  # graph.py loads the extension, built for one CPython

from torch_xla_ext.export.bundle import Bundle, inline_constants, load, load_jax, strip_tokens, to_jax
from torch_xla_ext.export.errors import (BundleError, BundleFileNotFoundError, BundleTypeError, BundleVersionError,
                                        ExportLoweringError, JaxExportExpiredError, ModuleTextError, RunInputError,
                                        UnknownDialectError, WeightsTooLargeError)
from torch_xla_ext.export.exporter import TRACER_CHOICES, ExportOptions, export
from torch_xla_ext.export.manifest import FORMAT_VERSION, INPUT_KINDS, MANIFEST_FILE, Collective, Input, Manifest
from torch_xla_ext.export.files import ARTIFACT_FILE, JAX_EXPORT_DIR, MODULE_FILE
from torch_xla_ext.export.runner import run
from torch_xla_ext.export.transforms import JaxExport

__all__ = [
    "ARTIFACT_FILE", "Bundle", "BundleError", "BundleFileNotFoundError", "BundleTypeError", "BundleVersionError",
    "Collective", "ExportLoweringError", "ExportOptions", "FORMAT_VERSION", "INPUT_KINDS", "Input", "JAX_EXPORT_DIR",
    "JaxExport", "JaxExportExpiredError", "MANIFEST_FILE", "MODULE_FILE", "Manifest", "ModuleTextError", "RunInputError",
    "TRACER_CHOICES", "UnknownDialectError",
    "WeightsTooLargeError", "export",
    "inline_constants", "load", "load_jax", "run", "strip_tokens", "to_jax",
]
