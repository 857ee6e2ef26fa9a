"""`torch-xla-ext doctor`: every component on one model, one report directory."""

from __future__ import annotations

import argparse

from torch_xla_ext import _frontend
from torch_xla_ext.cli import progress
from torch_xla_ext.errors import InvalidArgumentError


def _run(args: argparse.Namespace) -> int:
    frontend = _frontend.check(args.frontend, "--frontend")
    if args.steps < 1:
        raise InvalidArgumentError(f"--steps: expected >= 1, got {args.steps}")
    from torch_xla_ext import doctor  # torch, torch_xla and JAX: not for `torch-xla-ext --help`

    report = doctor.run(args.out, model=args.model, steps=args.steps, frontend=frontend, progress=progress)
    print(report.summary())
    return report.exit_code


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "doctor",
        help="one report over parity, export, call_jax and graph breaks (torchax: parity, export, compiles)",
        description="Run every component on the embedded example (a transformer-like block with an "
        "all-reduce, a JAX call with an unused argument, a graph break and a CPU-fallback op, in fp32 "
        "and bf16) or on --model, and write report.md, report.json, PNG plots and the exported bundle. "
        "With --frontend torchax: parity and export through torchax, and the compiled forward's JAX "
        "compiles under `torch-xla-ext trace`. "
        "A check that fails on the model (a graph-break mode whose backend raised or whose worker died, a "
        "parity exception, an export beyond tolerance) is a finding: its section says what failed, where in "
        "the model, whose code raised it and what to try, and the other sections and modes keep their figures.",
        epilog="exit codes: 0 the report was written (findings included); 1 a section could not produce its "
        "report (a bug of torch_xla_ext or a library: its traceback is in report.md); 2 bad input (the --model "
        "spec or a flag, named in the message).",
    )
    p.add_argument("--model", metavar="MODULE:FACTORY",
                   help="a factory returning (nn.Module, args) or (nn.Module, args, kwargs) (the one "
                   "--model contract); the doctor uses the module, args and kwargs in every section "
                   "(call_jax runs on the embedded example only); default: the embedded example")
    p.add_argument("--out", default="doctor-report", metavar="DIR", help="report directory (default: %(default)s)")
    p.add_argument("--steps", type=int, default=5,
                   help="timed steps per graph-break mode; torchax: calls of the compiled forward (default: %(default)s)")
    p.add_argument("--frontend", default=_frontend.DEFAULT, metavar="{" + ",".join(_frontend.FRONTENDS) + "}",
                   help=f"how the model reaches XLA (default: {_frontend.DEFAULT})")
    p.set_defaults(func=_run)
