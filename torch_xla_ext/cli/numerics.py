"""`torch-xla-ext numerics`: compare two .npy files, or run the embedded XLA-vs-CPU example."""

from __future__ import annotations

import argparse
import os

import numpy as np

from torch_xla_ext import numerics
from torch_xla_ext.cli import progress
from torch_xla_ext.errors import InvalidArgumentError, NotFoundError


def example_bf16_matmul(m: int = 64, k: int = 256, n: int = 128, seed: int = 0):
    """The embedded example: a bf16 matmul plus bias (``F.linear``) on XLA (PJRT CPU) against
    CPU eager, same inputs. XLA rounds the dot to bf16 and again after the bias add; CPU's
    addmm rounds once, so a few elements differ by an ulp or so.

    Returns (xla_result_on_cpu, cpu_result). Imports torch and torch_xla.
    """
    import torch
    import torch.nn.functional as F
    import torch_xla

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g).to(torch.bfloat16)
    w = torch.randn(n, k, generator=g).to(torch.bfloat16)
    b = torch.randn(n, generator=g).to(torch.bfloat16)
    device = torch_xla.device()
    xla = F.linear(x.to(device), w.to(device), b.to(device)).cpu()
    return xla, F.linear(x, w, b)


def _load_npy(path: str, flag: str) -> np.ndarray:
    if not os.path.isfile(path):
        raise NotFoundError(f"{flag}: no such file: {path}")
    try:
        loaded = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:  # object arrays need pickle, which we never allow
        raise InvalidArgumentError(f"{flag}: {path} is not a plain numeric .npy file ({e})") from None
    if not isinstance(loaded, np.ndarray):  # an .npz archive: several arrays, not one
        raise InvalidArgumentError(f"{flag}: {path} holds several arrays (.npz), not one .npy array")
    return loaded


def _run(args: argparse.Namespace) -> int:
    tol = {} if args.rtol is None and args.atol is None else {"rtol": args.rtol, "atol": args.atol}
    if args.actual or args.expected:
        if not (args.actual and args.expected):
            raise InvalidArgumentError("--actual and --expected go together")
        actual, expected = _load_npy(args.actual, "--actual"), _load_npy(args.expected, "--expected")
        title = f"{args.actual} vs {args.expected}"
    else:
        progress("embedded example: bf16 linear (64x256 @ 256x128 + bias) on XLA (PJRT CPU) vs CPU eager")
        actual, expected = example_bf16_matmul()
        title = "XLA vs CPU, bf16 linear 64x256 @ 256x128 + bias"
    report = numerics.compare(actual, expected, equal_nan=args.equal_nan, check_dtype=False, **tol)
    if args.json:
        with open(args.json, "w") as f:
            f.write(report.to_json(indent=2))
        progress(f"wrote {args.json}")
    print(title)
    print(report)
    # Comparing files is a check (exit 1 on mismatch); the example only shows a report.
    return 1 if (args.actual and not report.passed) else 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "numerics",
        help="compare two arrays like torch.testing, with ULP statistics",
        description="Compare --actual with --expected (.npy, loaded without pickle), or by default "
        "run the embedded bf16 matmul on XLA against CPU eager and print the report.",
    )
    p.add_argument("--actual", help=".npy file with the values under test")
    p.add_argument("--expected", help=".npy file with the reference values")
    p.add_argument("--rtol", type=float, help="relative tolerance (default: torch.testing's for the dtype)")
    p.add_argument("--atol", type=float, help="absolute tolerance (default: torch.testing's for the dtype)")
    p.add_argument("--equal-nan", action="store_true", help="NaN equals NaN")
    p.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    p.set_defaults(func=_run)
