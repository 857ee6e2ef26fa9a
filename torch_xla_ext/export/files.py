"""The files of a bundle directory and their reading as untrusted input: the layout's names, the
whole-file reader, the ``.npy`` reader that checks the header before the data (never unpickling),
and the JSON reader; every failure a typed error naming the file.

Example:
    >>> import numpy as np
    >>> np.save("w.npy", np.arange(3, dtype=np.float32))
    >>> load_npy("w.npy", "weights").tolist()
    [0.0, 1.0, 2.0]
"""

from __future__ import annotations

import contextlib
import json
import os
import tokenize
from typing import Any

import numpy as np

from torch_xla_ext.errors import InvalidArgumentError, NotFoundError
from torch_xla_ext.export.errors import BundleError, BundleFileNotFoundError
from torch_xla_ext.export.manifest import dtype_name

MODULE_FILE = "module.mlir"
ARTIFACT_FILE = "module.mlirbc"  # StableHLO portable artifact (VHLO bytecode) of the same module
JAX_EXPORT_DIR = "jax_export"  # optional: to_jax(bundle).save() (exported.jax + weights.safetensors)
RESOURCES_DIR = "resources"  # <name>.npy for each `dense_resource<name>` constant (inline_constants)


def save_npy(dest: str, arr: Any) -> None:
    """Writes one array as .npy (bfloat16, which .npy cannot name, as its bits: uint16)."""
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    arr = np.asarray(arr)
    if dtype_name(arr.dtype) == "bfloat16":
        arr = arr.view(np.uint16)
    np.save(dest, arr, allow_pickle=False)


def load_npy(path: str, field: str) -> np.ndarray:
    """Reads a plain numeric .npy without unpickling: the header is checked (dtype kind, shape,
    data size against the file size) before any data is read, so a corrupt header can neither
    reach the pickle path nor make numpy allocate what the file does not hold."""
    if not os.path.exists(path):
        raise BundleFileNotFoundError(f"{path}: missing (referenced by {field})")
    fmt = np.lib.format
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            version = fmt.read_magic(f)
            if version not in ((1, 0), (2, 0)):
                raise ValueError(f"unsupported .npy format version {version}")
            read_header = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
            shape, fortran_order, dtype = read_header(f)
            if dtype.kind not in "biufc" or dtype.hasobject or dtype.fields is not None or dtype.subdtype:
                raise ValueError(f"dtype {dtype.str} is not a plain numeric dtype")
            if any(s < 0 for s in shape):
                raise ValueError(f"negative dimension in shape {shape}")
            nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
            if size - f.tell() != nbytes:
                raise ValueError(f"header says {nbytes} bytes of data ({dtype.str}{list(shape)}), "
                                 f"the file holds {size - f.tell()}")
            data = f.read(nbytes)
    except IsADirectoryError:
        raise BundleError(f"{path}: a directory, not an .npy file ({field})") from None
    except (ValueError, SyntaxError, tokenize.TokenError, RecursionError) as e:  # bad magic, header, size
        raise BundleError(f"{path}: not a plain numeric .npy file ({field}): {e}") from None
    except (OSError, EOFError) as e:
        raise BundleError(f"{path}: unreadable .npy ({field}): {e}") from None
    arr = np.frombuffer(data, dtype).reshape(shape, order="F" if fortran_order else "C")
    return arr.astype(dtype.newbyteorder("="))  # a copy in native byte order (what JAX takes)


def read_file(path: str, what: str, binary: bool = False):
    """The whole file at `path`; OS and encoding failures become our typed errors naming it."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise BundleFileNotFoundError(f"{path}: missing ({what})") from None
    except IsADirectoryError:
        raise BundleError(f"{path}: a directory, not a file ({what})") from None
    except OSError as e:
        raise BundleError(f"{path}: unreadable ({what}): {e.strerror or e}") from None
    if binary:
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BundleError(f"{path}: not UTF-8 text ({what}): {e}") from None


def read_json(path: str, what: str) -> Any:
    text = read_file(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise BundleError(f"{path}: not JSON ({e})") from None
    except RecursionError:
        raise BundleError(f"{path}: not JSON we accept (nested too deeply)") from None


@contextlib.contextmanager
def typed_errors():
    """The errors of _compat's readers (torch_xla's saved directory) become this component's types."""
    try:
        yield
    except (BundleError, BundleFileNotFoundError):
        raise
    except (NotFoundError, FileNotFoundError) as e:
        raise BundleFileNotFoundError(str(e)) from None
    except InvalidArgumentError as e:
        raise BundleError(str(e)) from None
    except OSError as e:  # a directory or a symlink loop where a file should be
        raise BundleError(f"{e.filename}: unreadable: {e.strerror or e}") from None
