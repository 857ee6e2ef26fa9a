"""One mode of :func:`compare` run and accounted in this process (the worker side).

A step is what users run: the model's forward pass under ``torch.no_grad()`` (inference; in
"dynamo" mode the model itself is compiled with ``torch.compile(backend="openxla")``), or with
``train=True`` a training step, zero_grad + forward + loss + backward + an SGD step (in "dynamo"
mode that whole step function is compiled). In "lazy" mode the step runs as LazyTensor code
followed by ``torch_xla.sync()``.

``python -m torch_xla_ext.graph_breaks --worker ...`` runs :func:`main`: compare() starts one per
mode, so torch_xla's and Dynamo's process-wide caches start empty for each.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any, Callable

from torch_xla_ext import _factory, _json
from torch_xla_ext._compat import dynamo as _dynamo
from torch_xla_ext._compat import pytree
from torch_xla_ext.graph_breaks.failures import describe_failure
from torch_xla_ext.graph_breaks.ledger import account
from torch_xla_ext.graph_breaks.report import GraphBreakError, GraphBreakReport

__all__ = ["MODES", "default_loss", "median", "run_mode", "main"]

MODES = ("lazy", "dynamo")
EXIT_BAD_INPUT = 2


def median(values: list[float]) -> float:
    """The one median of step times (the mean of the middle two for an even count; NaN for none):
    what a worker's progress line prints and what the comparison reports."""
    return statistics.median(values) if values else float("nan")


def default_loss(output: Any):
    """The training loss compare() uses: the mean square (in float32) of the first
    floating-point tensor in the output (a ModelOutput's logits or last_hidden_state, a tuple's
    first tensor, a plain tensor)."""
    import torch

    for leaf in pytree.tree_leaves(output):
        if isinstance(leaf, torch.Tensor) and leaf.is_floating_point():
            return leaf.float().pow(2).mean()
    raise GraphBreakError(f"train=True: the model's output ({type(output).__name__}) holds no floating-point "
                          "tensor to take a loss of")


def make_step(made: _factory.Made, mode: str, train: bool, lr: float = 1e-3) -> Callable[[], Any]:
    """The step of one mode on the XLA device, ready to call repeatedly."""
    import torch
    import torch_xla

    # Imports torch_xla's metrics: a worker of a torch-only stack never gets here.
    from torch_xla_ext._compat import metrics as _metrics

    device = torch_xla.device()
    model = made.model.to(device)
    args, kwargs = pytree.tree_map(lambda v: v.to(device) if isinstance(v, torch.Tensor) else v,
                                   (made.args, dict(made.kwargs)))
    # Parameters and inputs materialised before the first step, or lazy mode compiles the
    # transfer into its first graphs and compiles again on the next steps.
    torch_xla.sync()
    _metrics.wait_device_ops()
    if train:
        model.train()
        opt = torch.optim.SGD(model.parameters(), lr=lr)

        def body(*a: Any, **kw: Any) -> None:
            opt.zero_grad()
            loss = default_loss(model(*a, **kw))
            loss.backward()
            opt.step()

        fn = torch.compile(body, backend="openxla") if mode == "dynamo" else body
        grad = torch.enable_grad
    else:  # serving: the model compiled as it is, called under no_grad
        fn = torch.compile(model, backend="openxla") if mode == "dynamo" else model
        grad = torch.no_grad

    def step() -> Any:
        with grad():
            out = fn(*args, **kwargs)
        if mode == "lazy":
            torch_xla.sync()
        _metrics.wait_device_ops()
        return out

    return step


def run_mode(made: _factory.Made, mode: str, warmup: int, steps: int, train: bool = False,
             progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Runs one mode in this process; returns ModeResult.to_dict()-shaped data.

    A step that raises (torch_xla's bridge, Dynamo, AOTAutograd, XLA) ends the mode with a
    ``failure`` (:func:`torch_xla_ext.graph_breaks.failures.describe_failure`, plus where it happened)
    and the reports of what ran until then; bad input (:class:`GraphBreakError`) still raises."""
    _dynamo.reset_dynamo()
    step_ms: list[float] = []
    failure: dict[str, Any] | None = None
    steady = None
    where = "building the step"
    with account() as whole:
        try:
            step = make_step(made, mode, train)
            for i in range(warmup):
                where = f"warmup step {i + 1} of {warmup}"
                step()
                whole.step()
                if progress:
                    progress(f"{mode}: warmup step {i + 1}/{warmup}")
            with account() as steady:
                for i in range(steps):
                    where = f"timed step {i + 1} of {steps}"
                    t0 = time.perf_counter_ns()
                    step()
                    step_ms.append((time.perf_counter_ns() - t0) / 1e6)
                    steady.step()
                    whole.step()
            if progress:
                progress(f"{mode}: {steps} timed steps, median {median(step_ms):.3f} ms")
        except GraphBreakError:
            raise
        except Exception as e:  # noqa: BLE001 - the failure is the finding, reported below
            failure = dict(describe_failure(e), mode=mode, kind="exception",
                           step="training step" if train else "forward pass", where=where)
            if progress:
                progress(f"{mode}: failed at {where}: {failure['exception']}")
    steady_report = steady.report() if steady is not None else GraphBreakReport()
    return {"mode": mode, "train": train, "step_ms": step_ms, "report": whole.report().to_dict(),
            "steady": steady_report.to_dict(), "failure": failure}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m torch_xla_ext.graph_breaks --worker")
    p.add_argument("--worker", action="store_true")
    p.add_argument("--model", required=True)
    p.add_argument("--mode", required=True, choices=MODES)
    p.add_argument("--warmup", type=int, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--train", action="store_true")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)

    def progress(msg: str) -> None:
        print(f"[progress] {msg}", file=sys.stderr, flush=True)

    try:
        made = _factory.load_model(a.model, "model", error=GraphBreakError)
        d = run_mode(made, a.mode, a.warmup, a.steps, a.train, progress)
    except GraphBreakError as e:
        print(f"[bad-input] {e}", file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT
    with open(a.out, "w") as f:
        _json.dump(d, f)
    return 0
