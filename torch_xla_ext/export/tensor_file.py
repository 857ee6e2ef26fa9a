"""The safetensors file format, read and written with numpy alone.

`to_jax`'s weights sidecar must load where only ``jax[cpu]``, numpy, ml_dtypes and flatbuffers are
installed (a JAX user's venv), so the JAX side cannot import the ``safetensors`` package. The
format is small and fixed (an 8-byte little-endian header length, a JSON header naming each
tensor's dtype, shape and byte range, then the raw bytes); files written here are read by the
``safetensors`` library and the other way round (``tests/export/jax_sizes_test.py`` checks both
directions against the library). The file is untrusted input: the header size, every entry's
dtype, shape and byte range are checked before any data is read, and nothing is unpickled.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Mapping

import numpy as np

from torch_xla_ext import _dtypes, _json
from torch_xla_ext.export.errors import BundleError, BundleFileNotFoundError
from torch_xla_ext.export.manifest import dtype_name, np_dtype

# The format's dtype codes, by our dtype names (the one dtype table, torch_xla_ext/_dtypes.py).
CODES = {r.name: r.safetensors for r in _dtypes.ROWS if r.safetensors}
_NAMES = {code: name for name, code in CODES.items()}
_MAX_HEADER = 100 * 2**20  # the safetensors library's own cap on the JSON header


def write(path: str | os.PathLike, tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str]) -> None:
    """Writes `tensors` (name -> array, in this order) with string `metadata` to `path`."""
    header: dict = {"__metadata__": dict(metadata)}
    offset = 0
    arrays = []
    for name, arr in tensors.items():
        arr = np.asarray(arr)
        if not arr.flags.c_contiguous:  # (np.ascontiguousarray would make a 0-d array 1-d)
            arr = arr.copy(order="C")
        dt = dtype_name(arr.dtype)
        if dt not in CODES:
            raise BundleError(f"{path}: tensor {name!r} has dtype {dt}, which the safetensors format has no code for")
        header[name] = {"dtype": CODES[dt], "shape": list(arr.shape), "data_offsets": [offset, offset + arr.nbytes]}
        offset += arr.nbytes
        arrays.append(arr)
    blob = _json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # the library aligns the data to 8 bytes
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for arr in arrays:
            f.write(arr.reshape(-1).view(np.uint8).data)


def read(path: str | os.PathLike) -> tuple[dict[str, str], dict[str, np.ndarray]]:
    """(metadata, name -> array) of the file at `path`; a file that is not a well-formed
    safetensors file raises BundleError naming it (BundleFileNotFoundError if missing)."""
    path = os.fspath(path)
    try:
        size = os.path.getsize(path)
        f = open(path, "rb")
    except FileNotFoundError:
        raise BundleFileNotFoundError(f"{path}: missing (a safetensors file)") from None
    except OSError as e:
        raise BundleError(f"{path}: unreadable: {e.strerror or e}") from None
    with f:
        head = f.read(8)
        if len(head) < 8:
            raise BundleError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
        (n,) = struct.unpack("<Q", head)
        if n > min(_MAX_HEADER, size - 8):
            raise BundleError(f"{path}: not a safetensors file (header length {n} exceeds the file or "
                              f"{_MAX_HEADER} bytes)")
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
            raise BundleError(f"{path}: not a safetensors file (its header is not JSON: {e})") from None
        if not isinstance(header, dict):
            raise BundleError(f"{path}: not a safetensors file (its header is not a JSON object)")
        meta = header.pop("__metadata__", None) or {}
        if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
            raise BundleError(f"{path}: __metadata__ must map strings to strings")
        data_size = size - 8 - n
        tensors = {}
        for name, entry in header.items():
            where = f"{path}: tensor {name!r}"
            if not (isinstance(entry, dict) and set(entry) == {"dtype", "shape", "data_offsets"}):
                raise BundleError(f"{where}: expected the fields dtype, shape, data_offsets")
            code, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
            if code not in _NAMES:
                raise BundleError(f"{where}: dtype {code!r} is not one of {sorted(_NAMES)}")
            if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)):
                raise BundleError(f"{where}: shape must be a list of non-negative integers, got {shape!r}")
            if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)
                    and 0 <= offsets[0] <= offsets[1] <= data_size):
                raise BundleError(f"{where}: data_offsets {offsets!r} lie outside the file's {data_size} data bytes")
            dtype = np_dtype(_NAMES[code])
            count = int(np.prod(shape, dtype=np.int64))
            if offsets[1] - offsets[0] != count * dtype.itemsize:
                raise BundleError(f"{where}: {offsets[1] - offsets[0]} bytes do not hold {_NAMES[code]}{shape}")
            f.seek(8 + n + offsets[0])
            tensors[name] = np.fromfile(f, dtype=dtype, count=count).reshape(shape)
    return meta, tensors
