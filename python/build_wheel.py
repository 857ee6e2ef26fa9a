"""Writes the torch_xla_ext wheel (PEP 427) from files Bazel hands over; reproducible bytes.

`wheel.wheelfile.WheelFile` writes the archive and its RECORD; `packaging` validates the metadata
and makes the tag. The interpreter running this is the project venv's, the one the extension was
built against, so its tags are the wheel's tags.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import sysconfig
import zipfile

import packaging.metadata
import packaging.tags
from packaging.requirements import Requirement

NAME = "torch_xla_ext"
DIST_NAME = "torch-xla-ext"
SUMMARY = "Makes PyTorch/XLA's lowering visible and correct: export, numerics, call_jax, graph breaks."
# Everything the package imports besides the pinned stack (_versions.STACK, exact pins from
# requirements.txt) is a compatible range (a training image brings its own numpy): the floors are
# jax's own, and requirements.txt's pins must lie inside them (checked here and in tests/packaging,
# which also checks that nothing the package imports is left undeclared).
RANGES = {
    "numpy": ">=1.26,<3",
    "ml-dtypes": ">=0.5.0",
    "scipy": ">=1.12",
    "safetensors": ">=0.4",  # parity's cross-process captures (never pickle)
    "jinja2": ">=3.1",  # parity's HTML page (autoescape); torch requires it too
    "pydantic": ">=2.0",  # the schemas of saved graph-break reports and parity captures (_validation.py)
}
# Optional features: `pip install 'torch-xla-ext[plot]'` adds the PNG plots of the reports.
EXTRAS = {
    "plot": {"matplotlib": ">=3.7"},
}
# Reproducible bytes: every member, RECORD included, carries this date.
SOURCE_DATE_EPOCH = "315532800"  # 1980-01-01, the earliest a zip can say
ZIP_DATE = (1980, 1, 1, 0, 0, 0)


def _load(files: dict[str, str], module: str):
    """A module of the package from the files Bazel hands over (this runs before any install)."""
    spec = importlib.util.spec_from_file_location(f"_txe_build_{module}", files[f"{NAME}/{module}.py"])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def requires(requirements: str, versions) -> tuple[list[str], str]:
    """(Requires-Dist lines, the wheel's pins file) from requirements.txt through `versions`
    (torch_xla_ext/_versions.py), the one reader of the pins."""
    with open(requirements) as f:
        pins = versions.parse_pins(f.read(), requirements)
    stack = versions.stack_pins(pins, requirements)
    out = [f"{versions.canonical(n)}=={v}" for n, v in stack.items()]
    ranged = {**RANGES, **{n: s for reqs in EXTRAS.values() for n, s in reqs.items()}}
    for name, spec in ranged.items():
        if name not in pins:
            raise SystemExit(f"build_wheel: {requirements} pins no {name}")
        if not Requirement(name + spec).specifier.contains(pins[name]):
            raise SystemExit(f"build_wheel: {requirements} pins {name}=={pins[name]}, outside the wheel's {spec}")
    out += [n + s for n, s in RANGES.items()]
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
            "provides_extra": list(EXTRAS),
            "requires_dist": requires_dist,
        }
    )  # validates every field (names, versions, requirement syntax) or raises
    # Field names are case-insensitive to pip and the spec; packaging writes them lower-case, the
    # spec (and everyone grepping a METADATA) spells them Title-Case.
    return "".join(f"{'-'.join(w.capitalize() for w in k.split('-'))}: {v}\n" for k, v in md.as_rfc822().items()).encode()


def tag() -> packaging.tags.Tag:
    impl = f"cp{sys.version_info.major}{sys.version_info.minor}"
    # The plain platform (linux_x86_64), as before: the shipped libraries are not manylinux-audited.
    return packaging.tags.Tag(impl, impl, sysconfig.get_platform().replace("-", "_").replace(".", "_"))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--requirements", required=True)
    p.add_argument("--file", action="append", default=[])
    p.add_argument("--dest", action="append", default=[])
    a = p.parse_args()
    if len(a.file) != len(a.dest):
        raise SystemExit("build_wheel: --file and --dest must pair up")
    files = {d: f for f, d in zip(a.file, a.dest) if d.startswith(f"{NAME}/")}
    version = _load(files, "version").__version__
    versions = _load(files, "_versions")
    requires_dist, pins_file = requires(a.requirements, versions)
    t = tag()
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
        startup = _load(files, "trace/startup")
        add(startup.PTH_FILE, startup.PTH_LINE.encode())
        add(f"{dist_info}/METADATA", metadata(version, requires_dist))
        add(f"{dist_info}/WHEEL", wheel_meta.encode())
        add(f"{dist_info}/entry_points.txt", b"[console_scripts]\ntorch-xla-ext = torch_xla_ext.cli:main\n")
        add(f"{dist_info}/top_level.txt", f"{NAME}\n".encode())
    print(f"build_wheel: wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
