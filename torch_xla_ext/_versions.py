"""The pinned torch stack, checked from package metadata only, where torch or torch_xla is used.

Importing ``torch_xla_ext`` (and its JAX side: ``export.load``/``run``/``strip_tokens``/
``inline_constants``/``to_jax``) never checks: a JAX user with only ``jax[cpu]`` and the wheel
has no torch, and any JAX from the pin to the newest tested (python/tool_requirements/jax_*.txt)
reads a bundle. The torch side (``export.export``, ``collectives``, ``parity``, ``graph_breaks``,
``jax_call``, ``doctor``) calls :func:`require_torch_stack` first, which raises ImportError naming
every package whose installed version is not the pinned one.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import pathlib
import re

# The pinned stack: torch_xla's _XLAC links torch's C++ ABI, so torch must be exactly torch_xla's
# version; jax/jaxlib are the pair torch_xla names for its JAX features. Their versions have one
# source, python/requirements.txt: read from there in a checkout (and Bazel's runfiles), from
# PINS_FILE in the wheel, which python/build_wheel.py writes from the same file and turns into the
# wheel's Requires-Dist (tests/packaging/versions_test.py ties the three).
STACK = ("torch", "torch_xla", "jax", "jaxlib")
PINS_FILE = "_pins.txt"
REQUIREMENTS = pathlib.Path("python", "requirements.txt")

# Set to 1 to use the torch side anyway (for example a torch_xla fork built from source at another
# version).
SKIP_ENV = "TORCH_XLA_EXT_SKIP_VERSION_CHECK"

_checked = False


def canonical(name: str) -> str:
    """A distribution name as pip compares it (PEP 503): 'torch_xla' -> 'torch-xla'."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_pins(text: str, source: str) -> dict[str, str]:
    """{canonical name: version} of the `name==version` lines of a requirements file; raises
    ValueError naming `source` and the line for any other requirement (the pins are exact).

    Example: ``parse_pins("torch==2.9.0  # why", "r.txt") == {"torch": "2.9.0"}``.
    """
    pins = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;]+)", line)
        if not m:
            raise ValueError(f"{source}:{number}: not an exact pin (name==version): {line!r}")
        pins[canonical(m.group(1))] = m.group(2)
    return pins


def stack_pins(pins: dict[str, str], source: str) -> dict[str, str]:
    """{name as in STACK: version}; raises ValueError naming `source` and what it does not pin."""
    missing = [n for n in STACK if canonical(n) not in pins]
    if missing:
        raise ValueError(f"{source} pins no {', '.join(missing)}")
    return {n: pins[canonical(n)] for n in STACK}


def pins_path() -> pathlib.Path:
    """Where the pins are read from: the wheel's PINS_FILE, else the checkout's requirements."""
    here = pathlib.Path(__file__).parent  # not resolved: Bazel's runfiles are a tree of symlinks
    for path in (here / PINS_FILE, here.parent / REQUIREMENTS):
        if path.is_file():
            return path
    raise FileNotFoundError(f"no {here / PINS_FILE} (an installed wheel) or {here.parent / REQUIREMENTS} "
                            "(a checkout): the pinned versions of the torch stack are unknown")


@functools.cache
def required() -> dict[str, str]:
    """{'torch': '2.9.0', 'torch_xla': ..., 'jax': ..., 'jaxlib': ...}: the pins of STACK."""
    path = pins_path()
    return stack_pins(parse_pins(path.read_text(), str(path)), str(path))


def _release(version: str) -> str:
    """'2.9.0+cu128' -> '2.9.0': the local tag names a build of the same release."""
    return version.split("+", 1)[0]


def installed() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for name in STACK:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def mismatches() -> list[str]:
    """Lines like 'torch: installed 2.13.0, needed 2.9.0', one per package that does not fit."""
    out = []
    for name, have in installed().items():
        need = required()[name]
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
