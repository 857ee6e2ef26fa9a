"""`torch-xla-ext`: one subcommand per component, each in its own module of this package
(``torch_xla_ext/cli/<command>.py`` with ``register(subparsers)``), listed here.

Exit codes: 0 success (for ``doctor``: the report was written, findings included), 1 a failed
check of ``numerics``/``parity`` or a bug (anything that is not our error shows its traceback;
``doctor`` exits 1 only when a section could not produce its report), 2 bad input (a :class:`~torch_xla_ext.errors.TorchXlaExtError`, whose message names
the flag, file or field; argparse's own usage errors exit 2 as well)."""

from __future__ import annotations

import argparse
import importlib
import sys

from torch_xla_ext import _device
from torch_xla_ext._compat import hlo_debug
from torch_xla_ext.errors import TorchXlaExtError
from torch_xla_ext.version import __version__

# Components with a subcommand, in the order `--help` lists them.
_COMMANDS = ("numerics", "export", "parity", "graph_breaks", "trace", "doctor", "stack")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torch-xla-ext",
        description="Makes PyTorch/XLA's lowering visible: numerics, export, call_jax, graph breaks.",
    )
    parser.add_argument("--version", action="version", version=f"torch-xla-ext {__version__}")
    parser.add_argument("--device", metavar="DEVICE", help=_DEVICE_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in _COMMANDS:
        importlib.import_module(f"torch_xla_ext.cli.{name}").register(sub)
    for p in sub.choices.values():  # `--device` after the command works too
        p.add_argument("--device", metavar="DEVICE", default=argparse.SUPPRESS, help=_DEVICE_HELP)
    return parser


# No command picks the device itself: on a host with an accelerator, torch_xla's own default is it.
_DEVICE_HELP = ("PJRT device to run on (sets PJRT_DEVICE, e.g. CPU); default: the environment's PJRT_DEVICE, "
                "else torch_xla's own choice")


def progress(message: str) -> None:
    """One line of progress on stderr, so stdout stays the report."""
    print(f"[torch-xla-ext] {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in ("parity", "doctor"):
        # Module paths in the Model Explorer output: torch_xla reads this once, at first lowering.
        hlo_debug.enable_for_process()
    try:
        _device.select(args.device)
        return int(args.func(args) or 0)
    except TorchXlaExtError as e:  # bad input, named in the message; anything else is a bug (traceback)
        print(f"torch-xla-ext {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
