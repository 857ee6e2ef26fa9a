"""The pinned stack, checked from package metadata only (importing torch here would break
`torch_xla_ext.export.run`, which must work where torch cannot be imported)."""

from __future__ import annotations

import importlib.metadata
import os

# torch_xla's _XLAC links torch's C++ ABI, so torch must be exactly torch_xla's version;
# jax/jaxlib 0.7.1 is the pair torch_xla 2.9 names for its JAX features.
REQUIRED = {
    "torch": "2.9.0",
    "torch_xla": "2.9.0",
    "jax": "0.7.1",
    "jaxlib": "0.7.1",
}

# Set to 1 to import anyway (for example a torch_xla fork built from source at another version).
SKIP_ENV = "TORCH_XLA_EXT_SKIP_VERSION_CHECK"


def _release(version: str) -> str:
    """'2.9.0+cu128' -> '2.9.0': the local tag names a build of the same release."""
    return version.split("+", 1)[0]


def installed() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for name in REQUIRED:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def mismatches() -> list[str]:
    """Lines like 'torch: installed 2.13.0, needed 2.9.0', one per package that does not fit."""
    out = []
    for name, have in installed().items():
        need = REQUIRED[name]
        if have is None:
            out.append(f"{name}: not installed, needed {need}")
        elif _release(have) != need:
            out.append(f"{name}: installed {have}, needed {need}")
    return out


def check() -> None:
    """Raises ImportError naming every package whose installed version is not the pinned one."""
    if os.environ.get(SKIP_ENV) == "1":
        return
    bad = mismatches()
    if bad:
        raise ImportError(
            "torch_xla_ext needs the pinned stack (python/requirements.txt):\n  "
            + "\n  ".join(bad)
            + f"\nInstall the pins (`make setup`), or set {SKIP_ENV}=1 to import anyway."
        )


def summary() -> str:
    return ", ".join(f"{k} {v}" for k, v in installed().items())
