"""`torch-xla-ext graph-breaks`: account a model in lazy and dynamo mode (each in a fresh
process) and print where it breaks, splits and round-trips to the host; `graph-breaks merge`
combines the per-rank reports of a multi-process job and names the ranks that differ."""

from __future__ import annotations

import argparse
from typing import Any

from torch_xla_ext.cli import progress

_DEFAULT_MODEL = "torch_xla_ext.graph_breaks:example"


def _run(args: argparse.Namespace) -> int:
    from torch_xla_ext import graph_breaks  # torch and Dynamo: not for `torch-xla-ext --help`

    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    model = args.model or _DEFAULT_MODEL
    if args.model is None:
        progress("embedded example: 3-layer MLP with a print, a data-dependent if and digamma")
    cmp = graph_breaks.compare(model, modes=modes, train=args.train, warmup=args.warmup, steps=args.steps,
                               progress=progress, timeout_s=args.timeout, torch_trace=args.torch_trace)
    _write(args, cmp, [cmp.modes[m].report for m in cmp.modes], labels=list(cmp.modes))
    if args.torch_trace:
        progress(f"torch's structured trace of the dynamo run is in {args.torch_trace}: "
                 f"tlparse {args.torch_trace}/dedicated_log_torch_trace_*.log (one file per run; several "
                 f"ranks: tlparse {args.torch_trace} --all-ranks-html)")
    if args.plot:
        progress(f"wrote {args.plot}" if cmp.plot(args.plot) else f"{args.plot} not written: matplotlib is "
                 "not installed (pip install 'torch-xla-ext[plot]')")
    print(cmp.to_markdown())
    return 0


def _write(args: argparse.Namespace, result: Any, reports: list[Any], labels: list[str] | None = None) -> None:
    """--json, --html and --trace of a comparison or a merge (both have to_json and write_html)."""
    from torch_xla_ext import graph_breaks  # torch and Dynamo: not for `torch-xla-ext --help`

    if args.json:
        with open(args.json, "w") as f:
            f.write(result.to_json(indent=1))
        progress(f"wrote {args.json}")
    if args.html:
        result.write_html(args.html)
        progress(f"wrote {args.html}")
    if args.trace:
        graph_breaks.write_trace(args.trace, reports, labels=labels)
        progress(f"wrote {args.trace}")


def _merge(args: argparse.Namespace) -> int:
    from torch_xla_ext import graph_breaks  # torch and Dynamo: not for `torch-xla-ext --help`

    progress(f"merging {len(args.files)} report(s)")
    merged = graph_breaks.merge(args.files)
    _write(args, merged, [merged.reports[r] for r in merged.ranks])
    print(merged.to_markdown())
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "graph-breaks",
        help="count Dynamo graph breaks, AOT graphs, bridge partitions, XLA compiles and host transfers per mode",
        description="Run a model in each mode (lazy tensors, torch.compile(backend='openxla')), each in "
        "a fresh process, and report Dynamo's compiles, graphs and structured graph breaks, AOTAutograd's "
        "forward/backward graphs, the bridge's XLA partitions and CPU-fallback ops, compiles, executions, "
        "device->host transfers and ms/step. Without --model, the embedded example (print + data-dependent "
        "if + digamma). `graph-breaks merge FILE...` combines per-rank reports.",
    )
    p.add_argument("--model", metavar="MODULE:FACTORY",
                   help="importable factory returning (model, args) or (model, args, kwargs) "
                   "(default: the embedded example)")
    p.add_argument("--train", action="store_true",
                   help="a training step (zero_grad, forward, loss, backward, SGD step) instead of a forward pass")
    p.add_argument("--modes", default="lazy,dynamo", help="comma-separated, from lazy,dynamo (default: both)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (default: 3)")
    p.add_argument("--steps", type=int, default=8, help="timed steps (default: 8)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per mode before its worker is killed")
    p.add_argument("--json", metavar="FILE", help="also write the comparison as JSON")
    p.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report")
    p.add_argument("--trace", metavar="FILE", help="also write a Chrome/Perfetto trace (traceEvents JSON)")
    p.add_argument("--torch-trace", metavar="DIR",
                   help="run the dynamo mode with TORCH_TRACE=DIR: torch's structured trace, with this tool's "
                   "figures as artifacts under each compile id, for tlparse (per rank with RANK set)")
    p.add_argument("--plot", metavar="FILE", help="also write a PNG: breaks, partitions, compiles, ms/step")
    p.set_defaults(func=_run)
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    m = actions.add_parser("merge", help="combine per-rank JSON files and name the ranks that differ",
                           description="Combine what each rank wrote — the --json of `graph-breaks` run per "
                           "rank (both modes, merged mode by mode) or ledger.report().save(...) — into one "
                           "report that names the ranks that differ and in what: an extra compile, another "
                           "graph hash, a break or fallback op only some ranks take.")
    m.add_argument("files", nargs="+", metavar="FILE",
                   help="per-rank JSON files: `graph-breaks --json` results or saved ledger reports (one kind)")
    m.add_argument("--json", metavar="FILE", help="also write the merged report as JSON")
    m.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report")
    m.add_argument("--trace", metavar="FILE", help="also write a Chrome/Perfetto trace with one process per rank")
    m.set_defaults(func=_merge)
