"""`torch-xla-ext doctor`: one report over the four components on one model.

The embedded example is a small pre-norm transformer block that touches every problem this
project exists for: it all-reduces through :func:`torch_xla_ext.collectives.all_reduce` (with a
scale), calls a JAX function with an unused argument through :func:`torch_xla_ext.jax_call.call_jax`,
has a Dynamo graph break (a ``print``) and a CPU-fallback op (``digamma``), and runs in fp32 and
bf16. The report directory holds ``report.md``, ``report.json``, the PNG plots and the exported
bundle.

Example:
    >>> from torch_xla_ext import doctor
    >>> report = doctor.run("doctor-report")            # doctest: +SKIP
    >>> print(report.summary())                          # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time
import traceback
from typing import Any, Callable

import torch
import torch.nn.functional as F

from torch_xla_ext import collectives, jax_call
from torch_xla_ext import _factory
from torch_xla_ext.errors import TorchXlaExtError
from torch_xla_ext.graph_breaks import _SINK  # where the block's print goes (a break whatever its file)

__all__ = ["DoctorBlock", "DoctorReport", "example", "run"]

WIDTH = 32
SCALE = 0.5  # the all-reduce's scale, e.g. averaging over two micro-batches
MODEL_ENV = "TORCH_XLA_EXT_DOCTOR_MODEL"  # how graph-break workers find a --model factory


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

    def __init__(self, width: int = WIDTH, *, use_jax: bool = True, graph_break: bool = True,
                 fallback: bool = True, all_reduce: bool = True):
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.proj = torch.nn.Linear(width, width)
        self.up = torch.nn.Linear(width, 2 * width)
        self.down = torch.nn.Linear(2 * width, width)
        self.register_buffer("unused", torch.ones(width))  # the argument JAX ignores
        self.use_jax, self.graph_break, self.fallback, self.all_reduce = use_jax, graph_break, fallback, all_reduce

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        q, k, v = self.qkv(h).chunk(3, dim=-1)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1) @ v
        x = x + self.proj(att)
        if self.graph_break:
            print("doctor: attention done", file=_SINK)
        h = self.down(F.gelu(self.up(x)))
        if self.use_jax:
            if x.device.type == "xla":
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
    tensor moved to the CPU (the doctor moves them to each device itself)."""
    made = _factory.load_model(spec, error=DoctorError)

    def cpu(v: Any, where: str) -> Any:
        if isinstance(v, torch.Tensor):
            return v.cpu()
        if isinstance(v, (bool, int, float, str)) or v is None:
            return v
        if isinstance(v, (tuple, list)):
            return type(v)(cpu(x, f"{where}[{i}]") for i, x in enumerate(v))
        raise DoctorError(f"--model: {spec}() {where} is a {type(v).__name__}, not a torch.Tensor or a constant")

    return _factory.Made(made.model, tuple(cpu(t, f"args[{i}]") for i, t in enumerate(made.args)),
                         {k: cpu(v, f"kwargs[{k!r}]") for k, v in made.kwargs.items()})


def user_model() -> torch.nn.Module:
    """Graph-break workers (fresh processes) rebuild a --model through this and MODEL_ENV."""
    return _made(os.environ[MODEL_ENV]).model


def user_inputs() -> tuple:
    return _made(os.environ[MODEL_ENV]).args


class SectionFailed(Exception):
    """Raised by a section whose check failed but whose findings must stay in the report: the
    summary, markdown and data are written as they are, with the section marked as an error."""

    def __init__(self, summary: str, markdown: str, data: dict[str, Any]):
        super().__init__(summary)
        self.summary, self.markdown, self.data = summary, markdown, data


# ---- the report -----------------------------------------------------------------------------


@dataclasses.dataclass
class Section:
    name: str
    ok: bool
    summary: str
    markdown: str
    data: dict[str, Any]
    seconds: float


@dataclasses.dataclass
class DoctorReport:
    model: str
    out_dir: str
    sections: list[Section]
    files: list[str]

    @property
    def ok(self) -> bool:
        return all(s.ok for s in self.sections)

    def summary(self) -> str:
        lines = [f"torch-xla-ext doctor: {self.model}"]
        lines += [f"  {'ok ' if s.ok else 'ERR'} {s.name:13s} {s.summary}" for s in self.sections]
        lines.append(f"  report: {os.path.join(self.out_dir, 'report.md')}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "ok": self.ok, "files": self.files,
                "sections": {s.name: {"ok": s.ok, "summary": s.summary, "seconds": round(s.seconds, 3), **s.data}
                             for s in self.sections}}

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    def to_markdown(self) -> str:
        out = [f"# torch-xla-ext doctor: {self.model}", "", "| section | status | finding |", "|---|---|---|"]
        out += [f"| {s.name} | {'ok' if s.ok else 'error'} | {s.summary} |" for s in self.sections]
        for s in self.sections:
            out += ["", f"## {s.name}", "", s.markdown.rstrip()]
        return "\n".join(out) + "\n"


def _json_safe(obj: Any) -> Any:
    return json.loads(json.dumps(obj, default=str, allow_nan=True).replace("NaN", '"nan"').replace("Infinity", '"inf"'))


# ---- sections -------------------------------------------------------------------------------


def _parity_section(model_fn, inputs, kwargs, out_dir) -> tuple[str, str, dict]:
    from torch_xla_ext import parity

    extra = {"kwargs": kwargs} if kwargs else {}
    reports = {dt: parity.verify(model_fn(), inputs, dtype=dt, **extra) for dt in ("fp32", "bf16")}
    md, data = [], {}
    for dt, r in reports.items():
        md += [f"### {dt}: {r.verdict.value}", "", "```", str(r), "```", ""]
        data[dt] = r.to_dict()
    _plot_ulps(reports, os.path.join(out_dir, "numerics_ulp.png"))
    md.append("![ULP distances of XLA vs CPU eager](numerics_ulp.png)")
    summary = ", ".join(f"{dt} {r.verdict.value}" for dt, r in reports.items())
    bf = reports["bf16"]
    if bf.outputs:
        o = bf.outputs[0]
        summary += (f"; bf16 XLA vs CPU {o.xla_vs_cpu.mismatched}/{o.xla_vs_cpu.total} mismatched, "
                    f"emulation {bf.emulation.split(':')[0]}")
    return summary, "\n".join(md), data


def _plot_ulps(reports, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(reports), figsize=(5 * len(reports), 3.2))
    for ax, (dt, r) in zip(axes, reports.items()):
        if not r.outputs:
            ax.set_title(f"{dt}: {r.verdict.value} (no outputs)")
            continue
        hist = r.outputs[0].xla_vs_cpu.ulp_histogram
        labels = [k for k, v in hist.items() if v] or ["0"]
        ax.bar(labels, [hist.get(k, 0) for k in labels], color="#4c72b0")
        ax.set_yscale("log")
        ax.tick_params(axis="x", labelrotation=40)
        ax.set_title(f"{dt}: XLA vs CPU eager, {r.verdict.value}")
        ax.set_xlabel(f"ULP distance (in {r.outputs[0].xla_vs_cpu.ulp_dtype})")
        ax.set_ylabel("elements")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _export_section(model, inputs, kwargs, out_dir) -> tuple[str, str, dict]:
    import numpy as np
    import torch.utils._pytree as pytree

    from torch_xla_ext import export, numerics
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
        summary = f"{head}; {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
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


def _jax_call_section(model, inputs) -> tuple[str, str, dict]:
    import torch_xla

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


def _graph_breaks_section(factory_spec, inputs_spec, out_dir, progress, steps) -> tuple[str, str, dict]:
    from torch_xla_ext import graph_breaks

    cmp = graph_breaks.compare(factory_spec, inputs_spec, modes=("lazy", "dynamo"), warmup=2, steps=steps,
                               progress=progress)
    cmp.plot(os.path.join(out_dir, "graph_breaks.png"))
    lazy, dyn = cmp.modes["lazy"], cmp.modes["dynamo"]
    summary = (f"dynamo: {dyn.report.fx_graphs} FX graphs, {dyn.report.num_fx_breaks} breaks, "
               f"{dyn.report.xla_partitions} XLA partitions; {lazy.median_ms:.1f} ms/step lazy vs "
               f"{dyn.median_ms:.1f} dynamo")
    md = cmp.to_markdown() + "\n\n![graph breaks, lazy vs dynamo](graph_breaks.png)"
    return summary, md, cmp.to_dict()


# ---- run ------------------------------------------------------------------------------------


def run(out_dir: str = "doctor-report", *, model: str | None = None, steps: int = 5,
        progress: Callable[[str], None] | None = None) -> DoctorReport:
    """Runs every section on the embedded example (or a ``module:factory`` returning
    ``(nn.Module, args)`` or ``(nn.Module, args, kwargs)``) and writes report.md, report.json, PNGs and bundle/ under ``out_dir``.
    A section that fails is reported with its error; the others still run."""
    progress = progress or (lambda s: None)
    os.makedirs(out_dir, exist_ok=True)
    if model is None:
        name = "embedded example (DoctorBlock: attention + MLP, call_jax gate, print, digamma, all_reduce)"
        model_fn, inputs, kwargs = example_model, example_inputs(), {}
        export_fn = lambda: _export_variant(example_model())  # noqa: E731
        factory_spec, inputs_spec = "torch_xla_ext.doctor:example_model", "torch_xla_ext.doctor:example_inputs"
        jax_model: Any = example_model()
    else:
        _made(model)  # fail early, naming the spec
        name = model
        model_fn, (_, inputs, kwargs) = (lambda: _made(model).model), _made(model)
        export_fn = model_fn
        os.environ[MODEL_ENV] = model
        factory_spec, inputs_spec = "torch_xla_ext.doctor:user_model", "torch_xla_ext.doctor:user_inputs"
        jax_model = None

    plan: list[tuple[str, Callable[[], tuple[str, str, dict]]]] = [
        ("parity", lambda: _parity_section(model_fn, inputs, kwargs, out_dir)),
        ("export", lambda: _export_section(export_fn(), inputs, kwargs, out_dir)),
    ]
    if jax_model is not None:
        plan.append(("call_jax", lambda: _jax_call_section(jax_model, inputs)))
    plan.append(("graph_breaks", lambda: _graph_breaks_section(factory_spec, inputs_spec, out_dir, progress, steps)))

    sections = []
    for i, (sec, fn) in enumerate(plan, 1):
        progress(f"[{i}/{len(plan)}] {sec} ...")
        t0 = time.perf_counter()
        try:
            summary, md, data = fn()
            ok = True
        except SectionFailed as f:  # the check failed; its figures stay in the report
            summary, md, data, ok = f.summary, f.markdown, f.data, False
        except Exception as e:  # a failing section is a finding; the rest of the report still runs
            summary = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            md = "```\n" + traceback.format_exc() + "```"
            data, ok = {"error": summary}, False
        dt = time.perf_counter() - t0
        progress(f"[{i}/{len(plan)}] {sec}: {summary} ({dt:.1f} s)")
        sections.append(Section(sec, ok, summary, md, _json_safe(data), dt))

    files = sorted(os.path.relpath(os.path.join(d, f), out_dir) for d, _, fs in os.walk(out_dir) for f in fs)
    files = sorted(set(files) | {"report.md", "report.json"})
    report = DoctorReport(name, out_dir, sections, files)
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
