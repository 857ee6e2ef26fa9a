"""`torch-xla-ext parity`: XLA vs CPU parity verdict with an explanation, for a model factory or
the embedded pytorch/xla#8747 example (scan over 4 patched nn.Linear(128, 128), bf16)."""

from __future__ import annotations

import argparse

from torch_xla_ext._factory import resolve
from torch_xla_ext.cli import progress


def _run(args: argparse.Namespace) -> int:
    from torch_xla_ext import parity

    tol = {} if args.rtol is None and args.atol is None else {"rtol": args.rtol, "atol": args.atol}
    if args.model:
        progress(f"building {args.model}")
        made = resolve(args.model)()
        if isinstance(made, dict) and "layers" in made:
            progress(f"scan_layers parity over {len(made['layers'])} layers ({args.dtype})")
            report = parity.scan_layers(made["layers"], made["x"], dtype=args.dtype,
                                        reference_layers=made.get("reference_layers"), **tol)
        elif isinstance(made, tuple) and len(made) in (2, 3):
            progress(f"verify on XLA vs CPU eager ({args.dtype})")
            reference = made[2] if len(made) == 3 else None
            report = parity.verify(made[0], made[1], dtype=args.dtype, reference=reference, **tol)
        else:
            raise ValueError(
                "--model: the factory must return (fn, inputs), (fn, inputs, reference) or "
                "{'layers': [...], 'x': tensor, 'reference_layers': [...]}"
            )
    else:
        progress(f"embedded example (pytorch/xla#8747): scan_layers over 4 patched nn.Linear(128, 128), "
                 f"input (3, 4, 5, 128), {args.dtype}, XLA (PJRT CPU) vs CPU eager")
        layers, reference, x = parity.scan_patched_linear_example(args.dtype)
        report = parity.scan_layers(layers, x, dtype=args.dtype, reference_layers=reference, **tol)
    if args.json:
        with open(args.json, "w") as f:
            f.write(report.to_json(indent=2))
        progress(f"wrote {args.json}")
    print(report)
    # A user's model is a check (exit 1 unless PASS); the example only shows a verdict.
    return 1 if (args.model and not report.passed) else 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "parity",
        help="XLA vs CPU parity verdict, explained (fp64 golden, rounding-emulated reference)",
        description="Run a model on XLA and CPU eager, compare with an fp64 golden and with a CPU "
        "reference rebuilt from the lowered HLO that rounds where XLA rounds, and explain the verdict. "
        "Without --model, runs the embedded pytorch/xla#8747 example.",
    )
    p.add_argument("--model", metavar="MODULE:FACTORY",
                   help="a factory returning (fn, inputs[, reference]) or "
                        "{'layers', 'x'[, 'reference_layers']} for scan_layers")
    p.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16", help="dtype of the XLA and CPU runs")
    p.add_argument("--rtol", type=float, help="relative tolerance (default: torch.testing's for the dtype)")
    p.add_argument("--atol", type=float, help="absolute tolerance (default: torch.testing's for the dtype)")
    p.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    p.set_defaults(func=_run)
