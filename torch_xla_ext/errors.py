"""Exceptions of torch_xla_ext: the one error path.

Every error torch_xla_ext raises on purpose is a :class:`TorchXlaExtError`. Each subclass here
stands for one status code (absl's names, the codes of ``cc/common/status.h``) and also subclasses
the builtin a caller would catch anyway, so code that does not know ours still handles them::

    INVALID_ARGUMENT     InvalidArgumentError     ValueError
    NOT_FOUND            NotFoundError            FileNotFoundError
    FAILED_PRECONDITION  FailedPreconditionError  RuntimeError
    OUT_OF_RANGE         OutOfRangeError          IndexError
    UNIMPLEMENTED        UnimplementedError       NotImplementedError
    INTERNAL             InternalError            RuntimeError
    (a type mistake)     ArgumentTypeError        TypeError  (code INVALID_ARGUMENT)

A C++ ``txe::Status`` becomes the class of its code (``BY_CODE``; the extension module registers
that table once), with ``.code`` kept. Components raise subclasses of these (``BundleError`` is an
``InvalidArgumentError``), so ``except ValueError`` and ``except TorchXlaExtError`` both work.
The CLI exits 2 for a ``TorchXlaExtError`` (bad input, named in the message) and shows a
traceback (exit 1) for anything else.

Example:
    >>> from torch_xla_ext import errors
    >>> try:
    ...     raise errors.InvalidArgumentError("dtype: unknown 'f7'")
    ... except ValueError as e:
    ...     print(e.code, e)
    INVALID_ARGUMENT dtype: unknown 'f7'
"""

from __future__ import annotations

__all__ = [
    "BY_CODE", "ArgumentTypeError", "FailedPreconditionError", "InternalError", "InvalidArgumentError",
    "NotFoundError", "OutOfRangeError", "TorchXlaExtError", "UnimplementedError", "first_line", "from_status",
]


class TorchXlaExtError(Exception):
    """Base of every error raised by torch_xla_ext itself. ``code`` is the status code name."""

    code: str = "UNKNOWN"


class InvalidArgumentError(TorchXlaExtError, ValueError):
    """A bad value: a field, argument, path or file content that cannot be used."""

    code = "INVALID_ARGUMENT"


class ArgumentTypeError(TorchXlaExtError, TypeError):
    """An argument of the wrong type (``code`` stays INVALID_ARGUMENT, as absl has no type code)."""

    code = "INVALID_ARGUMENT"


class NotFoundError(TorchXlaExtError, FileNotFoundError):
    """A file, directory or named entry that does not exist."""

    code = "NOT_FOUND"


class FailedPreconditionError(TorchXlaExtError, RuntimeError):
    """The system is not in a state the call needs (e.g. a JAX backend already started)."""

    code = "FAILED_PRECONDITION"


class OutOfRangeError(TorchXlaExtError, IndexError):
    """An index or size outside what the data holds."""

    code = "OUT_OF_RANGE"


class UnimplementedError(TorchXlaExtError, NotImplementedError):
    """Something this version does not support (named, with what is supported)."""

    code = "UNIMPLEMENTED"


class InternalError(TorchXlaExtError, RuntimeError):
    """A bug of ours or of a library under us, reported with what was being done."""

    code = "INTERNAL"


# The status code -> exception table; the extension module registers it once (csrc/module.cc).
BY_CODE: dict[str, type[TorchXlaExtError]] = {
    "INVALID_ARGUMENT": InvalidArgumentError,
    "NOT_FOUND": NotFoundError,
    "FAILED_PRECONDITION": FailedPreconditionError,
    "OUT_OF_RANGE": OutOfRangeError,
    "UNIMPLEMENTED": UnimplementedError,
    "INTERNAL": InternalError,
}


def from_status(code: str, message: str) -> TorchXlaExtError:
    """The exception for a status ``code`` name (unknown codes become :class:`InternalError`)."""
    err = BY_CODE.get(code, InternalError)(message)
    if code not in BY_CODE:
        err.code = code
    return err


def first_line(error: BaseException, *, with_type: bool = False) -> str:
    """The one line an error message quotes of another exception: its message's first line, with
    the lines after it joined on while the line so far is only a heading that ends in ':' (MLIR's
    "Unable to parse module assembly:", XLA's status prefixes), three lines at most; the class name
    when the message is empty. ``with_type`` puts the class name in front ("ValueError: ...").

    Example:
        >>> first_line(ValueError("Unable to parse module assembly:\\nerror: -:1:2: expected '{'\\nmore"))
        "Unable to parse module assembly: error: -:1:2: expected '{'"
        >>> first_line(RuntimeError("boom\\ntraceback..."), with_type=True)
        'RuntimeError: boom'
    """
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    text = lines[0] if lines else ""
    for line in lines[1:3]:
        if not text.endswith(":"):
            break
        text += " " + line
    if not text:
        return type(error).__name__
    return f"{type(error).__name__}: {text}" if with_type else text
