"""compare(): the same model lazy and under Dynamo, each mode in a fresh process, side by side.

Example:
    >>> cmp = compare("torch_xla_ext.graph_breaks:example", warmup=1, steps=1, isolation="in-process")
    >>> {m: r.report.num_fx_breaks for m, r in cmp.modes.items()}   # its print and `if` break Dynamo
    {'lazy': 0, 'dynamo': 2}
    >>> print(cmp.to_markdown().splitlines()[0]); cmp.write_html("example.html")
    ### Graph breaks: lazy vs dynamo, forward pass of torch_xla_ext.graph_breaks:example (1 warmup + 1 timed steps)
    'example.html'
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from typing import Any, Callable, Sequence

from torch_xla_ext import _factory, _json
from torch_xla_ext.graph_breaks import html, plot
from torch_xla_ext.graph_breaks.report import GraphBreakError, GraphBreakReport
from torch_xla_ext.graph_breaks.worker import EXIT_BAD_INPUT, MODES, median, run_mode

__all__ = ["Comparison", "ModeResult", "compare", "failure_markdown"]


@dataclasses.dataclass
class ModeResult:
    mode: str
    report: GraphBreakReport  # the whole run: warmup (first compiles) and timed steps
    steady: GraphBreakReport  # the timed steps only
    step_ms: list[float]
    isolation: str
    train: bool = False
    # Set when the mode did not finish (:func:`describe_failure` fields, or a worker that died or
    # timed out): the reports then hold what ran before it. A finding about the model, not an error.
    failure: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def median_ms(self) -> float:
        return median(self.step_ms)

    def to_dict(self, timeline: bool = True) -> dict[str, Any]:
        return {"mode": self.mode, "train": self.train, "isolation": self.isolation, "step_ms": self.step_ms,
                "median_ms": self.median_ms, "report": self.report.to_dict(timeline),
                "steady": self.steady.to_dict(timeline), "failure": self.failure}


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
        return _json.dumps(self.to_dict(), **kwargs)

    @property
    def failures(self) -> dict[str, dict[str, Any]]:
        """mode -> what failed, for each mode that did not finish."""
        return {k: v.failure for k, v in self.modes.items() if v.failure is not None}

    def rows(self) -> list[tuple[str, Callable[[ModeResult], Any]]]:
        n = self.steps

        def per_step(v: int) -> str:
            return f"{v / n:g}" if n else "-"

        return [
            ("Dynamo frame compiles", lambda r: r.report.dynamo_compiles),
            ("Dynamo graphs", lambda r: r.report.fx_graphs),
            ("graph breaks (logged)", lambda r: r.report.num_fx_breaks),
            ("graph breaks (Dynamo's counter)", lambda r: r.report.num_counted_breaks),
            ("data-dependent jumps", lambda r: r.report.num_data_dependent_jumps),
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
            out.append(f"| {label} | " + " | ".join(self.cell(fn, n) for n in names) + " |")
        for n, f in self.failures.items():
            out += ["", failure_markdown(f, self)]
        for n in names:
            title = f"{n}: whole run" if self.modes[n].ok else f"{n}: what ran before the failure"
            out += ["", self.modes[n].report.to_markdown(title=title)]
        return "\n".join(out)

    def cell(self, fn: Callable[[ModeResult], Any], mode: str) -> str:
        """One cell of the side-by-side table; a mode that failed has no figures to compare."""
        r = self.modes[mode]
        return str(fn(r)) if r.ok or fn(r) == r.isolation else "failed"

    def try_instead(self, failure: dict[str, Any]) -> list[str]:
        """What a user can do about one mode's failure: the known workaround of the op, the other
        mode where it ran, and how to keep the failing code out of the compiled graph."""
        out = []
        if failure.get("layer") in ("PyTorch", "model"):
            out.append("Run the same step eagerly on the CPU with the same inputs: if it fails there too, the cause is "
                       "the model or its inputs (e.g. batch norm in training on one value per channel), not torch_xla.")
        known = failure.get("known")
        if known:
            out.append(known["workaround"])
        others = [m for m, r in self.modes.items() if r.ok and m != failure.get("mode")]
        for m in others:
            out.append(f"{m} mode ran the same {self._what()}: " + (
                "run it without torch.compile (LazyTensor tracing, torch_xla.sync() after each step)"
                if m == "lazy" else "compile it with torch.compile(backend='openxla')") + ".")
        src = failure.get("source")
        if failure.get("mode") == "dynamo" and src:
            out.append(f"Keep the failing code out of the compiled graph: put `{src.get('code') or 'the call'}` "
                       f"({os.path.basename(src['file'])}:{src['line']}) in a function or module wrapped with "
                       "torch.compiler.disable, so it runs eagerly on XLA between two compiled graphs (a graph break).")
        return out

    def _what(self) -> str:
        return "training step" if self.train else "forward pass"

    def plot(self, path: str) -> str | None:
        """A PNG with breaks, partitions, compiles and ms/step side by side, per mode; None (and
        nothing written) without matplotlib."""
        return plot.plot_comparison(self, path)

    def write_html(self, path: str) -> str:
        """One self-contained HTML file (no network): every mode's report and the joined view."""
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
    killed. A mode whose step raises (torch_xla's bridge, Dynamo, AOTAutograd, XLA), whose worker
    dies or times out, is a finding, not an error: its :attr:`ModeResult.failure` names what
    failed, where in the model and whose code raised it, the other modes keep their figures, and
    :meth:`Comparison.to_markdown` says what to try. Bad input still raises
    :class:`GraphBreakError`. ``torch_trace=DIR`` runs the dynamo worker with
    ``TORCH_TRACE=DIR``: its trace carries the ledger's artifacts for tlparse
    (:mod:`~torch_xla_ext.graph_breaks.tlparse`).

    Example:
        >>> cmp = compare("torch_xla_ext.graph_breaks:example", warmup=1, steps=1)   # a process per mode
        >>> [row for row in cmp.to_markdown().splitlines() if row.startswith("| graph breaks (logged)")][0]
        '| graph breaks (logged) | 0 | 2 |'
        >>> cmp.plot("breaks.png"), cmp.write_html("breaks.html")
        ('breaks.png', 'breaks.html')
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

    stderr = proc.stderr  # stderr=PIPE: a stream, whatever -O strips

    def read() -> None:
        for line in stderr or ():
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
        return _died(mode, "timeout", f"timed out after {timeout_s:g} s and was killed", None, err_lines)
    reader.join()
    if rc == EXIT_BAD_INPUT and bad_input:
        raise GraphBreakError(bad_input[-1])
    if rc != 0 or not os.path.exists(out_path):
        if rc < 0:
            try:
                how = f"was killed by signal {signal.Signals(-rc).name}"
            except ValueError:
                how = f"was killed by signal {-rc}"
        else:
            how = f"exited with code {rc}" + ("" if rc else " without writing its result")
        return _died(mode, "worker died", how, rc, err_lines)
    with open(out_path) as f:
        return json.load(f)


def _died(mode: str, kind: str, how: str, rc: int | None, err_lines: list[str]) -> dict[str, Any]:
    """The result of a worker that left no result: its failure, and empty reports."""
    tail = [ln.rstrip("\n") for ln in err_lines if ln.strip()][-20:]
    last = next((ln.strip() for ln in reversed(tail) if not ln.startswith((" ", "\t"))), "")
    empty = GraphBreakReport().to_dict()
    failure = {"mode": mode, "kind": kind, "exception": f"the worker process {how}" + (f": {last}" if last else ""),
               "raised_by": "the worker process (native code: torch_xla, XLA or PyTorch)" if kind == "worker died"
               else "the worker process (no answer within the timeout)",
               "exit_code": rc, "stderr_tail": tail, "node": None, "aten_op": None, "source": None, "known": None}
    return {"mode": mode, "step_ms": [], "report": empty, "steady": empty, "failure": failure}


def _mode_result(d: dict[str, Any], isolation: str) -> ModeResult:
    return ModeResult(d["mode"], GraphBreakReport.from_dict(d["report"]), GraphBreakReport.from_dict(d["steady"]),
                      list(d["step_ms"]), isolation, bool(d.get("train", False)), d.get("failure"))


def failure_markdown(f: dict[str, Any], cmp: Comparison | None = None) -> str:
    """One mode's failure as a Markdown block: what, where in the model, whose code, what to try."""
    out = [f"#### Finding: {f['mode']} mode failed ({f.get('step') or 'step'}, {f.get('where') or f['kind']})", "",
           f"- exception: `{f['exception']}`", f"- raised by: {f['raised_by']}"]
    node = f.get("node")
    if node:
        out.append(f"- FX node: `{node['name']}` ({node['op']} `{node['target']}`)")
    if f.get("aten_op"):
        other = f.get("raised_in_op")
        extra = f" (raised in `{other}`)" if other and other != f["aten_op"] else ""
        out.append(f"- aten op: `{f['aten_op']}`{extra}")
    src = f.get("source")
    if src:
        out.append(f"- model source: `{src['file']}:{src['line']}` in `{src['function']}`"
                   + (f": `{src['code']}`" if src.get("code") else ""))
    if f.get("known"):
        out.append(f"- known failure: {f['known']['cause']}")
    if f.get("stderr_tail"):
        out += ["- last lines of its stderr:", "", "```", *f["stderr_tail"][-10:], "```"]
    tries = cmp.try_instead(f) if cmp is not None else ([f["known"]["workaround"]] if f.get("known") else [])
    if tries:
        out += ["", "What to try:", ""] + [f"{i}. {t}" for i, t in enumerate(tries, 1)]
    return "\n".join(out)
