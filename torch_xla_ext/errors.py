"""Exceptions of torch_xla_ext. Each subclasses the builtin a caller would catch anyway
(ValueError, TypeError, ...) so code that does not know ours still handles them."""


class TorchXlaExtError(Exception):
    """Base of every error raised by torch_xla_ext itself."""
