"""The pinned torch stack, checked from package metadata only, where torch or torch_xla is used.

Importing ``torch_xla_ext`` (and its JAX side: ``export.load``/``run``/``strip_tokens``/
``inline_constants``/``to_jax``) never checks: a JAX user with only ``jax[cpu]`` and the wheel
has no torch, and any JAX from the pin (0.7.1) to the newest tested (0.10.2) reads a bundle. The
torch side (``export.export``, ``collectives``, ``parity``, ``graph_breaks``, ``jax_call``,
``doctor``) calls :func:`require_torch_stack` first, which raises ImportError naming every package
whose installed version is not the pinned one.
"""

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
# The JAX releases the JAX side is tested on (tests/packaging/jax_only_test.py): the pin and the
# newest the registry serves for Python 3.11.
JAX_TESTED = ("0.7.1", "0.10.2")

# Set to 1 to use the torch side anyway (for example a torch_xla fork built from source at another
# version).
SKIP_ENV = "TORCH_XLA_EXT_SKIP_VERSION_CHECK"

_checked = False


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


def require_torch_stack(feature: str) -> None:
    """Raises ImportError naming `feature` and every package of the pinned stack whose installed
    version does not fit, before anything of torch is imported. Checked once per process (the
    installed versions do not change under a running process).

    Example: ``require_torch_stack("export.export")`` at the top of a torch-side function.
    """
    global _checked
    if _checked or os.environ.get(SKIP_ENV) == "1":
        return
    bad = mismatches()
    if bad:
        raise ImportError(
            f"torch_xla_ext.{feature} needs the pinned torch stack (python/requirements.txt):\n  "
            + "\n  ".join(bad)
            + f"\nInstall the pins (`make setup`), or set {SKIP_ENV}=1 to use it anyway. The JAX side "
            "(export.load, run, strip_tokens, inline_constants, to_jax) needs no torch."
        )
    _checked = True


def summary() -> str:
    return ", ".join(f"{k} {v}" for k, v in installed().items())
