"""The errors parity raises: subclasses of torch_xla_ext.errors' status-code classes.

Bad input raises (never a verdict); ``Verdict.EXCEPTION`` is only for the user's function failing
on a backend.
"""

from __future__ import annotations

from torch_xla_ext.errors import (
    ArgumentTypeError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    UnimplementedError,
)


class ParityError(InvalidArgumentError):
    """An argument of a parity function is unusable; the message names it."""


class ParityTypeError(ArgumentTypeError, ParityError):
    """An argument of the wrong type (a TypeError, and a ParityError)."""


class ReplayError(UnimplementedError):
    """A program the replay cannot rebuild in fp64 / with XLA:CPU's roundings (names the op and
    why). verify() reports it as ``emulation == "unavailable: ..."``; replay() raises it."""


class HloCaptureError(FailedPreconditionError):
    """torch_xla could not give the HLO of the XLA run (names the call that failed)."""


class CaptureError(InvalidArgumentError):
    """A per-module capture file that cannot be used (names the file and the entry)."""


class CaptureNotFoundError(NotFoundError, CaptureError):
    """A capture file that does not exist."""


class FrontendRunError(UnimplementedError):
    """A frontend that cannot run the model at all (torchax: an op without a lowering, a CPU tensor
    in its math); names the model, the error and the model's line."""
