"""The export component's errors, each a subclass of the status-code class in
:mod:`torch_xla_ext.errors` (so ``except ValueError`` and ``except TorchXlaExtError`` both work)."""

from __future__ import annotations

from torch_xla_ext.errors import ArgumentTypeError, InvalidArgumentError, NotFoundError, UnimplementedError


class BundleError(InvalidArgumentError):
    """A bundle that is malformed, does not match its module, or holds what cannot be run here
    (an MLIR dialect JAX does not register, a dynamic shape); names the file and the field."""


class ModuleTextError(BundleError):
    """A module whose MLIR text does not parse (names the file and MLIR's first error line)."""


class UnknownDialectError(BundleError):
    """A module that uses an MLIR dialect JAX's MLIR context does not register (names the file and
    the dialect), so it cannot be loaded or run here."""


class BundleVersionError(BundleError):
    """A bundle or serialized ``jax.export`` this install cannot read: a newer bundle
    format_version, or an Exported whose calling convention (or serialization) lies outside the
    running JAX's window; names the file and the versions that are read here."""


class JaxExportExpiredError(BundleVersionError):
    """A serialized ``jax.export`` older than the running JAX reads (its 6-month window). A bundle
    directory that holds one is re-lowered from its StableHLO instead (``export.load_jax``)."""


class BundleFileNotFoundError(NotFoundError):
    """A file the manifest refers to (or the manifest itself) is missing."""


class RunInputError(InvalidArgumentError):
    """User inputs (or ``num_replicas``) that do not match the manifest: count, shape, dtype, or a
    Python constant other than the one the program was exported with."""


class BundleTypeError(ArgumentTypeError):
    """Something passed where a bundle (or a bundle directory) belongs that is neither."""


class ExportLoweringError(UnimplementedError):
    """No program to export that computes what the model computes: torch_xla's lowering changes
    an output (names the output), or the model's shapes or control flow depend on its inputs'
    values, so neither torch.export nor torch_xla's lazy trace gives one program (names where).

    ``module_path`` (the nn.Module path of the guard, "" for the root), ``source`` ("file:line")
    and ``source_line`` (that line's code) say where, when known; ``cuts`` lists where torch_xla's
    own lazy trace of the model was cut: {"op", "module_path", "source", "count"}."""

    def __init__(self, message: str, *, module_path: str | None = None, source: str | None = None,
                 source_line: str | None = None, cuts: list | None = None):
        super().__init__(message)
        self.module_path = module_path
        self.source = source
        self.source_line = source_line
        self.cuts = list(cuts or [])


class WeightsTooLargeError(BundleError):
    """Arrays too large for the route asked for (jax.export's 2 GiB flatbuffer for ``to_jax`` of
    inlined values, its 65535 arguments); names the limit and the route that takes them."""
