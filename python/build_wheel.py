"""Writes the torch_xla_ext wheel (PEP 427) from files Bazel hands over; reproducible bytes.

The interpreter running this is the project venv's, the one the extension was built against,
so its tags are the wheel's tags.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import re
import sys
import sysconfig
import zipfile

NAME = "torch_xla_ext"
DIST_NAME = "torch-xla-ext"
# The wheel's dependencies. torch_xla's _XLAC links torch's C++ ABI and names jax/jaxlib 0.7.1, so
# those four are the exact pins of requirements.txt. Everything else the package imports is a
# compatible range (a training image brings its own numpy): the floors are jax 0.7.1's own, and
# requirements.txt's pins must lie inside them (tests/packaging checks both, and that nothing the
# package imports is left undeclared).
EXACT = ("torch", "torch-xla", "jax", "jaxlib")
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
ZIP_DATE = (1980, 1, 1, 0, 0, 0)


def _version(files: dict[str, str]) -> str:
    text = open(files[f"{NAME}/version.py"]).read()
    m = re.search(r'__version__ = "([^"]+)"', text)
    if not m:
        raise SystemExit("build_wheel: no __version__ in torch_xla_ext/version.py")
    return m.group(1)


def _requires(path: str) -> list[str]:
    pins = {}
    for line in open(path):
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, ver = line.split("==", 1)
            pins[re.sub(r"[-_.]+", "-", name).lower()] = ver
    missing = [r for r in (*EXACT, *RANGES, *(n for e in EXTRAS.values() for n in e)) if r not in pins]
    if missing:
        raise SystemExit(f"build_wheel: {path} pins no {', '.join(missing)}")
    lines = [f"{r}=={pins[r]}" for r in EXACT] + [f"{r}{spec}" for r, spec in RANGES.items()]
    for extra, reqs in EXTRAS.items():
        lines += [f'{r}{spec}; extra == "{extra}"' for r, spec in reqs.items()]
    return lines


def _tag() -> str:
    impl = f"cp{sys.version_info.major}{sys.version_info.minor}"
    plat = re.sub(r"[-.]", "_", sysconfig.get_platform())
    return f"{impl}-{impl}-{plat}"


def _record_line(arcname: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


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
    version = _version(files)
    dist_info = f"{NAME}-{version}.dist-info"
    tag = _tag()
    metadata = "\n".join(
        [
            "Metadata-Version: 2.1",
            f"Name: {DIST_NAME}",
            f"Version: {version}",
            "Summary: Makes PyTorch/XLA's lowering visible and correct: export, numerics, call_jax, graph breaks.",
            "Requires-Python: >=3.10",
            *(f"Provides-Extra: {e}" for e in EXTRAS),
            *(f"Requires-Dist: {r}" for r in _requires(a.requirements)),
            "",
        ]
    )
    wheel = f"Wheel-Version: 1.0\nGenerator: torch_xla_ext build_wheel\nRoot-Is-Purelib: false\nTag: {tag}\n"
    entry_points = "[console_scripts]\ntorch-xla-ext = torch_xla_ext.cli:main\n"

    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, f"{NAME}-{version}-{tag}.whl")
    record = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:

        def add(arcname: str, data: bytes, mode: int = 0o644) -> None:
            info = zipfile.ZipInfo(arcname, ZIP_DATE)
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
            record.append(_record_line(arcname, data))

        for arcname in sorted(files):
            with open(files[arcname], "rb") as f:
                add(arcname, f.read(), 0o755 if arcname.endswith(".so") else 0o644)
        add(f"{dist_info}/METADATA", metadata.encode())
        add(f"{dist_info}/WHEEL", wheel.encode())
        add(f"{dist_info}/entry_points.txt", entry_points.encode())
        add(f"{dist_info}/top_level.txt", f"{NAME}\n".encode())
        record.append(f"{dist_info}/RECORD,,")
        info = zipfile.ZipInfo(f"{dist_info}/RECORD", ZIP_DATE)
        info.external_attr = 0o100644 << 16
        z.writestr(info, "\n".join(record) + "\n")
    print(f"build_wheel: wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
