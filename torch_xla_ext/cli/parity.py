"""`torch-xla-ext parity`: XLA vs CPU parity verdict with an explanation, for a ``--model``
factory (the one contract of ``torch_xla_ext._factory``: ``(model, args[, kwargs])``) or the
embedded pytorch/xla#8747 example (scan over 4 patched nn.Linear(128, 128), bf16).

With ``--scan-layers`` the factory's model is the layer stack (an nn.ModuleList or
nn.Sequential) and ``args`` is ``(x,)``: the layers run with torch_xla's scan_layers on XLA.
``--reference`` names a second factory whose model is the reference (CPU) side.
``--capture FILE`` only runs the model on XLA and saves its per-module capture and the program it
ran (safetensors); ``--compare-capture FILE`` compares such a file with CPU runs of the model and
replays its program, without XLA. ``--frontend torchax`` runs the model through torchax on JAX's
XLA instead of torch_xla (the same report; a torchax capture is compared with ``--frontend torchax``
too). ``--rules`` names the device precision rules the rounded replay
applies (default ``auto``: each dot's precision_config on the device the run or the capture used;
the rules and their help are parity's registry, ``parity/program/rules.py``).
"""

from __future__ import annotations

import argparse

from torch_xla_ext import _frontend
from torch_xla_ext._factory import FactorySpecError, load_model
from torch_xla_ext.cli import progress


RULES_HELP = "the device precision rules (parity's rules registry)"


class _HelpWithRules(argparse.HelpFormatter):
    """The ``--rules`` help from the rules registry, where each rule's words live: imported only
    when the help is printed (it imports torch, which ``torch-xla-ext --help`` does not need)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.help is RULES_HELP:
            from torch_xla_ext.parity.program import rules  # torch: only for `parity --help`

            return rules.cli_help()
        return action.help


def _layers(model, spec: str, flag: str):
    import torch

    if not isinstance(model, (torch.nn.ModuleList, torch.nn.Sequential)) or len(model) == 0:
        raise FactorySpecError(f"{flag}: with --scan-layers, {spec}()[0] must be a non-empty nn.ModuleList or "
                               f"nn.Sequential of layers, got {type(model).__name__}")
    return list(model)


def _run(args: argparse.Namespace) -> int:
    frontend = _frontend.check(args.frontend, "--frontend")  # before the imports below: a bad name costs nothing
    from torch_xla_ext import parity  # torch, torch_xla and JAX: not for `torch-xla-ext --help`

    tol = {} if args.rtol is None and args.atol is None else {"rtol": args.rtol, "atol": args.atol}
    if args.model is None:
        for flag in ("reference", "capture", "compare_capture", "scan_layers"):
            if getattr(args, flag):
                raise FactorySpecError(f"--{flag.replace('_', '-')}: needs --model")
        progress(f"embedded example (pytorch/xla#8747): scan_layers over 4 patched nn.Linear(128, 128), "
                 f"input (3, 4, 5, 128), {args.dtype}, XLA (PJRT CPU) vs CPU eager")
        layers, reference, x = parity.scan_patched_linear_example(args.dtype)
        report = parity.scan_layers(layers, x, dtype=args.dtype, reference_layers=reference, rules=args.rules,
                                    frontend=frontend, **tol)
        return _finish(parity, report, args, check=False)

    if args.plot and not (args.localize or args.compare_capture):
        raise FactorySpecError("--plot: needs a per-module localisation (--localize or --compare-capture)")
    progress(f"building {args.model}")
    made = load_model(args.model)
    reference = load_model(args.reference, "--reference").model if args.reference else None
    if args.capture:
        progress(f"capturing every module of {type(made.model).__name__} on XLA ({args.dtype}, {frontend})")
        path = parity.capture(made.model, made.args, made.kwargs, dtype=args.dtype, frontend=frontend).save(
            args.capture)
        progress(f"wrote {path}")
        return 0
    if args.compare_capture:
        progress(f"comparing {args.compare_capture} with CPU runs of {type(made.model).__name__}")
        report = parity.compare_capture(args.compare_capture, reference or made.model, made.args, made.kwargs,
                                        rules=args.rules, frontend=frontend, **tol)
    elif args.scan_layers:
        if made.kwargs or len(made.args) != 1:
            raise FactorySpecError(f"--model: with --scan-layers, {args.model}() must return (layers, (x,)) with "
                                   f"no keyword inputs")
        layers = _layers(made.model, args.model, "--model")
        ref_layers = _layers(reference, args.reference, "--reference") if reference is not None else None
        progress(f"scan_layers parity over {len(layers)} layers ({args.dtype})")
        report = parity.scan_layers(layers, made.args[0], dtype=args.dtype, reference_layers=ref_layers,
                                    rules=args.rules, frontend=frontend, **tol)
    else:
        progress(f"verify on XLA vs CPU eager ({args.dtype}, {frontend})" + (", per module" if args.localize else ""))
        report = parity.verify(made.model, made.args, made.kwargs, dtype=args.dtype, reference=reference,
                               localize=args.localize, explorer_dir=args.explorer, rules=args.rules,
                               frontend=frontend, **tol)
        if args.explorer:
            progress(f"wrote the program and its per-op error for Model Explorer to {args.explorer}; open it with "
                     f"(pip install ai-edge-model-explorer):")
            print(parity.explorer.open_command(args.explorer), flush=True)
    return _finish(parity, report, args, check=True)


def _finish(parity, report, args: argparse.Namespace, check: bool) -> int:
    """Writes the report where asked and prints it; ``parity`` is the package, imported by the caller."""
    if args.json:
        with open(args.json, "w") as f:
            f.write(report.to_json(indent=2))
        progress(f"wrote {args.json}")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(report.to_markdown())
        progress(f"wrote {args.markdown}")
    if args.html:
        parity.write_html(args.html, report)
        progress(f"wrote {args.html}")
    if args.plot:
        if not report.modules:
            raise FactorySpecError("--plot: needs a per-module localisation (--localize or --compare-capture)")
        parity.plot_modules(report, args.plot)
        progress(f"wrote {args.plot}")
    print(report)
    # A user's model is a check (exit 1 unless PASS); the embedded example only shows a verdict.
    return 1 if (check and not report.passed) else 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "parity",
        formatter_class=_HelpWithRules,
        help="XLA vs CPU parity verdict, explained (fp64 golden, replays of XLA's program, per-module errors)",
        description="Run a model on XLA and CPU eager, compare with an fp64 golden and with replays of XLA's own "
        "program (with XLA:CPU's roundings, and exactly in fp64), and explain the verdict. Without --model, runs "
        "the embedded pytorch/xla#8747 example.",
    )
    p.add_argument("--model", metavar="MODULE:FACTORY",
                   help="a factory returning (model, args) or (model, args, kwargs) (see --scan-layers)")
    p.add_argument("--reference", metavar="MODULE:FACTORY",
                   help="a factory whose model is the CPU reference (default: the --model's model)")
    p.add_argument("--scan-layers", action="store_true",
                   help="the factory's model is a layer stack (nn.ModuleList/nn.Sequential) and args is (x,): "
                        "check torch_xla's scan_layers per layer")
    p.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16", help="dtype of the XLA and CPU runs")
    p.add_argument("--rtol", type=float, help="relative tolerance (default: torch.testing's for the dtype)")
    p.add_argument("--atol", type=float, help="absolute tolerance (default: torch.testing's for the dtype)")
    # Its help is the rules registry's (parity/program/rules.py), read when help is printed.
    p.add_argument("--rules", default="auto", metavar="RULES", help=RULES_HELP)
    p.add_argument("--frontend", default=_frontend.DEFAULT, metavar="{" + ",".join(_frontend.FRONTENDS) + "}",
                   help=f"how the model reaches XLA: torch_xla's lazy tensors or torchax on JAX "
                        f"(default: {_frontend.DEFAULT})")
    p.add_argument("--localize", action="store_true",
                   help="also separate every submodule's own error from what it inherited")
    p.add_argument("--plot", metavar="FILE.png", help="plot the per-module errors (with --localize)")
    p.add_argument("--explorer", metavar="DIR",
                   help="write the program and its per-op error for Model Explorer, and print the command that "
                        "opens them")
    p.add_argument("--capture", metavar="FILE", help="only run on XLA and save the per-module capture (safetensors)")
    p.add_argument("--compare-capture", metavar="FILE",
                   help="compare a saved capture with CPU runs of the model (no XLA needed)")
    p.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    p.add_argument("--markdown", metavar="FILE.md", help="also write the report as Markdown")
    p.add_argument("--html", metavar="FILE.html", help="also write the report as a self-contained HTML page")
    p.set_defaults(func=_run)
