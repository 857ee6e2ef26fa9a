"""`torch-xla-ext export` (a model factory to a bundle directory, through `--frontend` torch_xla
or torchax) and `torch-xla-ext inspect` (a bundle or save_as_stablehlo directory's manifest as a
table; the manifest says which frontend made it)."""

from __future__ import annotations

import argparse

from torch_xla_ext import _frontend, export
from torch_xla_ext._factory import load_model
from torch_xla_ext.cli import progress


def _run_export(args: argparse.Namespace) -> int:
    frontend = _frontend.check(args.frontend, "--frontend")
    model, example_args, kwargs = load_model(args.model)
    progress(f"exporting {args.model} (frontend: {frontend}, tracer: {args.tracer})")
    options = export.ExportOptions(tracer=args.tracer, num_replicas=args.num_replicas)
    bundle = export.export(model, example_args, kwargs, options=options, frontend=frontend)
    if bundle.manifest.traced_by != "torch.export":
        progress(f"traced by {bundle.manifest.traced_by}: {bundle.manifest.fallback_reason}")
    if args.strip_tokens:
        bundle = export.strip_tokens(bundle)
    if args.inline_constants or args.inline_weights:
        bundle = export.inline_constants(bundle, weights=args.inline_weights)
    bundle.save(args.out)
    progress(f"wrote {args.out}")
    print(bundle.manifest.table())
    return 0


def _run_inspect(args: argparse.Namespace) -> int:
    bundle = export.load(args.dir)
    if args.json:
        print(bundle.manifest.to_json(indent=2))
    else:
        print(f"{args.dir}: format_version {bundle.manifest.format_version}, "
              f"{len(bundle.manifest.inputs)} arguments of main, {bundle.manifest.num_user_inputs} user inputs")
        print(bundle.manifest.table())
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="export a model to StableHLO with a typed manifest (tokens, collectives, scales)",
        description="Call FACTORY from MODULE (it returns (model, args) or (model, args, kwargs)), "
        "export with torch.export and the frontend's lowering (torch_xla's exporter, or torchax's), write the "
        "bundle to --out and print its manifest.",
    )
    p.add_argument("--model", required=True, metavar="MODULE:FACTORY", help="e.g. mymodels:make_mlp")
    p.add_argument("--out", required=True, metavar="DIR", help="bundle directory to write")
    p.add_argument("--frontend", default=_frontend.DEFAULT, metavar="{" + ",".join(_frontend.FRONTENDS) + "}",
                   help=f"whose lowering exports the model (default: {_frontend.DEFAULT})")
    p.add_argument("--tracer", choices=export.TRACER_CHOICES, default="auto",
                   help="auto: torch.export, else torch_xla's lazy trace of one forward pass (docs/export.md)")
    p.add_argument("--num-replicas", type=int, default=1, metavar="N",
                   help="torchax: the size of the axis its c10d collectives reduce over (an average divides by it)")
    p.add_argument("--strip-tokens", action="store_true", help="make collective tokens inside main")
    p.add_argument("--inline-constants", action="store_true", help="bake lifted constants into the module")
    p.add_argument("--inline-weights", action="store_true", help="bake constants and weights into the module")
    p.set_defaults(func=_run_export)

    q = sub.add_parser(
        "inspect",
        help="print a bundle's manifest as a table",
        description="Load and validate DIR (a bundle, or torch_xla's save_as_stablehlo output) "
        "and print what each argument of main is and what each collective does.",
    )
    q.add_argument("dir", metavar="DIR")
    q.add_argument("--json", action="store_true", help="print the manifest as JSON instead")
    q.set_defaults(func=_run_inspect)
