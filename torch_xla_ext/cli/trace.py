"""`torch-xla-ext trace --out DIR -- COMMAND ...`: run a training command unchanged and report why
it compiles again and where it syncs; `torch-xla-ext trace --report DIR` renders a trace again
from its rank files; `torch-xla-ext trace --env DIR` prints the environment a launcher we cannot
wrap must pass to every process.

The command's stdout, stderr and exit status pass through untouched; the summary (at most 20
lines) goes to stderr after it ended. Bad input (an unwritable --out, an old trace without
--overwrite, a directory without rank files) exits 2 before anything runs; a command that does
not exist exits 127, as a shell does."""

from __future__ import annotations

import argparse
import os
import sys

from torch_xla_ext.cli import progress
from torch_xla_ext.errors import first_line


def _run(args: argparse.Namespace) -> int:
    # torch (the report) and the recorder's site: not for `torch-xla-ext --help`
    from torch_xla_ext import trace
    from torch_xla_ext.trace import launch

    if args.report is not None:
        if args.argv:
            raise trace.TraceError("--report DIR renders an existing trace: give no command with it")
        report = trace.render(args.report)
        _summary(report)
        return 0
    if args.env is not None:
        env = launch.child_environment(os.path.abspath(args.env), environ={}, capture=args.capture,
                                       torch_trace=not args.no_torch_trace)
        for k in sorted(env):
            # PYTHONPATH keeps what the job's environment already has after ours.
            tail = '"${PYTHONPATH:+:$PYTHONPATH}"' if k == "PYTHONPATH" else ""
            print(f"export {k}={_quote(env[k])}{tail}")
        return 0
    command = list(args.argv)
    if command and command[0] == "--":
        command = command[1:]
    if args.out is None:
        raise trace.TraceError("--out DIR is required to trace a command (or --report DIR to render one)")
    if not command:
        raise trace.TraceError("no command: torch-xla-ext trace --out DIR -- python train.py ...")
    status, path = launch.run(command, args.out, overwrite=args.overwrite, capture=args.capture,
                              torch_trace=not args.no_torch_trace)
    if path is None:  # the command did not start (said on stderr)
        return status
    try:
        report = trace.render(path)
    except trace.TraceError as e:
        progress(f"trace: no report: {e}")
        return status
    except Exception as e:  # noqa: BLE001 - the command's status stands; our failure is said, not raised
        progress(f"trace: the report could not be written ({first_line(e, with_type=True)}); the rank files are in {path}, "
                 f"`torch-xla-ext trace --report {path}` renders them")
        return status
    _summary(report)
    return status


def _summary(report: dict) -> None:
    print("\n".join(report["summary"]), file=sys.stderr, flush=True)


def _quote(v: str) -> str:
    import shlex

    return shlex.quote(v)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "trace",
        help="run a training command unchanged; report why it compiles again and where it syncs",
        description="Run COMMAND (python train.py, python -m pkg, torchrun ..., a script calling torch_xla.launch) "
        "with a recorder in every Python process it starts, and report every XLA compile: its step, graph hash, "
        "what triggered it (torch_xla.sync, a host read such as .item() or print, the data loader, Dynamo) at "
        "which line, its compile time, and what differs from the earlier graph compiled there; Dynamo's compiles, "
        "breaks and recompiles; where the ranks' graphs first differ. Writes DIR/report.md, report.json, "
        "report.html, trace.perfetto.json and torch's structured trace for tlparse (DIR/torch_trace).",
        usage="torch-xla-ext trace --out DIR [--overwrite] [--capture auto|all|off] [--no-torch-trace] -- COMMAND [ARGS...]\n"
              "       torch-xla-ext trace --report DIR\n       torch-xla-ext trace --env DIR",
    )
    p.add_argument("--out", metavar="DIR", help="the trace directory (created; refused if it holds a trace)")
    p.add_argument("--overwrite", action="store_true", help="replace the trace DIR holds")
    p.add_argument("--capture", default="auto", choices=("auto", "all", "off"),
                   help="when to read the pending graph before a sync, to compare recompiled graphs op by op: auto "
                   "(the first steps and the steps after a compile), all (every sync; slow), off")
    p.add_argument("--no-torch-trace", action="store_true",
                   help="do not set TORCH_TRACE=DIR/torch_trace (torch's structured trace, for tlparse)")
    p.add_argument("--report", metavar="DIR", help="render the report of an existing trace again, from its rank files")
    p.add_argument("--env", metavar="DIR", help="print the environment (export lines) that traces every Python process "
                   "into DIR, for launchers the command cannot wrap")
    p.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="the command to run, after --")
    p.set_defaults(func=_run)
