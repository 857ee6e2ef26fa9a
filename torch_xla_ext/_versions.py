"""The gate: whether this torch / torch_xla / JAX stack has what a feature of torch_xla_ext uses.

It decides by capabilities, not version strings. Each feature names the groups of upstream APIs
its ``_compat`` wrappers rely on (``FEATURES``; the names themselves are in
:mod:`torch_xla_ext._compat.capabilities`). :func:`require` checks, once per process and feature:

0. that the package's own extension module loads in this interpreter (each wheel is built for one
   CPython: another one is refused naming both, with the wheel to install);
1. that the distributions those APIs come from are installed (package metadata only: nothing is
   imported yet, so a JAX-only install is refused before anything looks for torch);
2. that each top-level package loads (a torch_xla whose ``_XLAC`` links another torch does not:
   the refusal names the torch commit torch_xla's build says it was built against);
3. that every API of the feature's groups resolves (an import and attribute lookups, no calls).

Anything that passes is accepted: a torch or torch_xla patch release, a local build
(``2.9.0+gited8a445``), a fork's torch_xla next to the torch it was built with. What fails raises
:class:`UnsupportedStackError` (an ImportError) naming the feature, what is missing (the
distribution, or the API and the ``_compat`` module that uses it), what is installed, the tested
stack, and what to do. ``TORCH_XLA_EXT_SKIP_VERSION_CHECK=1`` skips the gate (a missing API then
fails where it is used).

The tested stack is the pins of ``python/requirements.txt`` (shipped in the wheel as
``_pins.txt``): :func:`status` says "tested" when a feature's distributions are those releases
(torch's own build tags such as ``+cu128`` included), "accepted" when they differ (another
release, or a local build such as ``+gited8a445``) and the probes pass. ``import torch_xla_ext`` checks nothing; the torch side calls
:func:`require` where it is used, and so does the export bundle's JAX side ("export.jax").

Example:
    >>> from torch_xla_ext import _versions
    >>> _versions.require("numerics")          # needs nothing beyond the wheel
    >>> _versions.status("export.jax")[0] in ("tested", "accepted")
    True
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import pathlib
import platform
import re
import sys
import threading

from torch_xla_ext._compat import capabilities, torchax_import
from torch_xla_ext.errors import TorchXlaExtError, first_line

# The pinned stack: torch_xla's _XLAC links torch's C++ ABI, so the tested torch is torch_xla's
# release; jax/jaxlib are the pair torch_xla names for its JAX features. Their versions have one
# source, python/requirements.txt: read from there in a checkout (and Bazel's runfiles), from
# PINS_FILE in the wheel, which python/build_wheel.py writes from the same file and turns into the
# wheel's "xla" extra (tests/packaging/versions_test.py ties the three).
STACK = ("torch", "torch_xla", "jax", "jaxlib")
# Distributions beyond the stack that a frontend's features need (pinned in requirements.txt too,
# installed by the wheel's "torchax" extra).
EXTRA = ("torchax",)
DISTRIBUTIONS = STACK + EXTRA
PINS_FILE = "_pins.txt"
REQUIREMENTS = pathlib.Path("python", "requirements.txt")

# Set to 1 to skip the gate (distributions, loading and probes); a missing API then fails where
# it is used instead of naming itself here.
SKIP_ENV = "TORCH_XLA_EXT_SKIP_VERSION_CHECK"


class UnsupportedStackError(TorchXlaExtError, ImportError):
    """The installed torch / torch_xla / JAX lacks what a feature uses; the message names the
    feature, what is missing, what is installed and needed, and what to do."""

    code = "FAILED_PRECONDITION"


@dataclasses.dataclass(frozen=True)
class Feature:
    title: str                # how messages name it
    groups: tuple[str, ...]   # keys of _compat.capabilities.GROUPS, probed in this order


# What each feature's code relies on (capabilities.GROUPS says which names each group holds).
# torch_xla groups come first: torch_xla must own the device before JAX is imported.
FEATURES: dict[str, Feature] = {
    "numerics": Feature("torch_xla_ext.numerics", ()),
    "export.jax": Feature("the export bundle's JAX side (export.load, run, strip_tokens, inline_constants, "
                          "to_jax, load_jax)", ("jax.mlir", "jax.export")),
    "export.export": Feature("torch_xla_ext.export.export",
                             ("torch_xla.runtime", "torch_xla.stablehlo", "torch_xla.lazy_hlo", "torch_xla.metrics",
                              "torch.pytree", "jax.mlir")),
    "collectives": Feature("torch_xla_ext.collectives", ("torch_xla.runtime", "torch_xla.collectives")),
    "jax_call": Feature("torch_xla_ext.jax_call",
                        ("torch_xla.runtime", "torch_xla.call_jax", "jax.trace", "jax.export")),
    # Importing parity and comparing a saved capture need torch alone (a process that compares
    # never imports torch_xla); replaying a program (a capture's, or parity.replay's) needs JAX
    # too; the XLA run and its replays need the rest.
    "parity": Feature("torch_xla_ext.parity", ("torch.pytree",)),
    "parity.replay": Feature("torch_xla_ext.parity's replays of a program (replay, compare_capture)",
                             ("torch.pytree", "jax.mlir", "jaxlib.mhlo")),
    "parity.xla": Feature("torch_xla_ext.parity's XLA run and replays",
                          ("torch_xla.runtime", "torch_xla.lazy_hlo", "torch_xla.ir_debug", "torch_xla.op_metadata",
                           "torch_xla.scan",
                           "torch.pytree", "jax.mlir", "jaxlib.mhlo")),
    "parity.torchax": Feature("torch_xla_ext.parity's torchax run and replays (frontend='torchax')",
                              ("torch.pytree", "torchax.run", "torchax.dispatch", "jax.mlir", "jaxlib.mhlo")),
    # Dynamo's half of the ledger needs torch alone; the openxla bridge's partitions and XLA's
    # compiles and executions need torch_xla.
    "graph_breaks": Feature("torch_xla_ext.graph_breaks (Dynamo's half)", ("torch.dynamo", "torch.trace", "torch.pytree")),
    "graph_breaks.openxla": Feature("torch_xla_ext.graph_breaks (the openxla bridge and XLA's metrics)",
                                    ("torch_xla.runtime", "torch_xla.dynamo_bridge", "torch_xla.lazy",
                                     "torch_xla.metrics")),
    # The script trace likewise: Dynamo's half needs torch alone; the lazy-tensor half (the step
    # marker, torch_xla's compiles and the bridge's partitions) needs torch_xla.
    "trace": Feature("torch_xla_ext.trace (Dynamo's half)", ("torch.dynamo", "torch.trace")),
    "trace.lazy": Feature("torch_xla_ext.trace (lazy tensors and the openxla bridge)",
                          ("torch_xla.runtime", "torch_xla.lazy", "torch_xla.ir_debug", "torch_xla.metrics",
                           "torch_xla.dynamo_bridge")),
    # Its JAX half: every JAX compile (jax.monitoring's events; plain JAX needs nothing else), and
    # torchax's compiled functions, op-by-op computations and concretizations through torchax's
    # jit and dispatch seams.
    "trace.jax": Feature("torch_xla_ext.trace (JAX's compiles)", ("jax.monitoring",)),
    "trace.torchax": Feature("torch_xla_ext.trace (torchax's compiled functions and op-by-op computations)",
                             ("jax.monitoring", "torchax.interop")),
    # Importing the doctor needs torch alone; each frontend's run needs its stack.
    "doctor": Feature("torch_xla_ext.doctor", ("torch.pytree",)),
    "doctor.torch_xla": Feature("torch_xla_ext.doctor on torch_xla", ("torch_xla.runtime", "torch.pytree")),
    "doctor.torchax": Feature("torch_xla_ext.doctor(frontend='torchax')", ("torch.pytree", "torchax", "jax.mlir",
                                                                          "jax.export")),
    # The torchax frontend's export: torch.export, torchax's lowering and JAX; no torch_xla.
    "export.torchax": Feature("torch_xla_ext.export.export(frontend='torchax')",
                              ("torch.pytree", "torchax", "jax.mlir", "jax.export")),
}

# What to do when a distribution is missing, by distribution.
_INSTALL = {
    "torch_xla": ("install torch_xla with the torch it was built against: `pip install 'torch-xla-ext[xla]'` "
                  "gives the tested stack (CPython 3.10-3.13), or install a fork's torch_xla wheel next to its "
                  "torch"),
    "torch": ("`pip install torch` (numerics, graph_breaks' Dynamo half and the export bundle's JAX side need no "
              "torch_xla); with torch_xla, the torch its build links: `pip install 'torch-xla-ext[xla]'`"),
    "jax": "`pip install 'torch-xla-ext[jax]'` (jax[cpu] 0.7.1 or newer; jax 0.7.1 and later need CPython 3.11+)",
    "jaxlib": "`pip install 'torch-xla-ext[jax]'` (jax[cpu] brings the jaxlib of its release)",
    "torchax": "`pip install 'torch-xla-ext[torchax]'` (torchax, and optax, which torchax.train imports)",
}

# What to do when an installed distribution does not load, where more can be said than "install
# the one that matches the rest of the stack".
_LOAD_ADVICE = {
    "torchax": ("torchax 0.0.13 names aten ops in its tables at import; torch_xla_ext stands in for those torch "
                "2.13 and 2.14 removed (aten.prod.dim_Dimname, aten.cholesky, ...; google/torchax#101), and this "
                "torch lacks others or torchax fails for another reason: install torch<=2.14.1 next to it, or a "
                "torchax release that fixes it"),
}

# Re-entrant: a probe's import runs the script trace's import hooks, which ask the gate too.
_lock = threading.RLock()
_decided: dict[str, str | None] = {}  # feature -> None (passes) or the refusal's message


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
    """{'torch': '2.9.0', 'torch_xla': ..., 'jax': ..., 'jaxlib': ...}: the tested stack's pins."""
    path = pins_path()
    return stack_pins(parse_pins(path.read_text(), str(path)), str(path))


@functools.cache
def _extra_pins() -> dict[str, str]:
    """{name in EXTRA: version} of those the pins file pins (a checkout's requirements.txt pins
    them; a wheel's _pins.txt holds the stack alone)."""
    path = pins_path()
    pins = parse_pins(path.read_text(), str(path))
    return {n: pins[canonical(n)] for n in EXTRA if canonical(n) in pins}


# Local version tags of a release's own builds (torch's +cpu, +cu128, +rocm6.4, +xpu): the same
# release. Any other local tag (+gited8a445) is a build from other sources.
_BUILD_TAG = re.compile(r"cpu|cu\d+|rocm[\d.]+|xpu")


def _same_build(version: str, pin: str) -> bool:
    """Whether ``version`` is the pinned release ``pin`` ('2.9.0+cu128' is '2.9.0'; '2.9.0+gitabc' is not)."""
    release, _, local = version.partition("+")
    return release == pin and (not local or bool(_BUILD_TAG.fullmatch(local)))


def installed() -> dict[str, str | None]:
    """{name in DISTRIBUTIONS: installed version, or None}, from package metadata (nothing imported)."""
    found: dict[str, str | None] = {}
    for name in DISTRIBUTIONS:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def summary() -> str:
    """'CPython 3.11.7, torch 2.9.0+cu128, torch_xla 2.9.0, jax 0.7.1, jaxlib 0.7.1, torchax 0.0.13'
    (- when missing)."""
    return ", ".join([f"{platform.python_implementation()} {platform.python_version()}"]
                     + [f"{k} {v or '-'}" for k, v in installed().items()])


def _tested() -> str:
    try:
        pins = required()
    except (FileNotFoundError, ValueError) as e:
        return f"unknown ({e})"
    return (f"torch {pins['torch']}, torch_xla {pins['torch_xla']}, jax/jaxlib {pins['jax']} "
            f"(python/requirements.txt; README.md, \"Compatibility\", lists every tested route)")


def distributions(feature: str) -> tuple[str, ...]:
    """The distributions (names in DISTRIBUTIONS) whose APIs ``feature`` probes, in that order."""
    found = {d for g in _feature(feature).groups for d in capabilities.GROUPS[g].distributions}
    if "jax" in found:
        found.add("jaxlib")  # jax runs on the jaxlib of its release
    if "torch_xla" in found:
        found.add("torch")  # torch_xla runs on the torch its build links
    return tuple(d for d in DISTRIBUTIONS if d in found)


@functools.cache
def _extension_problem() -> str | None:
    """None when the package's own extension module loads in this interpreter, else why not: each
    wheel's ``_ext.so`` is built for one CPython (pybind11 refuses another one at import), and a
    checkout's ``_ext.cpython-3XY-*.so`` is found only by that CPython."""
    python = f"{platform.python_implementation()} {platform.python_version()}"
    try:
        module = importlib.import_module("torch_xla_ext._ext")
    except ImportError as e:
        return (f"torch_xla_ext's extension module does not load in {python}{_built_for()}: "
                f"{first_line(e)}")
    if getattr(module, "__file__", None) is None:  # only _ext/'s stubs: a namespace, no extension
        here = pathlib.Path(__file__).parent
        found = sorted(p.name for p in here.glob("_ext*.so")) or ["none"]
        return (f"torch_xla_ext has no extension module for {python} in {here} (found: {', '.join(found)}; this "
                f"interpreter loads {' or '.join('_ext' + s for s in importlib.machinery.EXTENSION_SUFFIXES)})")
    return None


def _built_for() -> str:
    """' (the installed wheel is cp311-cp311-linux_x86_64: built for CPython 3.11)', from the
    wheel's own record of its tag; '' where there is none (a checkout)."""
    try:
        text = importlib.metadata.distribution("torch-xla-ext").read_text("WHEEL") or ""
    except importlib.metadata.PackageNotFoundError:
        return ""
    m = re.search(r"^Tag:\s*(cp3(\d+)-\S+)", text, re.MULTILINE)
    return f" (the installed wheel is {m.group(1)}: built for CPython 3.{m.group(2)})" if m else ""


def _extension_advice() -> str:
    tag = "cp%d%d" % sys.version_info[:2]
    return (f"install the torch_xla_ext wheel built for this CPython ({tag}: README.md, \"Install\", lists the "
            f"CPythons with a wheel), or in a checkout run `make develop` with a venv of this CPython")


def require_extension() -> None:
    """Raises UnsupportedStackError when the package's extension module does not load in this
    interpreter (another CPython's build): for modules that load it on import before any feature
    of theirs is used (the export package, whose JAX side checks its stack when called)."""
    message = _message("torch_xla_ext", [p for p in (_extension_problem(),) if p], [_extension_advice()])
    if message is not None:
        raise UnsupportedStackError(message)


def _torch_commit_of_torch_xla() -> str | None:
    """The torch commit torch_xla's build names (``__torch_gitrev__`` in torch_xla/version.py), read
    without importing torch_xla; None where it says none."""
    try:
        spec = importlib.util.find_spec("torch_xla")
        text = pathlib.Path(spec.origin).with_name("version.py").read_text() if spec and spec.origin else ""
    except (ImportError, OSError, ValueError):
        return None
    m = re.search(r"^__torch_gitrev__\s*=\s*['\"]([0-9a-f]{7,40})['\"]", text, re.MULTILINE)
    return m.group(1) if m else None


def _feature(feature: str) -> Feature:
    if feature not in FEATURES:
        raise ValueError(f"unknown feature {feature!r}: known are {', '.join(FEATURES)}")
    return FEATURES[feature]


def _refusal(feature: str) -> str | None:
    """None when ``feature`` can run here, else the message saying why not and what to do."""
    spec = _feature(feature)
    have = installed()
    needed = distributions(feature)
    problems: list[str] = []
    advice: list[str] = []
    extension = _extension_problem()
    if extension is not None:
        problems.append(extension)
        advice.append(_extension_advice())
    absent = [d for d in needed if have[d] is None]
    for d in absent:
        problems.append(f"{d} is not installed")
        if not (d == "torch" and "torch_xla" in absent):  # torch_xla's line brings its torch
            advice.append(_INSTALL[d])
    if not absent:  # only now import anything: a refusal above must not import torch
        broken = set()
        for d in needed:
            why = capabilities.resolve(d)
            if why is not None:
                broken.add(d)
                problems.append(f"{d} {have[d]} does not load: {why}")
                advice.append(_LOAD_ADVICE.get(d) or (
                    f"install the {d} that matches the rest of the stack (torch_xla's _XLAC links the torch it was "
                    f"built with; jax needs the jaxlib of its release)"))
                if d in EXTRA:  # an optional frontend: the extra installs the tested one
                    advice.append(_INSTALL[d])
                if d == "torch_xla" and _torch_commit_of_torch_xla():
                    advice.append(f"torch_xla {have[d]} was built against torch commit {_torch_commit_of_torch_xla()} "
                                  f"(torch_xla/version.py's __torch_gitrev__): install the torch release or build of "
                                  f"that commit next to it (an upstream torch_xla X.Y pairs with torch X.Y)")
            elif d in _OWN_FILES:
                foreign = _OWN_FILES[d]()
                if foreign is not None:
                    broken.add(d)
                    problems.append(f"{d} {have[d]}: {foreign}")
                    advice.append(f"`pip install --force-reinstall --no-deps {d}=={have[d]}` (after any torch_xla "
                                  f"install) puts {d}'s own files back")
        apis = [(g, n, w) for g, n, w in capabilities.missing(*spec.groups)
                if capabilities.distribution_of(n) not in broken]
        for g, name, why in apis:
            used_by = ", ".join(capabilities.GROUPS[g].modules)
            problems.append(f"{name} (used by {used_by}): {why}")
        if apis:
            dists = sorted({capabilities.distribution_of(n) for _, n, _ in apis}, key=STACK.index)
            advice.append(f"install a {' / '.join(dists)} that has these APIs (the tested releases do), or set "
                          f"{SKIP_ENV}=1 to try anyway")
    return _message(spec.title, problems, advice)


def _torchax_files() -> str | None:
    # Imported where used: _compat/torchax imports numpy, which `import torch_xla_ext` must not.
    from torch_xla_ext._compat import torchax

    return torchax.version_problem()


# Distributions whose package another wheel may overwrite (torch_xla's writes its torchax copy over
# torchax's files): the check that the files Python imports are the distribution's own, run once
# the package loads.
_OWN_FILES = {"torchax": _torchax_files}


def _message(title: str, problems: list[str], advice: list[str]) -> str | None:
    if not problems:
        return None
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return (f"{title} cannot run on this stack: {problems[0]}{more}\n  - " + "\n  - ".join(problems)
            + f"\nInstalled: {summary()}.\nTested: {_tested()}; any build whose APIs above resolve is accepted."
            + "\nTo do: " + "; ".join(dict.fromkeys(advice)) + ".")


def refusal(feature: str) -> str | None:
    """None when ``feature`` can run on the installed stack, else the message :func:`require`
    raises. Decided once per process and feature."""
    with _lock:
        if feature not in _decided:
            _decided[feature] = _refusal(feature)
        return _decided[feature]


def require(feature: str) -> None:
    """Raises UnsupportedStackError (an ImportError) when ``feature`` (a key of FEATURES) cannot
    run on the installed stack; returns at once after the first success, or with
    TORCH_XLA_EXT_SKIP_VERSION_CHECK=1.

    Example: ``_versions.require("parity")`` at the top of ``torch_xla_ext/parity/__init__.py``.
    """
    if os.environ.get(SKIP_ENV) == "1":
        _feature(feature)
        if "torchax" in distributions(feature):
            torchax_import.install()  # as the gate's probe would (capabilities.resolve)
        return
    message = refusal(feature)
    if message is not None:
        raise UnsupportedStackError(message)


# The name the torch side has called since before the probes.
require_torch_stack = require


def available(feature: str) -> bool:
    """Whether :func:`require` would pass for ``feature``."""
    return os.environ.get(SKIP_ENV) == "1" or refusal(feature) is None


def status(feature: str) -> tuple[str, str]:
    """("tested" | "accepted" | "refused", detail) of ``feature`` on the installed stack:
    tested when its distributions are the pinned releases (or their own builds, +cu128), accepted
    when they differ (another release, a local build such as a fork's +gited8a445) and every
    probe passes, refused with :func:`refusal`'s message."""
    message = refusal(feature)
    if message is not None:
        return "refused", message
    have, needed = installed(), distributions(feature)
    pins = {**_extra_pins(), **required()}
    differ = [f"{d} {have[d]} (tested {pins[d]})" for d in needed
              if d in pins and not _same_build(have[d] or "", pins[d])]
    if differ:
        return "accepted", "differs from the tested stack: " + ", ".join(differ) + "; every API it uses resolves"
    return "tested", ", ".join(f"{d} {have[d]}" for d in needed) or "needs nothing beyond the wheel"
