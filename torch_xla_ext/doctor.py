"""`torch-xla-ext doctor`: one report over the four components on one model.

The embedded example is a small pre-norm transformer block that touches every problem this
project exists for: it all-reduces through :func:`torch_xla_ext.collectives.all_reduce` (with a
scale), calls a JAX function with an unused argument through :func:`torch_xla_ext.jax_call.call_jax`,
has a Dynamo graph break (a ``print``) and a CPU-fallback op (``digamma``), and runs in fp32 and
bf16. The report directory holds ``report.md``, ``report.json``, the PNG plots and the exported
bundle.

Example:
    >>> from torch_xla_ext import doctor
    >>> model, (x,) = doctor.example()                   # the embedded block and its input
    >>> type(model).__name__, tuple(x.shape)
    ('DoctorBlock', (2, 8, 32))
    >>> report = doctor.run("doctor-report")  # minutes on 2 cores; tests/doctor and docs/doctor.md run it  # doctest: +SKIP
    >>> print(report.summary())               # the run above is skipped here  # doctest: +SKIP
    torch-xla-ext doctor: embedded example (DoctorBlock: attention + MLP, call_jax gate, print, digamma, all_reduce)
      ok  parity        fp32 PASS (reassociation), bf16 FAIL (rounding placement); ...
"""

from __future__ import annotations

from torch_xla_ext import _versions

_versions.require("doctor")  # before anything here imports torch

import dataclasses
import math
import os
import sys
import time
import traceback
from typing import Any, Callable

import torch
import torch.nn.functional as F

from torch_xla_ext import collectives
from torch_xla_ext import _device, _factory, _json, _plot
from torch_xla_ext.errors import InternalError, TorchXlaExtError, first_line

if _versions.available("graph_breaks") and _versions.available("graph_breaks.openxla"):
    from torch_xla_ext.graph_breaks import DISCARD  # where the block's print goes (a break whatever its file)
else:  # graph_breaks cannot run here (its section says why); the block's print still needs a sink
    DISCARD = open(os.devnull, "w")  # noqa: SIM115 - the process's, like sys.stdout

__all__ = ["DoctorBlock", "DoctorReport", "SectionFailed", "example", "export_section", "graph_breaks_section",
           "jax_call_section", "json_safe", "parity_section", "run"]

WIDTH = 32
SCALE = 0.5  # the all-reduce's scale, e.g. averaging over two micro-batches


class DoctorError(TorchXlaExtError, ValueError):
    """A --model factory that cannot be used (bad spec, or a bad return value)."""


def _gate(h, x, unused):
    """The JAX part of the block: a sigmoid gate. ``unused`` is never read, so call_jax keeps two
    of its three tensor arguments."""
    import jax

    return h * jax.nn.sigmoid(x)


class DoctorBlock(torch.nn.Module):
    """Pre-norm attention + MLP block; each problematic part can be switched off.

    On XLA the gate runs as JAX through call_jax and the block ends in an all-reduce through our
    wrapper; on the CPU (the reference) the same math runs in torch, and at world size 1 the
    all-reduce is the identity times ``SCALE``.
    """

    def __init__(self, width: int = WIDTH, *, use_jax: bool | None = None, graph_break: bool = True,
                 fallback: bool = True, all_reduce: bool = True):
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.proj = torch.nn.Linear(width, width)
        self.up = torch.nn.Linear(width, 2 * width)
        self.down = torch.nn.Linear(2 * width, width)
        self.register_buffer("unused", torch.ones(width))  # the argument JAX ignores
        if use_jax is None:  # the JAX gate wherever this stack runs call_jax (not on CPython 3.10: no jax 0.7.1)
            use_jax = _versions.available("jax_call")
        self.use_jax, self.graph_break, self.fallback, self.all_reduce = use_jax, graph_break, fallback, all_reduce

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        q, k, v = self.qkv(h).chunk(3, dim=-1)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1) @ v
        x = x + self.proj(att)
        if self.graph_break:
            print("doctor: attention done", file=DISCARD)
        h = self.down(F.gelu(self.up(x)))
        if self.use_jax:
            if x.device.type == "xla":
                from torch_xla_ext import jax_call

                h = jax_call.call_jax(_gate, (h, x, self.unused))
            else:
                h = h * torch.sigmoid(x)
        if self.fallback:
            h = h + 0.01 * torch.digamma(h.abs() + 1)  # no XLA lowering: a CPU fallback
        out = x + h
        if self.all_reduce:
            if out.device.type == "xla" or torch.compiler.is_compiling():
                # XLA:CPU has no bf16 all-reduce, so reduce in fp32 (exact at world size 1).
                out = collectives.all_reduce("sum", out.float(), scale=SCALE).to(out.dtype)
            else:
                out = out * SCALE
        return out


def example_model() -> DoctorBlock:
    """The embedded block with every part on (seeded weights)."""
    torch.manual_seed(0)
    return DoctorBlock()


def example_inputs() -> tuple[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return (torch.randn(2, 8, WIDTH, generator=g),)


def example() -> tuple[DoctorBlock, tuple[torch.Tensor]]:
    """(model, inputs) of the embedded example: the shape a ``--model`` factory returns."""
    return example_model(), example_inputs()


# ---- a --model factory ----------------------------------------------------------------------


def _made(spec: str) -> _factory.Made:
    """The --model factory's ``(model, args, kwargs)`` (the one contract of ``_factory``), with every
    tensor moved to the CPU (the doctor moves them to each device itself). Every section uses the
    module, args and kwargs; tensors may sit in tuples, lists and dicts, next to constants."""
    made = _factory.load_model(spec)

    def cpu(v: Any, where: str) -> Any:
        if isinstance(v, torch.Tensor):
            return v.cpu()
        if isinstance(v, (bool, int, float, str)) or v is None:
            return v
        if isinstance(v, (tuple, list)):
            return type(v)(cpu(x, f"{where}[{i}]") for i, x in enumerate(v))
        if isinstance(v, dict):
            return {k: cpu(x, f"{where}[{k!r}]") for k, x in v.items()}
        raise _factory.FactorySpecError(
            f"--model: {spec}() {where} is a {type(v).__name__}, not a torch.Tensor or a constant")

    return _factory.Made(made.model, tuple(cpu(t, f"args[{i}]") for i, t in enumerate(made.args)),
                         {k: cpu(v, f"kwargs[{k!r}]") for k, v in made.kwargs.items()})


class SectionFailed(Exception):
    """Raised by a section whose check failed on the model (a parity exception, an export beyond
    tolerance, a graph-break mode whose backend failed): the summary, markdown and data are
    written as they are, with the section marked as a finding. The report is complete, so the
    command still exits 0."""

    def __init__(self, summary: str, markdown: str, data: dict[str, Any]):
        super().__init__(summary)
        self.summary, self.markdown, self.data = summary, markdown, data


# ---- the report -----------------------------------------------------------------------------


# A section's status: "ok"; "finding" (it produced its report, and the report says something about
# the model failed: a finding, not an error); "error" (it could not produce its report: a bug of
# torch_xla_ext or of a library, with the traceback; the command exits 1).
STATUSES = ("ok", "finding", "error")
# Exit codes of `torch-xla-ext doctor`: the report was written (findings included); bad input
# (the --model spec or a flag, named in the message); a section could not produce its report.
EXIT_REPORT_WRITTEN, EXIT_BUG, EXIT_BAD_INPUT = 0, 1, 2


@dataclasses.dataclass
class Section:
    name: str
    status: str
    summary: str
    markdown: str
    data: dict[str, Any]
    seconds: float

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclasses.dataclass
class DoctorReport:
    model: str
    out_dir: str
    sections: list[Section]
    files: list[str]
    plots_skipped: list[str] = dataclasses.field(default_factory=list)  # without matplotlib

    @property
    def ok(self) -> bool:
        """Every section ran and found nothing wrong."""
        return all(s.ok for s in self.sections)

    @property
    def exit_code(self) -> int:
        """0 when every section produced its report (findings included), 1 when one could not
        (a bug: its traceback is in the report)."""
        return EXIT_BUG if any(s.status == "error" for s in self.sections) else EXIT_REPORT_WRITTEN

    def summary(self) -> str:
        lines = [f"torch-xla-ext doctor: {self.model}"]
        mark = {"ok": "ok ", "finding": "FND", "error": "ERR"}
        lines += [f"  {mark[s.status]} {s.name:13s} {s.summary}" for s in self.sections]
        lines += [f"  note: {m}" for m in self.plots_skipped]
        lines.append(f"  report: {os.path.join(self.out_dir, 'report.md')}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "device": _device.current(), "ok": self.ok, "exit_code": self.exit_code,
                "files": self.files, "plots_skipped": self.plots_skipped,
                "sections": {s.name: {"ok": s.ok, "status": s.status, "summary": s.summary,
                                      "seconds": round(s.seconds, 3), **s.data}
                             for s in self.sections}}

    def to_json(self, **kwargs: Any) -> str:
        return _json.dumps(self.to_dict(), **kwargs)

    def to_markdown(self) -> str:
        out = [f"# torch-xla-ext doctor: {self.model}", "", f"Ran on XLA:{_device.current()}.", "",
               "| section | status | finding |", "|---|---|---|"]
        out += [f"| {s.name} | {s.status} | {s.summary} |" for s in self.sections]
        if any(s.status == "finding" for s in self.sections):
            out += ["", "A *finding* is about the model on this stack (a mode or a check that failed on it); "
                    "the section still produced its report. An *error* is a bug of torch_xla_ext or a library."]
        if self.plots_skipped:
            out += ["", "Plots skipped (every number above is still computed):", ""]
            out += [f"- {m}" for m in self.plots_skipped]
        for s in self.sections:
            out += ["", f"## {s.name}", "", s.markdown.rstrip()]
        return "\n".join(out) + "\n"


def json_safe(obj: Any) -> Any:
    """``obj`` as strict JSON values under the package's one JSON rule (torch_xla_ext/_json.py);
    anything JSON has no type for is its ``str``."""
    return _json.encode(obj, default=str)


# ---- sections -------------------------------------------------------------------------------


def parity_section(model_fn, inputs, kwargs, out_dir) -> tuple[str, str, dict]:
    from torch_xla_ext import parity

    reports = {}
    for dt in ("fp32", "bf16"):
        model = model_fn()
        # bf16 also localises: which module's own error is beyond rounding, if any.
        localize = dt == "bf16" and isinstance(model, torch.nn.Module)
        # bf16 also writes its program and per-op error for Model Explorer (parity/explorer.py).
        explorer_dir = os.path.join(out_dir, "explorer") if dt == "bf16" else None
        # rules="auto": the device's own matmul precision (a GPU's TF32, a TPU's bf16 passes; XLA:CPU's on a CPU).
        reports[dt] = parity.verify(model, inputs, kwargs, dtype=dt, localize=localize, explorer_dir=explorer_dir,
                                    rules="auto")
    md, data = [], {}
    for dt, r in reports.items():
        md += [f"### {dt}: {r.verdict.value}", "", "```", str(r), "```", ""]
        data[dt] = r.to_dict()
    if _plot_ulps(reports, os.path.join(out_dir, "numerics_ulp.png")):
        md.append("![ULP distances of XLA vs CPU eager](numerics_ulp.png)")
    bf = reports["bf16"]
    if bf.modules and parity.plot_modules(bf, os.path.join(out_dir, "parity_modules.png")):
        md += ["", "![bf16 per-module errors by depth](parity_modules.png)"]
    if os.path.isfile(os.path.join(out_dir, "explorer", "program.mlir")):
        from torch_xla_ext.parity import explorer

        md += ["", "bf16 per-op error in Model Explorer (`pip install ai-edge-model-explorer`):", "",
               f"    {explorer.open_command(os.path.join(out_dir, 'explorer'))}"]

    def words(r) -> str:
        causes = sorted({o.cause for o in r.outputs if o.cause})
        return r.verdict.value + (f" ({', '.join(causes)})" if causes else "")

    summary = ", ".join(f"{dt} {words(r)}" for dt, r in reports.items())
    if bf.outputs:
        summary += f"; bf16 replay {bf.emulation.split(':')[0]}"
    if bf.modules:
        summary += f"; first divergent module: {bf.first_divergent_module or 'none'}"
    failed = [dt for dt, r in reports.items() if r.verdict == parity.Verdict.EXCEPTION]
    if failed:  # the model did not run: an error row, with the exception in the report
        raise SectionFailed(summary, "\n".join(md), data)
    return summary, "\n".join(md), data


def _plot_ulps(reports, path: str) -> str | None:
    """The ULP histogram PNG per dtype; None (nothing written) without matplotlib."""
    plt, _why = _plot.pyplot(os.path.basename(path))
    if plt is None:
        return None
    fig, axes = plt.subplots(1, len(reports), figsize=(5 * len(reports), 3.2))
    for ax, (dt, r) in zip(axes, reports.items()):
        if not r.outputs:
            ax.set_title(f"{dt}: {r.verdict.value} (no outputs)")
            ax.axis("off")
            continue
        # The output with the most mismatches (the first when none mismatch).
        o = max(r.outputs, key=lambda o: o.xla_vs_cpu.mismatched)
        hist = o.xla_vs_cpu.ulp_histogram
        labels = [k for k, v in hist.items() if v] or ["0"]
        ax.bar(labels, [hist.get(k, 0) for k in labels], color="#4c72b0")
        ax.set_yscale("log")
        ax.tick_params(axis="x", labelrotation=40)
        ax.set_title(f"{dt}: {o.path or 'output'} vs CPU eager, {r.verdict.value}", fontsize=9)
        ax.set_xlabel(f"ULP distance (in {o.xla_vs_cpu.ulp_dtype})")
        ax.set_ylabel("elements")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def export_section(model, inputs, kwargs, out_dir) -> tuple[str, str, dict]:
    import numpy as np

    # each section imports its components: one this stack refuses is that section's finding
    from torch_xla_ext import export, numerics
    from torch_xla_ext._compat import pytree
    from torch_xla_ext._compat import stablehlo as _shlo

    bundle = export.export(model, inputs, kwargs)
    bundle_dir = os.path.join(out_dir, "bundle")
    bundle.save(bundle_dir)
    m = bundle.manifest
    kinds: dict[str, int] = {}
    for i in m.inputs:
        kinds[i.kind] = kinds.get(i.kind, 0) + 1
    tokens = [c.token_input for c in m.collectives if c.token_input is not None]
    head = (f"{len(m.inputs)} arguments ({', '.join(f'{v} {k}' for k, v in kinds.items())}), "
            f"{len(m.collectives)} collective(s), {len(m.outputs)} output(s)")
    md = ["Exported with `torch_xla_ext.export.export`, saved to `bundle/`, loaded back and run on",
          "PJRT CPU devices (`export.run`, no torch) against torch_xla's execution of the same export,",
          "and against eager CPU PyTorch (a different compiler, so close rather than bit-equal).",
          "JAX's XLA and torch_xla's are two builds whose Eigen contraction kernels sum large dots",
          "and convolutions in different orders: the comparison reports ULPs and passes within",
          "float32 tolerance (docs/export.md, \"Bit-equality\").", "",
          "```", m.table(), "```", "",
          f"Collective tokens (recognised from the program's structure): arguments {tokens}."]
    data: dict[str, Any] = {"bundle_dir": "bundle", "manifest": m.to_dict()}
    try:
        loaded = export.load(bundle_dir)
        leaves = pytree.tree_leaves((tuple(inputs), dict(kwargs)))
        ran = export.run(loaded, *[t.numpy() if isinstance(t, torch.Tensor) else t for t in leaves])
        theirs = _shlo.run_with_torch_xla(bundle.torch_xla_export.graph_module, *leaves)
        with torch.no_grad():
            eager = [t for t in pytree.tree_leaves(model(*inputs, **kwargs)) if isinstance(t, torch.Tensor)]
        stripped = export.strip_tokens(loaded)
    except Exception as e:  # the bundle exists: keep the manifest and its path in the report
        summary = f"{head}; {first_line(e, with_type=True)}"
        raise SectionFailed(summary, "\n".join(md + ["", "```", traceback.format_exc(), "```"]),
                            {**data, "error": summary}) from e
    rows, failed = [], []
    for k, (r, t) in enumerate(zip(ran, theirs)):
        name = m.outputs[k].get("name") or f"output {k}"
        e = eager[k] if k < len(eager) else None
        if r.dtype.kind in "fc" and r.dtype == t.dtype:
            # complex: compared as its (real, imaginary) float pairs
            r2, t2 = (np.ascontiguousarray(a).view(a.real.dtype) if a.dtype.kind == "c" else a for a in (r, t))
            exact = numerics.compare(r2, t2, rtol=0, atol=0)
            close = numerics.compare(r2, t2)
            row = {"name": name, "vs_torch_xla": exact.to_dict(), "within_tolerance": bool(close.passed)}
            if not close.passed:
                failed.append(f"{name}: {exact.mismatched}/{exact.total} differ, max {exact.max_ulp} ulp")
        else:  # integers and bools: equal or not
            same = r.shape == t.shape and r.dtype == t.dtype
            differ = int(np.count_nonzero(r != t)) if same else r.size
            row = {"name": name, "within_tolerance": differ == 0,
                   "vs_torch_xla": {"total": int(r.size), "mismatched": differ, "max_ulp": 0 if differ == 0 else None}}
            if differ:
                failed.append(f"{name}: {differ}/{r.size} {r.dtype} values differ")
        if e is not None and e.is_floating_point() and np.asarray(r).dtype.kind == "f":
            row["vs_eager_cpu"] = numerics.compare(np.asarray(r), e.numpy(), check_dtype=False).to_dict()
        rows.append(row)
    if len(ran) != len(theirs):
        failed.append(f"{len(ran)} outputs, torch_xla's execution has {len(theirs)}")
    exact_rows = [r["vs_torch_xla"] for r in rows]
    if all(x["mismatched"] == 0 for x in exact_rows):
        verdict = "bit-equal"
    else:
        ulps = [x["max_ulp"] for x in exact_rows if x["max_ulp"] is not None]
        verdict = (f"max {max(ulps, default=0)} ulp, {sum(x['mismatched'] for x in exact_rows)}/"
                   f"{sum(x['total'] for x in exact_rows)} elements differ")
    summary = f"{head}; JAX run vs torch_xla: {verdict}"
    md += [f"`strip_tokens` gives a `main` with {len(stripped.manifest.inputs)} arguments instead of {len(m.inputs)}.",
           "", "| output | vs torch_xla: mismatched | max ULP | vs eager CPU: mismatched | max ULP |",
           "|---|---|---|---|---|"]
    for r in rows:
        x, e = r["vs_torch_xla"], r.get("vs_eager_cpu", {})
        md.append(f"| `{r['name']}` | {x['mismatched']}/{x['total']} | {x['max_ulp']} "
                  f"| {e.get('mismatched', '-')}/{e.get('total', '-')} | {e.get('max_ulp', '-')} |")
    data.update({"outputs": [{"name": r["name"], "within_tolerance": r["within_tolerance"]} for r in rows],
                 "run_vs_torch_xla": exact_rows, "run_vs_eager_cpu": [r.get("vs_eager_cpu") for r in rows],
                 "verdict": verdict, "stripped_inputs": len(stripped.manifest.inputs)})
    if failed:
        raise SectionFailed(f"{head}; JAX run vs torch_xla beyond float32 tolerance: {'; '.join(failed)}",
                            "\n".join(md), data)
    return summary, "\n".join(md), data


def jax_call_section(model, inputs) -> tuple[str, str, dict]:
    import torch_xla

    from torch_xla_ext import jax_call  # refused with what this stack lacks: a finding

    dev = torch_xla.device()
    x = inputs[0].to(dev)
    mapping = jax_call.explain(_gate, (x, x, model.unused.to(dev)))
    kept = [r.path for r in mapping.rows if r.kept]
    dropped = [r.path for r in mapping.rows if r.kind == "tensor" and not r.kept]
    summary = f"{len(mapping.rows)} leaves -> {mapping.num_hlo_params} HLO parameters; unused: {', '.join(dropped) or 'none'}"
    md = ["The block's JAX gate `_gate(h, x, unused)` as `jax_call.call_jax` lowers it", "",
          "```", str(mapping), "```"]
    data = {"num_hlo_params": mapping.num_hlo_params, "kept": kept, "dropped": dropped,
            "rows": [dataclasses.asdict(r) for r in mapping.rows], "cache": jax_call.cache_info()._asdict()}
    return summary, "\n".join(md), data


def graph_breaks_section(model_spec, out_dir, progress, steps) -> tuple[str, str, dict]:
    from torch_xla_ext import graph_breaks

    cmp = graph_breaks.compare(model_spec, modes=("lazy", "dynamo"), warmup=2, steps=steps, progress=progress)
    plotted = cmp.plot(os.path.join(out_dir, "graph_breaks.png"))
    cmp.write_html(os.path.join(out_dir, "graph_breaks.html"))
    graph_breaks.write_trace(os.path.join(out_dir, "graph_breaks.trace.json"),
                             [cmp.modes[m].report for m in cmp.modes], labels=list(cmp.modes))
    lazy, dyn = cmp.modes["lazy"], cmp.modes["dynamo"]
    parts = []
    if dyn.ok:
        parts.append(f"dynamo: {dyn.report.fx_graphs} graphs, {dyn.report.num_fx_breaks} breaks, "
                     f"{dyn.report.xla_partitions} XLA partitions")
    for m, f in cmp.failures.items():
        where = f" at {f['aten_op']}" if f.get("aten_op") else ""
        src = f.get("source")
        where += f" ({os.path.basename(src['file'])}:{src['line']})" if src else ""
        parts.append(f"{m} failed{where}: {f['exception']} [raised by {f['raised_by'].split(' (')[0]}]")
    parts.append("; ".join(f"{m.median_ms:.1f} ms/step {m.mode}" for m in (lazy, dyn) if m.ok) or "no mode ran")
    summary = "; ".join(parts)
    md = (cmp.to_markdown() + ("\n\n![graph breaks, lazy vs dynamo](graph_breaks.png)" if plotted else "") + "\n\n"
          "Full report (structured breaks, per compile id view, timeline): [graph_breaks.html](graph_breaks.html); "
          "Perfetto/Chrome trace: `graph_breaks.trace.json`")
    if cmp.failures:  # a mode that failed is a finding about the model; the other mode's figures stay
        raise SectionFailed(summary, md, cmp.to_dict(timeline=False))
    return summary, md, cmp.to_dict(timeline=False)


# ---- run ------------------------------------------------------------------------------------


def run(out_dir: str = "doctor-report", *, model: str | None = None, steps: int = 5,
        progress: Callable[[str], None] | None = None) -> DoctorReport:
    """Runs every section on the embedded example (or a ``module:factory`` returning
    ``(nn.Module, args)`` or ``(nn.Module, args, kwargs)``) and writes report.md, report.json, PNGs and bundle/ under ``out_dir``.
    A section whose check fails on the model is a *finding* (its report is kept, e.g. a graph-break
    mode whose backend failed, named by node, op, source line and whose code raised); a section
    that cannot produce its report is an *error*; the others still run either way.
    ``report.exit_code`` is what the command returns (0 report written, 1 a section's error)."""
    progress = progress or (lambda s: None)
    os.makedirs(out_dir, exist_ok=True)
    if model is None:
        name = "embedded example (DoctorBlock: attention + MLP, call_jax gate, print, digamma, all_reduce)"
        if not _versions.available("jax_call"):
            name = name.replace("call_jax gate, ", "") + "; the call_jax gate left out: jax_call cannot run here"
        model_fn, inputs, kwargs = example_model, example_inputs(), {}
        export_fn = lambda: _export_variant(example_model())  # noqa: E731
        gb_spec = "torch_xla_ext.doctor:example"
        jax_model: Any = example_model()
    else:
        _made(model)  # fail early, naming the spec
        name = model
        model_fn, (_, inputs, kwargs) = (lambda: _made(model).model), _made(model)
        export_fn = model_fn
        gb_spec = model  # graph-break workers (fresh processes) call the factory themselves
        jax_model = None

    plan: list[tuple[str, Callable[[], tuple[str, str, dict]]]] = [
        ("parity", lambda: parity_section(model_fn, inputs, kwargs, out_dir)),
        ("export", lambda: export_section(export_fn(), inputs, kwargs, out_dir)),
    ]
    if jax_model is not None:
        plan.append(("call_jax", lambda: jax_call_section(jax_model, inputs)))
    plan.append(("graph_breaks", lambda: graph_breaks_section(gb_spec, out_dir, progress, steps)))

    sections = []
    plots_skipped: list[str] = []
    _plot.take_skipped()  # only what this run skips
    for i, (sec, fn) in enumerate(plan, 1):
        progress(f"[{i}/{len(plan)}] {sec} ...")
        t0 = time.perf_counter()
        try:
            summary, md, data = fn()
            status = "ok"
        except SectionFailed as f:  # the check failed on the model; its figures stay in the report
            summary, md, data, status = f.summary, f.markdown, f.data, "finding"
        except Exception as e:
            # The others still run. A typed error of ours (not an InternalError) is the component
            # naming what in this model it cannot handle: a finding. Anything else is a bug of
            # ours or of a library: an error, with its traceback, and the command exits 1.
            finding = isinstance(e, TorchXlaExtError) and not isinstance(e, InternalError)
            summary = first_line(e, with_type=True)
            if not finding:
                summary = f"unexpected {summary}"
            md = "```\n" + traceback.format_exc() + "```"
            data = {"error": summary, "error_type": f"{type(e).__module__}.{type(e).__qualname__}",
                    "code": getattr(e, "code", None)}
            status = "finding" if finding else "error"
        dt = time.perf_counter() - t0
        skipped = _plot.take_skipped()
        if skipped:
            md = md.rstrip() + "\n\n" + "\n".join(f"> {m}" for m in skipped)
            data = {**data, "plots_skipped": skipped}
            plots_skipped += skipped
            for m in skipped:
                progress(f"[{i}/{len(plan)}] {sec}: {m}")
        progress(f"[{i}/{len(plan)}] {sec}: {summary} ({dt:.1f} s)")
        sections.append(Section(sec, status, summary, md, json_safe(data), dt))

    files = sorted(os.path.relpath(os.path.join(d, f), out_dir) for d, _, fs in os.walk(out_dir) for f in fs)
    files = sorted(set(files) | {"report.md", "report.json"})
    report = DoctorReport(name, out_dir, sections, files, plots_skipped)
    with open(os.path.join(out_dir, "report.md"), "w") as f:
        f.write(report.to_markdown())
    with open(os.path.join(out_dir, "report.json"), "w") as f:
        f.write(report.to_json(indent=2))
    return report


def _export_variant(block: DoctorBlock) -> DoctorBlock:
    """The exported part of the embedded block: neither call_jax (a torch_xla user computation)
    nor digamma (no XLA lowering) has a StableHLO form, so export leaves them out."""
    block.use_jax = False
    block.fallback = False
    return block
