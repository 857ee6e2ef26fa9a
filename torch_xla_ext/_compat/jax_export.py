"""``jax.export`` across JAX releases (0.7.1, the pin, to the newest tested, 0.12), in one place.

``jax.export.Exported`` is a public dataclass, but its required fields grow with JAX: 0.10 added
``_has_named_shardings``, ``_in_named_shardings`` and ``_out_named_shardings`` (the shardings an
export records as NamedShardings; 0.10 serializes only Exporteds that have them). ``exported``
builds one from the fields 0.7.1 knows and fills the newer ones for a program whose shardings are
all unspecified (None), which is what a bundle's single-device ``main`` has.
``calling_convention_window`` is the range of ``Exported`` versions the running JAX can call
(``jax.export``'s public bounds). ``expired`` recognises jax.export's refusal of a serialization
older than its 6-month backward-compatibility window (jax 0.11.1 and later refuse jax 0.7.1's).
"""

from __future__ import annotations

import dataclasses
import re
import struct
from typing import Any

from torch_xla_ext.errors import UnimplementedError

# Fields later JAX releases added, and their value when every sharding is unspecified: recorded
# (True) as all None, the value JAX's own export gives an argument without a sharding.
_NEWER_FIELDS = {
    "_has_named_shardings": lambda f: True,
    "_in_named_shardings": lambda f: (None,) * len(f["in_avals"]),
    "_out_named_shardings": lambda f: (None,) * len(f["out_avals"]),
}


def exported(**fields: Any) -> Any:
    """A ``jax.export.Exported`` of the fields JAX 0.7.1 defines, on any tested JAX release. A
    release that requires a field neither 0.7.1 nor ``_NEWER_FIELDS`` knows raises
    UnimplementedError (a NotImplementedError) naming it: a JAX this module has not learnt yet."""
    import jax.export  # a submodule `import jax` does not load in 0.7.1

    names = [f.name for f in dataclasses.fields(jax.export.Exported)]
    for name, make in _NEWER_FIELDS.items():
        if name in names and name not in fields:
            fields[name] = make(fields)
    required = {f.name for f in dataclasses.fields(jax.export.Exported)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    missing = sorted(required - fields.keys())
    if missing:
        raise UnimplementedError(f"jax {jax.__version__}: jax.export.Exported needs field(s) {missing}, which "
                                  f"torch_xla_ext does not know how to fill (tested: JAX 0.7.1 to 0.12)")
    return jax.export.Exported(**{k: v for k, v in fields.items() if k in names})


# jax.export serializes into one flatbuffer, which cannot grow past 2 GiB (flatbuffers'
# Builder.MAX_BUFFER_SIZE); the module with its weights inlined is most of it.
SERIALIZED_LIMIT = 2**31


def serialize(exp: Any, where: str) -> bytes:
    """``exp.serialize()``; an Exported whose module alone reaches ``SERIALIZED_LIMIT`` raises
    ValueError naming `where` and the limit before flatbuffers spends minutes finding out."""
    size = len(exp.mlir_module_serialized)
    if size >= SERIALIZED_LIMIT:
        raise ValueError(f"{where}: the serialized module is {size} bytes; a jax.export serialization "
                         f"holds less than {SERIALIZED_LIMIT} bytes (2 GiB, flatbuffers' limit)")
    return bytes(exp.serialize())


def calling_convention_window() -> tuple[int, int]:
    """(minimum, maximum) calling-convention version of an ``Exported`` the running JAX can call."""
    import jax.export

    return (jax.export.minimum_supported_calling_convention_version,
            jax.export.maximum_supported_calling_convention_version)


def deserialize(data: bytes) -> Any:
    """``jax.export.deserialize``; a serialization JAX cannot read raises ValueError (JAX's
    message), whatever the flatbuffers reader raised underneath."""
    import jax.export

    try:
        return jax.export.deserialize(bytearray(data))
    except (ValueError, TypeError, IndexError, AssertionError, UnicodeDecodeError, struct.error,
            NotImplementedError) as e:  # NotImplementedError: jax's 'unsupported version N'
        # flatbuffers reads whatever the bytes say: a truncated or foreign file fails anywhere.
        raise ValueError(f"not a jax.export serialization this JAX reads ({type(e).__name__}: {e})") from None


_UNSUPPORTED_VERSION = re.compile(r"unsupported version (\d+)")


def unsupported_version(error: BaseException) -> int | None:
    """The serialization version a ``jax.export.deserialize`` ValueError says this JAX does not
    read ("unsupported version N"), or None when the error says something else."""
    m = _UNSUPPORTED_VERSION.search(str(error))
    return int(m.group(1)) if m else None


# jax.export's words for a serialization it no longer reads (jax/_src/export/serialization.py's
# _expired_error_msg, jax 0.11.1 and later).
_EXPIRED = re.compile(r"older than the \S+ backward-compatibility window")


def expired(error: BaseException) -> bool:
    """Whether a ``deserialize`` ValueError says the serialization is older than the running
    JAX's backward-compatibility window (re-export it, or re-lower its StableHLO)."""
    return bool(_EXPIRED.search(str(error)))
