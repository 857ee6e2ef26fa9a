"""`torch-xla-ext stack`: what the installed torch / torch_xla / JAX stack lets each feature do."""

from __future__ import annotations

import argparse

from torch_xla_ext import _json, _versions


def _run(args: argparse.Namespace) -> int:
    status = {feature: _versions.status(feature) for feature in _versions.FEATURES}
    if args.json:
        print(_json.dumps({"stack": _versions.summary(), "features": {
            f: {"verdict": v, "detail": d} for f, (v, d) in status.items()}}, indent=2))
    else:
        print(f"torch-xla-ext stack: {_versions.summary()}")
        for feature, (verdict, detail) in status.items():
            print(f"  {verdict:9s} {feature:21s} {detail.splitlines()[0]}")
        refused = [f for f, (v, _) in status.items() if v == "refused"]
        for feature in refused:
            print(f"\n{status[feature][1]}")
    return 1 if any(v == "refused" for v, _ in status.values()) else 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "stack",
        help="what the installed torch, torch_xla and JAX let each feature do",
        description="Check the installed stack the way each feature does when it is used (the gate, "
        "torch_xla_ext._versions): the distributions it needs, that they load, and every upstream API its "
        "code relies on. Each feature is tested (the pinned releases), accepted (other releases or builds "
        "with every API present) or refused (what is missing, and what to do).",
        epilog="exit codes: 0 every feature can run here; 1 at least one is refused (each refusal is printed "
        "in full).",
    )
    p.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    p.set_defaults(func=_run)
