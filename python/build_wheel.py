"""Writes the torch_xla_ext wheel (PEP 427) from files Bazel hands over; reproducible bytes.

`wheel.wheelfile.WheelFile` writes the archive and its RECORD; `packaging` validates the metadata
and makes the tag. The interpreter running this is the project venv's; the extension may be built
against another CPython (``--python-tag cp312``, `make wheels`), whose tag the wheel then carries.

What it requires: the base is what every route needs (numpy, pydantic, ...: ranges, so a training
image keeps its own); the torch stack comes through extras, so each route has an install line pip
resolves cleanly (README, "Install"):

    xla    the tested stack, requirements.txt's exact pins (torch, torch-xla, jax, jaxlib)
    jax    jax[cpu] from the pin on, and flatbuffers (jax.export): the JAX-only route
    torch  torch from the pin on, no torch_xla, no jax: the current-torch route
    torchax  torchax (and optax, which torchax.train imports) with torch and jax[cpu], each from
           the pin on, no torch_xla: the torchax frontend's route
    plot   matplotlib, for the reports' PNG plots
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
import sysconfig
import zipfile

import packaging.metadata
import packaging.tags
from packaging.requirements import Requirement

NAME = "torch_xla_ext"
DIST_NAME = "torch-xla-ext"
SUMMARY = "Makes PyTorch/XLA's lowering visible and correct: export, numerics, call_jax, graph breaks."
# Everything the package imports besides the torch stack (_versions.STACK) is a compatible range
# (a training image brings its own numpy): the floors are jax's own, and requirements.txt's pins
# must lie inside them (checked here and in tests/packaging, which also checks that nothing the
# package imports is left undeclared).
RANGES = {
    "numpy": ">=1.26,<3",
    "ml-dtypes": ">=0.5.0",
    "scipy": ">=1.12",
    "safetensors": ">=0.4",  # parity's cross-process captures (never pickle)
    "jinja2": ">=3.1",  # parity's HTML page (autoescape); torch requires it too
    "pydantic": ">=2.0",  # every untrusted file's schema: bundle manifests, reports, captures (_validation.py)
    "pydantic-core": ">=2.0",  # _validation raises its PydanticCustomError (pydantic installs it, at its own pin)
    # _validation's TypedDict and NotRequired (pydantic refuses typing's before CPython 3.12);
    # pydantic 2.0's own floor.
    "typing-extensions": ">=4.6.1",
}
# Optional features besides the stack: `pip install 'torch-xla-ext[plot]'` adds the PNG plots.
EXTRAS = {
    "plot": {"matplotlib": ">=3.7"},
}
# The extra with the tested stack, requirements.txt's exact pins.
STACK_EXTRA = "xla"
# jax 0.7.1 (the pin) and every later jax need CPython 3.11+: on 3.10 the stack extra installs
# torch and torch_xla alone, and the gate refuses the JAX features there, naming jax.
JAX_MARKER = 'python_version >= "3.11"'
# The routes without torch_xla: {extra: {requirement: range}}, None for "from the pinned release on".
ROUTES = {
    "jax": {"jax[cpu]": None, "flatbuffers": ">=24.3"},  # flatbuffers: jax.export's (de)serialization
    "torch": {"torch": None},
    # torchax requires nothing itself: the route brings the torch and JAX it runs on.
    # threadpoolctl: parity's exact replay beside JAX's run on one BLAS thread (program/host_dots.py).
    "torchax": {"torchax": None, "optax": None, "torch": None, "jax[cpu]": None, "flatbuffers": ">=24.3",
                "threadpoolctl": ">=3.1"},
}
# Reproducible bytes: every member, RECORD included, carries this date.
SOURCE_DATE_EPOCH = "315532800"  # 1980-01-01, the earliest a zip can say
ZIP_DATE = (1980, 1, 1, 0, 0, 0)


def _load(files: dict[str, str], module: str):
    """A module of the package from the files Bazel hands over (this runs before any install):
    imported as ``torch_xla_ext.<module>`` from the source tree they lie in, so its own imports
    of the package (``torch_xla_ext.errors``) resolve; nothing of the package is installed."""
    rel = f"{NAME}/{module.replace('.', '/')}.py"
    root = os.path.abspath(files[rel])[:-len(rel)] or os.sep
    sys.path.insert(0, root)
    try:
        return importlib.import_module(f"{NAME}.{module}")
    finally:
        sys.path.remove(root)


def requires(requirements: str, versions) -> tuple[list[str], str]:
    """(Requires-Dist lines, the wheel's pins file) from requirements.txt through `versions`
    (torch_xla_ext/_versions.py), the one reader of the pins."""
    with open(requirements) as f:
        pins = versions.parse_pins(f.read(), requirements)
    stack = versions.stack_pins(pins, requirements)
    ranged = {**RANGES, **{n: s for reqs in EXTRAS.values() for n, s in reqs.items()}}
    for name, spec in ranged.items():
        if name not in pins:
            raise SystemExit(f"build_wheel: {requirements} pins no {name}")
        if not Requirement(name + spec).specifier.contains(pins[name]):
            raise SystemExit(f"build_wheel: {requirements} pins {name}=={pins[name]}, outside the wheel's {spec}")
    out = [n + s for n, s in RANGES.items()]
    for n, v in stack.items():
        marker = f" and {JAX_MARKER}" if n in ("jax", "jaxlib") else ""
        out.append(f'{versions.canonical(n)}=={v}; extra == "{STACK_EXTRA}"{marker}')
    for extra, reqs in ROUTES.items():
        for req, spec in reqs.items():
            name = Requirement(req).name
            if name not in pins:
                raise SystemExit(f"build_wheel: {requirements} pins no {name}")
            spec = spec or f">={pins[name]}"
            if not Requirement(name + spec).specifier.contains(pins[name]):
                raise SystemExit(f"build_wheel: {requirements} pins {name}=={pins[name]}, outside the wheel's {spec}")
            out.append(f'{req}{spec}; extra == "{extra}"')
    out += [f'{n}{s}; extra == "{e}"' for e, reqs in EXTRAS.items() for n, s in reqs.items()]
    pins_file = "# The pinned torch stack, from python/requirements.txt (torch_xla_ext/_versions.py reads it).\n"
    pins_file += "".join(f"{n}=={v}\n" for n, v in stack.items())
    return out, pins_file  # metadata() validates each line


def metadata(version: str, requires_dist: list[str]) -> bytes:
    md = packaging.metadata.Metadata.from_raw(
        {
            "metadata_version": "2.1",
            "name": DIST_NAME,
            "version": version,
            "summary": SUMMARY,
            "requires_python": ">=3.10",
            "provides_extra": [STACK_EXTRA, *ROUTES, *EXTRAS],
            "requires_dist": requires_dist,
        }
    )  # validates every field (names, versions, requirement syntax) or raises
    # Field names are case-insensitive to pip and the spec; packaging writes them lower-case, the
    # spec (and everyone grepping a METADATA) spells them Title-Case.
    return "".join(f"{'-'.join(w.capitalize() for w in k.split('-'))}: {v}\n" for k, v in md.as_rfc822().items()).encode()


def tag(python_tag: str | None = None) -> packaging.tags.Tag:
    """The wheel's tag: ``python_tag`` (cp310 ... cp313: the CPython the extension was built for),
    by default this interpreter's."""
    impl = python_tag or f"cp{sys.version_info.major}{sys.version_info.minor}"
    if not re.fullmatch(r"cp3\d+", impl):
        raise SystemExit(f"build_wheel: --python-tag {impl!r} is not a CPython tag such as cp312")
    # The plain platform (linux_x86_64), as before: the shipped libraries are not manylinux-audited.
    return packaging.tags.Tag(impl, impl, sysconfig.get_platform().replace("-", "_").replace(".", "_"))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--requirements", required=True)
    p.add_argument("--file", action="append", default=[])
    p.add_argument("--dest", action="append", default=[])
    p.add_argument("--python-tag", default=None, help="cp310 ... cp313 (default: this interpreter's)")
    a = p.parse_args()
    if len(a.file) != len(a.dest):
        raise SystemExit("build_wheel: --file and --dest must pair up")
    files = {d: f for f, d in zip(a.file, a.dest) if d.startswith(f"{NAME}/")}
    version = _load(files, "version").__version__
    versions = _load(files, "_versions")
    requires_dist, pins_file = requires(a.requirements, versions)
    t = tag(a.python_tag)
    dist_info = f"{NAME}-{version}.dist-info"
    wheel_meta = f"Wheel-Version: 1.0\nGenerator: torch_xla_ext build_wheel\nRoot-Is-Purelib: false\nTag: {t}\n"

    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, f"{NAME}-{version}-{t}.whl")
    os.environ["SOURCE_DATE_EPOCH"] = SOURCE_DATE_EPOCH  # WheelFile dates RECORD by it
    from wheel.wheelfile import WheelFile

    with WheelFile(path, "w") as whl:

        def add(arcname: str, data: bytes, mode: int = 0o644) -> None:
            info = zipfile.ZipInfo(arcname, ZIP_DATE)
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            whl.writestr(info, data)

        for arcname in sorted(files):
            with open(files[arcname], "rb") as f:
                add(arcname, f.read(), 0o755 if arcname.endswith(".so") else 0o644)
        add(f"{NAME}/{versions.PINS_FILE}", pins_file.encode())
        # The script trace's start-up hook: with TORCH_XLA_EXT_TRACE set, every Python process traces itself.
        startup = _load(files, "trace.startup")
        add(startup.PTH_FILE, startup.PTH_LINE.encode())
        add(f"{dist_info}/METADATA", metadata(version, requires_dist))
        add(f"{dist_info}/WHEEL", wheel_meta.encode())
        add(f"{dist_info}/entry_points.txt", b"[console_scripts]\ntorch-xla-ext = torch_xla_ext.cli:main\n")
        add(f"{dist_info}/top_level.txt", f"{NAME}\n".encode())
    print(f"build_wheel: wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
