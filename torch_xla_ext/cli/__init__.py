"""`torch-xla-ext`: one subcommand per component, each in its own module of this package
(``torch_xla_ext/cli/<command>.py`` with ``register(subparsers)``), listed here.

Exit codes: 0 success, 1 a failed check (or a bug: anything that is not our error shows its
traceback), 2 bad input (a :class:`~torch_xla_ext.errors.TorchXlaExtError`, whose message names
the flag, file or field; argparse's own usage errors exit 2 as well)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from torch_xla_ext.errors import TorchXlaExtError

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
    if (sys.argv[1:] if argv is None else argv)[:1] in (["parity"], ["doctor"]):
        # Module paths in the Model Explorer output: torch_xla reads this once, at first lowering.
        from torch_xla_ext._compat import hlo_debug

        hlo_debug.enable_for_process()
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except TorchXlaExtError as e:  # bad input, named in the message; anything else is a bug (traceback)
        print(f"torch-xla-ext {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
