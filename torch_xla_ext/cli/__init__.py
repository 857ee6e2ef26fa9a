"""`torch-xla-ext`: one subcommand per component, each in its own module of this package
(``torch_xla_ext/cli/<command>.py`` with ``register(subparsers)``), listed here."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# Components with a subcommand, in the order `--help` lists them.
_COMMANDS = ("numerics", "export", "parity", "graph_breaks", "doctor")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torch-xla-ext",
        description="Makes PyTorch/XLA's lowering visible: numerics, export, call_jax, graph breaks.",
    )
    from torch_xla_ext.version import __version__

    parser.add_argument("--version", action="version", version=f"torch-xla-ext {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in _COMMANDS:
        importlib.import_module(f"torch_xla_ext.cli.{name}").register(sub)
    return parser


def progress(message: str) -> None:
    """One line of progress on stderr, so stdout stays the report."""
    print(f"[torch-xla-ext] {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, TypeError, FileNotFoundError) as e:
        print(f"torch-xla-ext {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
