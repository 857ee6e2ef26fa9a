"""The export component's errors, each a subclass of the status-code class in
:mod:`torch_xla_ext.errors` (so ``except ValueError`` and ``except TorchXlaExtError`` both work)."""

from __future__ import annotations

from torch_xla_ext.errors import ArgumentTypeError, InvalidArgumentError, NotFoundError, UnimplementedError


class BundleError(InvalidArgumentError):
    """A bundle that is malformed, does not match its module, or holds what cannot be run here
    (an MLIR dialect JAX does not register, a dynamic shape); names the file and the field."""


class BundleVersionError(BundleError):
    """A bundle or serialized ``jax.export`` this install cannot read: a newer bundle
    format_version, or an Exported whose calling convention (or serialization) lies outside the
    running JAX's window; names the file and the versions that are read here."""


class BundleFileNotFoundError(NotFoundError):
    """A file the manifest refers to (or the manifest itself) is missing."""


class RunInputError(InvalidArgumentError):
    """User inputs (or ``num_replicas``) that do not match the manifest: count, shape, dtype, or a
    Python constant other than the one the program was exported with."""


class BundleTypeError(ArgumentTypeError):
    """Something passed where a bundle (or a bundle directory) belongs that is neither."""


class ExportLoweringError(UnimplementedError):
    """torch_xla's lowering of the program computes something other than torch.export's program
    (an output of another shape); names the output."""


class WeightsTooLargeError(BundleError):
    """Arrays too large for the route asked for (weights as MLIR text in ``inline_constants``);
    names the limit and the route that takes them (``to_jax``, which keeps weights as arrays)."""
