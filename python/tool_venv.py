"""Cached virtualenvs for the outside tools and other stacks our outputs are checked in (Model
Explorer, tlparse, JAX-only consumers on several JAX releases, current torch without torch_xla),
installed from the registry with exact pins.

Each tool has a pin file `python/tool_requirements/<name>.txt`. Its venv lives under
`$TXE_TOOL_VENV_ROOT` (default `~/.cache/torch_xla_ext/tools`), keyed by the pin file's contents
and the base Python, so a rerun or a fresh clone on the same machine reuses it and a changed pin
builds a new one. Nothing of the project venv leaks in: the venv is made from the base
interpreter, never from the project's. A pin file whose first line is `# python: 3.12` is made
from that CPython (:func:`find_python`: `$TXE_PYTHON_3_12`, else the newest
`$PYENV_ROOT/versions/3.12.*`, else `python3.12` on PATH).

    python3 python/tool_venv.py tlparse          # prints the venv's path, creating it if needed

From a test: ``tool_venv.ensure("tlparse") -> pathlib.Path`` (the venv root; ``bin/`` inside).
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import pathlib
import pwd
import re
import shutil
import subprocess
import sys

PINS_DIR = pathlib.Path(__file__).resolve().parent / "tool_requirements"
_MARK = ".txe-complete"


class ToolVenvError(RuntimeError):
    """A tool venv could not be made (pip failed or timed out); the message carries pip's tail."""


def _home() -> pathlib.Path:
    # Bazel's test environment may point HOME elsewhere; the cache belongs to the real user.
    return pathlib.Path(pwd.getpwuid(os.getuid()).pw_dir)


def root() -> pathlib.Path:
    env = os.environ.get("TXE_TOOL_VENV_ROOT")
    return pathlib.Path(env) if env else _home() / ".cache" / "torch_xla_ext" / "tools"


def base_python() -> str:
    """The interpreter venvs are made from: $TXE_BASE_PYTHON, else the base of this one."""
    return os.environ.get("TXE_BASE_PYTHON") or getattr(sys, "_base_executable", None) or sys.executable


def find_python(version: str) -> str:
    """A CPython ``version`` ("3.12") interpreter: ``$TXE_PYTHON_3_12``, else the newest
    ``$PYENV_ROOT/versions/3.12.*`` (root default ~/.pyenv), else ``python3.12`` on PATH (the same
    search as bazel/python_configure.bzl's for the wheels). Raises ToolVenvError naming what it
    tried."""
    env = "TXE_PYTHON_" + version.replace(".", "_")
    if os.environ.get(env):
        candidates = [os.environ[env]]
    else:
        root = pathlib.Path(os.environ.get("PYENV_ROOT") or _home() / ".pyenv") / "versions"
        found = sorted(root.glob(f"{version}.*"), key=lambda p: [int(x) for x in re.findall(r"\d+", p.name)])
        candidates = [str(p / "bin" / f"python{version}") for p in reversed(found)]
        on_path = shutil.which(f"python{version}")
        if on_path:
            candidates.append(on_path)
    for python in candidates:
        try:
            out = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2], "
                                  "sys.implementation.name)"], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode == 0 and out.stdout.split() == [version, "cpython"]:
            return python
    raise ToolVenvError(f"no CPython {version} (tried: {', '.join(candidates) or 'nothing'}); set {env} to one")


def _pinned_python(pins: pathlib.Path) -> str | None:
    """The CPython version a pin file asks for (`# python: 3.12` on its first line), or None."""
    first = pins.read_text().split("\n", 1)[0]
    m = re.fullmatch(r"#\s*python:\s*(3\.\d+)\s*", first)
    return m.group(1) if m else None


def pin_file(name: str) -> pathlib.Path:
    path = PINS_DIR / f"{name}.txt"
    if not path.is_file():
        known = sorted(p.stem for p in PINS_DIR.glob("*.txt"))
        raise FileNotFoundError(f"no pin file for tool {name!r}: {path} (known: {', '.join(known)})")
    return path


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "RUNFILES_DIR", "PYTHONSAFEPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.setdefault("PIP_CACHE_DIR", str(_home() / ".cache" / "pip"))
    return env


def ensure(name: str, timeout: float = 1200.0) -> pathlib.Path:
    """The venv of tool `name`, made from its pin file if missing. Safe against concurrent callers
    (a file lock per venv)."""
    pins = pin_file(name)
    wanted = _pinned_python(pins)
    base = find_python(wanted) if wanted else base_python()
    version = subprocess.run([base, "-c", "import sys; print(sys.version)"], capture_output=True,
                             text=True, check=True, timeout=60).stdout
    key = hashlib.sha256(pins.read_bytes() + version.encode()).hexdigest()[:12]
    venv = root() / f"{name}-{key}"
    if (venv / _MARK).exists():
        return venv
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (venv / _MARK).exists():
            return venv
        shutil.rmtree(venv, ignore_errors=True)
        print(f"[tool_venv] creating {venv} from {pins}", file=sys.stderr, flush=True)
        env = _clean_env()
        try:
            subprocess.run([base, "-m", "venv", str(venv)], check=True, env=env, timeout=120,
                           capture_output=True)
            proc = subprocess.run(
                [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                 "-r", str(pins)], env=env, timeout=timeout, capture_output=True, text=True)
        except subprocess.TimeoutExpired as e:
            raise ToolVenvError(f"making the {name} venv timed out after {e.timeout} s") from None
        if proc.returncode != 0:
            raise ToolVenvError(f"pip install -r {pins} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        (venv / _MARK).touch()
    return venv


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="+", help="tool names (pin files in python/tool_requirements)")
    args = parser.parse_args(argv)
    for name in args.names:
        print(ensure(name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
