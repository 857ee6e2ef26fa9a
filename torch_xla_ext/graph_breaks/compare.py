"""compare(): the same model lazy and under Dynamo, each mode in a fresh process, side by side.

Example:
    >>> cmp = compare("tests.zoo:gpt2", train=True, warmup=1, steps=2)
    >>> print(cmp.to_markdown()); cmp.write_html("gpt2.html")
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import threading
from typing import Any, Callable, Sequence

from torch_xla_ext import _factory
from torch_xla_ext.graph_breaks.report import GraphBreakError, GraphBreakReport, WorkerError
from torch_xla_ext.graph_breaks.worker import EXIT_BAD_INPUT, MODES, run_mode

__all__ = ["Comparison", "ModeResult", "compare"]


@dataclasses.dataclass
class ModeResult:
    mode: str
    report: GraphBreakReport  # the whole run: warmup (first compiles) and timed steps
    steady: GraphBreakReport  # the timed steps only
    step_ms: list[float]
    isolation: str
    train: bool = False

    @property
    def median_ms(self) -> float:
        s = sorted(self.step_ms)
        n = len(s)
        return (s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2) if n else float("nan")

    def to_dict(self, timeline: bool = True) -> dict[str, Any]:
        return {"mode": self.mode, "train": self.train, "isolation": self.isolation, "step_ms": self.step_ms,
                "median_ms": self.median_ms, "report": self.report.to_dict(timeline),
                "steady": self.steady.to_dict(timeline)}


@dataclasses.dataclass
class Comparison:
    modes: dict[str, ModeResult]
    warmup: int
    steps: int
    model: str = ""
    train: bool = False

    def to_dict(self, timeline: bool = True) -> dict[str, Any]:
        return {"model": self.model, "train": self.train, "warmup": self.warmup, "steps": self.steps,
                "modes": {k: v.to_dict(timeline) for k, v in self.modes.items()}}

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    def rows(self) -> list[tuple[str, Callable[[ModeResult], Any]]]:
        n = self.steps

        def per_step(v: int) -> str:
            return f"{v / n:g}" if n else "-"

        return [
            ("Dynamo frame compiles", lambda r: r.report.dynamo_compiles),
            ("Dynamo graphs", lambda r: r.report.fx_graphs),
            ("graph breaks", lambda r: r.report.num_fx_breaks),
            ("recompiles", lambda r: r.report.recompiles),
            ("AOT forward / backward / inference graphs", lambda r: "{} / {} / {}".format(
                *(r.report.aot_graphs.get(k, 0) for k in ("forward", "backward", "inference")))),
            ("XLA partitions", lambda r: r.report.xla_partitions),
            ("eager fallback nodes", lambda r: sum(r.report.fallback_nodes.values())),
            ("XLA compiles (uncached)", lambda r: r.report.compiles),
            ("XLA compiles (cached)", lambda r: r.report.cached_compiles),
            ("executions / step", lambda r: per_step(r.steady.executions)),
            ("device->host transfers / step", lambda r: per_step(r.steady.transfers_to_host)),
            ("fallback op executions / step", lambda r: per_step(sum(r.steady.fallback_ops.values()))),
            ("forced executions / step", lambda r: per_step(r.steady.forced_executions)),
            ("ms / step (median)", lambda r: f"{r.median_ms:.3f}"),
            ("isolation", lambda r: r.isolation),
        ]

    def to_markdown(self) -> str:
        names = list(self.modes)
        what = "training step" if self.train else "forward pass"
        out = [f"### Graph breaks: {' vs '.join(names)}, {what} of {self.model or 'the model'} "
               f"({self.warmup} warmup + {self.steps} timed steps)", "",
               "| | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
        for label, fn in self.rows():
            out.append(f"| {label} | " + " | ".join(str(fn(self.modes[n])) for n in names) + " |")
        for n in names:
            out += ["", self.modes[n].report.to_markdown(title=f"{n}: whole run")]
        return "\n".join(out)

    def plot(self, path: str) -> str | None:
        """A PNG with breaks, partitions, compiles and ms/step side by side, per mode; None (and
        nothing written) without matplotlib."""
        from torch_xla_ext.graph_breaks import plot

        return plot.plot_comparison(self, path)

    def write_html(self, path: str) -> str:
        """One self-contained HTML file (no network): every mode's report and the joined view."""
        from torch_xla_ext.graph_breaks import html

        return html.write_comparison(path, self)


def _spec_of(obj: Any) -> str | None:
    """'module:qualname' if a fresh interpreter can import `obj`, else None."""
    if isinstance(obj, str):
        return obj
    mod, qual = getattr(obj, "__module__", None), getattr(obj, "__qualname__", "")
    if not mod or mod == "__main__" or "<" in qual:
        return None
    return f"{mod}:{qual}"


def compare(model: str | Callable[[], Any], *, modes: Sequence[str] = MODES, train: bool = False, warmup: int = 3,
            steps: int = 8, isolation: str = "subprocess", progress: Callable[[str], None] | None = None,
            timeout_s: float = 600.0, torch_trace: str | None = None) -> Comparison:
    """Runs the same model in each mode and accounts it: per-mode reports and per-step times.

    ``model`` follows the one ``--model`` contract: a ``'module:factory'`` spec (or the factory
    itself) returning ``(model, args)`` or ``(model, args, kwargs)`` with CPU tensors. A step is
    the forward pass under ``torch.no_grad()``, or with ``train=True`` zero_grad + forward + loss
    (:func:`~torch_xla_ext.graph_breaks.worker.default_loss`) + backward + an SGD step; "dynamo"
    compiles the whole step with ``torch.compile(backend="openxla")``, "lazy" runs it and
    ``torch_xla.sync()``. Each mode runs in its own process by default (torch_xla's compile cache
    and Dynamo's caches are process-wide, so that is the only honest isolation); the worker
    calls the factory itself, so it must build the same model each time (seed it). A factory a
    fresh interpreter cannot import (a lambda, something in ``__main__``) needs
    ``isolation="in-process"``: modes then run one after another with ``torch._dynamo.reset()``
    between them, sharing the XLA compile cache. A worker that runs longer than ``timeout_s`` is
    killed (:class:`WorkerError`). ``torch_trace=DIR`` runs the dynamo worker with
    ``TORCH_TRACE=DIR``: its trace carries the ledger's artifacts for tlparse
    (:mod:`~torch_xla_ext.graph_breaks.tlparse`).

    Example:
        >>> cmp = graph_breaks.compare("torch_xla_ext.graph_breaks:example", warmup=1, steps=2)
        >>> print(cmp.to_markdown()); cmp.plot("breaks.png"); cmp.write_html("breaks.html")
    """
    modes = tuple(modes)
    if not modes or any(m not in MODES for m in modes) or len(set(modes)) != len(modes):
        raise GraphBreakError(f"modes: expected distinct values from {MODES}, got {modes!r}")
    for name, v, low in (("warmup", warmup, 0), ("steps", steps, 1)):
        if not isinstance(v, int) or isinstance(v, bool) or v < low:
            raise GraphBreakError(f"{name}: expected an int >= {low}, got {v!r}")
    if not isinstance(timeout_s, (int, float)) or timeout_s <= 0:
        raise GraphBreakError(f"timeout_s: expected a positive number of seconds, got {timeout_s!r}")
    if isolation not in ("subprocess", "in-process"):
        raise GraphBreakError(f"isolation: expected 'subprocess' or 'in-process', got {isolation!r}")
    if not (isinstance(model, str) or callable(model)):
        raise GraphBreakError(f"model: expected a 'module:factory' spec or a factory, got {type(model).__name__}")
    if torch_trace is not None and (not isinstance(torch_trace, str) or not torch_trace or isolation != "subprocess"
                                    or "dynamo" not in modes):
        raise GraphBreakError(f"torch_trace: expected a directory path, with isolation='subprocess' (torch reads "
                              f"TORCH_TRACE at import) and the dynamo mode (the trace is Dynamo's), got "
                              f"{torch_trace!r} with isolation={isolation!r}, modes={modes!r}")
    spec = _spec_of(model)
    label = spec or getattr(model, "__qualname__", repr(model))
    results: dict[str, ModeResult] = {}
    if isolation == "in-process":
        if isinstance(model, str):
            made = _factory.load_model(model, "model", error=GraphBreakError)
        else:
            made = _factory.check_made(model(), label, "model", error=GraphBreakError)
        for m in modes:
            d = run_mode(made, m, warmup, steps, train, progress)
            results[m] = _mode_result(d, "in-process (torch._dynamo.reset(); shared XLA compile cache)")
            if len(modes) > 1:  # the next mode builds on a fresh model
                made = _factory.load_model(model, "model", error=GraphBreakError) if isinstance(model, str) else \
                    _factory.check_made(model(), label, "model", error=GraphBreakError)
        return Comparison(results, warmup, steps, label, train)
    if spec is None:
        raise GraphBreakError(f"model: {model!r} cannot be imported by a fresh interpreter (define it in a "
                              "module), or pass isolation='in-process'")
    _factory.resolve(spec, "model", error=GraphBreakError)  # fail here, naming the spec
    with tempfile.TemporaryDirectory(prefix="txe_graph_breaks_") as tmp:
        for m in modes:
            out_path = os.path.join(tmp, f"{m}.json")
            cmd = [sys.executable, "-m", "torch_xla_ext.graph_breaks", "--worker", "--model", spec, "--mode", m,
                   "--warmup", str(warmup), "--steps", str(steps), "--out", out_path] + (["--train"] if train else [])
            if progress:
                progress(f"{m}: starting a fresh process")
            env = {"TORCH_TRACE": os.path.abspath(torch_trace)} if torch_trace and m == "dynamo" else {}
            results[m] = _mode_result(_run_worker(cmd, m, out_path, timeout_s, progress, env), "subprocess")
    return Comparison(results, warmup, steps, label, train)


def _run_worker(cmd: list[str], mode: str, out_path: str, timeout_s: float,
                progress: Callable[[str], None] | None, extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    """Runs one worker; its stderr is read on a thread so the timeout can fire while it runs."""
    # the worker runs on the device the user's environment selects
    env = dict(os.environ, **(extra_env or {}))
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    err_lines: list[str] = []
    bad_input: list[str] = []

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            if line.startswith("[progress] "):
                if progress:
                    progress(line[len("[progress] "):].rstrip())
            elif line.startswith("[bad-input] "):
                bad_input.append(line[len("[bad-input] "):].rstrip())
            else:
                err_lines.append(line)

    reader = threading.Thread(target=read, name=f"txe-graph-breaks-{mode}-stderr", daemon=True)
    reader.start()
    try:
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)  # the worker and anything it started
        proc.wait()
        reader.join(timeout=5)
        tail = "".join(err_lines[-20:])
        raise WorkerError(f"mode {mode!r}: worker process timed out after {timeout_s:g} s and was killed:\n{tail}") \
            from None
    reader.join()
    if rc == EXIT_BAD_INPUT and bad_input:
        raise GraphBreakError(bad_input[-1])
    if rc != 0 or not os.path.exists(out_path):
        tail = "".join(err_lines[-20:])
        raise WorkerError(f"mode {mode!r}: worker process failed with exit code {rc}:\n{tail}")
    with open(out_path) as f:
        return json.load(f)


def _mode_result(d: dict[str, Any], isolation: str) -> ModeResult:
    return ModeResult(d["mode"], GraphBreakReport.from_dict(d["report"]), GraphBreakReport.from_dict(d["steady"]),
                      list(d["step_ms"]), isolation, bool(d.get("train", False)))
