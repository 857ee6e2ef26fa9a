"""`torch-xla-ext graph-breaks`: account a model in lazy and dynamo mode (each in a fresh
process) and print where it breaks, splits and round-trips to the host."""

from __future__ import annotations

import argparse

from torch_xla_ext.cli import progress

_DEFAULT_MODEL = "torch_xla_ext.graph_breaks:example_model"


def _run(args: argparse.Namespace) -> int:
    from torch_xla_ext import graph_breaks

    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    model = args.model or _DEFAULT_MODEL
    if ":" not in model:
        raise ValueError(f"--model: expected 'module:factory', got {model!r}")
    inputs = args.inputs or (model.split(":", 1)[0] + ":example_inputs")
    if args.model is None:
        progress("embedded example: 3-layer MLP with a print, a data-dependent if and digamma")
    cmp = graph_breaks.compare(model, inputs, modes=modes, warmup=args.warmup, steps=args.steps, progress=progress)
    if args.json:
        with open(args.json, "w") as f:
            f.write(cmp.to_json(indent=2))
        progress(f"wrote {args.json}")
    if args.plot:
        cmp.plot(args.plot)
        progress(f"wrote {args.plot}")
    print(cmp.to_markdown())
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "graph-breaks",
        help="count Dynamo graph breaks, bridge partitions, XLA compiles and host transfers per mode",
        description="Run a model in each mode (lazy tensors, torch.compile(backend='openxla')), each in "
        "a fresh process, and report FX graphs and breaks, XLA partitions and CPU-fallback ops, "
        "compiles, executions, device->host transfers and ms/step. Without --model, the embedded "
        "example (print + data-dependent if + digamma).",
    )
    p.add_argument("--model", metavar="MODULE:FACTORY",
                   help="importable factory returning the model (default: the embedded example)")
    p.add_argument("--inputs", metavar="MODULE:FUNCTION",
                   help="importable function returning the CPU input tensors (default: example_inputs "
                   "in the model's module)")
    p.add_argument("--modes", default="lazy,dynamo", help="comma-separated, from lazy,dynamo (default: both)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (default: 3)")
    p.add_argument("--steps", type=int, default=8, help="timed steps (default: 8)")
    p.add_argument("--json", metavar="FILE", help="also write the comparison as JSON")
    p.add_argument("--plot", metavar="FILE", help="also write a PNG: breaks, partitions, compiles, ms/step")
    p.set_defaults(func=_run)
