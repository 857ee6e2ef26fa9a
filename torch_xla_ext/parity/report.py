"""The outcome of a parity run, as data: the verdict, per-output, per-layer and per-module figures,
the rules the replays applied, and the document (lead sentence and sections) the explanation stage
wrote from those figures.

Nothing here words or renders a report: the explanation stage (:mod:`.stages.explanation`) builds
it, and the renderings read it: ``str(report)`` and ``report.to_markdown()`` lay out the document
it holds (:mod:`.document`), ``report.to_dict()`` / ``to_json()`` give every figure with the
document's ``summary`` and ``sections``, :mod:`.html` makes a page of it, :mod:`.plot` a picture of
its per-module errors.

Example:
    >>> import torch
    >>> from torch_xla_ext import parity
    >>> report = parity.verify(torch.nn.Linear(4, 4), (torch.randn(2, 4),), dtype="fp32")
    >>> report.verdict, report.rules
    (<Verdict.PASS: 'PASS'>, 'xla-cpu')
"""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any

from torch_xla_ext import _device, _json, numerics
from torch_xla_ext.parity.document import Document
from torch_xla_ext.parity.errors import ParityError
from torch_xla_ext.parity.program.stablehlo import RoundingPoint

__all__ = ["CAUSES", "MATMUL_PRECISION", "OP_LOWERING", "REAL_DIFFERENCE", "REASSOCIATION", "ROUNDING_PLACEMENT",
           "UNEXPLAINED", "X64_OFF", "LayerParity", "ModuleParity", "Narrowed", "OpAudit", "OpLowering", "OutputParity",
           "ParityReport", "Verdict"]

# What explains an output's difference from CPU eager (None: there is none, bit for bit).
ROUNDING_PLACEMENT = "rounding placement"
MATMUL_PRECISION = "matmul precision"  # the device's precision for f32 dots and convolutions
REASSOCIATION = "reassociation"
REAL_DIFFERENCE = "real difference"
UNEXPLAINED = "unexplained"  # the replays were unavailable, so no cause is established
# A frontend on JAX (torchax) with JAX's x64 mode off computed float64 tensors as float32.
X64_OFF = "x64 off"
# The program is not the reference's math because the frontend (torchax) lowers one op to other
# math than eager PyTorch computes: the op audit (OpAudit) found which.
OP_LOWERING = "op lowering"
CAUSES = (ROUNDING_PLACEMENT, MATMUL_PRECISION, REASSOCIATION, REAL_DIFFERENCE, UNEXPLAINED, X64_OFF, OP_LOWERING)


@dataclasses.dataclass(frozen=True)
class Narrowed:
    """A tensor torch computes in 64 bits and the run in 32 (JAX's x64 mode off): ``dtype`` (torch's,
    "float64" or "int64"), the torch call that made it (``op``), the module whose forward ran it
    (its path, "" for the model itself; None outside any), and the model's line (``source``
    "file:line" and ``source_line``; None where no frame of the model's code made it)."""

    dtype: str
    op: str
    module: str | None
    source: str | None
    source_line: str | None


@dataclasses.dataclass(frozen=True)
class OpLowering:
    """An op the frontend lowers to other math than eager PyTorch: ``op`` (the aten op,
    "aten.gelu.default", or the torch function the frontend lowers itself), ``lowering`` (the
    module-qualified name of the function that implements it there, "torchax.ops.jaten._aten_gelu"),
    ``overridden`` (that function is a user's ``override_op_definition``, not the frontend's own),
    the module whose forward ran it (its path, "" for the model itself; None outside any) and the
    model's line (``source`` "file:line" and ``source_line``; None where no frame of the model's code
    ran it). ``difference`` is the greatest |frontend - torch| over the op's floating-point results,
    both in float64 from the same inputs (inf: results of other shapes), ``scale`` the greatest
    magnitude of its inputs and torch's results, and ``bound`` what float64 rounding allows there
    (``causes.LOWERING_BOUND`` x scale)."""

    op: str
    lowering: str
    overridden: bool
    module: str | None
    source: str | None
    source_line: str | None
    difference: float
    scale: float
    bound: float

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _finite(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "OpLowering":
        """The finding :meth:`to_dict` wrote (its non-finite floats as "inf"/"nan"); a ParityError
        names a missing field."""
        _require(d, [f.name for f in dataclasses.fields(cls)], "op_audit.found")
        return cls(**{f.name: _json.number(d[f.name]) for f in dataclasses.fields(cls)})


def _require(d: Any, keys: list[str], what: str) -> None:
    """A ParityError naming ``what`` and the first of ``keys`` that the dict ``d`` lacks."""
    if not isinstance(d, dict):
        raise ParityError(f"{what}: expected a dict, got {type(d).__name__}")
    missing = [k for k in keys if k not in d]
    if missing:
        raise ParityError(f"{what}: missing field {missing[0]!r}")


@dataclasses.dataclass(frozen=True)
class OpAudit:
    """The op audit of one module call (``module``: its path, "" for the model; ``call``: which
    call of it): its forward run by the frontend op by op in float64 (JAX's x64 mode on), each op
    against torch's own on the CPU from the same inputs. ``compared``: how many ops were compared
    (up to and including the one found); ``found``: the first op, in the order ops finish, whose
    result leaves torch's beyond float64 rounding (None: every op agrees); ``error``: why the audit
    could not run (None when it ran)."""

    module: str
    call: int = 0
    compared: int = 0
    found: OpLowering | None = None
    error: str | None = None

    @property
    def name(self) -> str:
        base = self.module or "<root>"
        return base if self.call == 0 else f"{base}#{self.call}"

    def to_dict(self) -> dict[str, Any]:
        return {"module": self.module, "call": self.call, "compared": self.compared,
                "found": self.found.to_dict() if self.found is not None else None, "error": self.error}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "OpAudit":
        """The audit :meth:`to_dict` wrote; a ParityError names a missing field."""
        _require(d, ["module", "call", "compared"], "op_audit")
        found = d.get("found")
        return cls(d["module"], d["call"], d["compared"], OpLowering.from_dict(found) if found is not None else None,
                   d.get("error"))


class Verdict(str, enum.Enum):
    """The outcome, in the manner of pytorch/xla's benchmarks verifier."""

    PASS = "PASS"  # XLA matches CPU eager within the tolerances.
    FAIL = "FAIL"  # It does not; the explanation says which cause accounts for it.
    NONDETERMINISTIC_REFERENCE = "NONDETERMINISTIC_REFERENCE"  # two CPU runs disagree.
    EXCEPTION = "EXCEPTION"  # the user's function raised on a backend; nothing was compared.

    def __str__(self) -> str:
        return self.value

    @classmethod
    def of(cls, outputs: Any) -> "Verdict":
        """PASS when every output's XLA vs CPU eager comparison is within its tolerances, else FAIL
        (the compared outputs' verdict; the other verdicts end a run before comparing)."""
        return cls.PASS if all(o.xla_vs_cpu.passed for o in outputs) else cls.FAIL


def _finite(v: Any) -> Any:
    return _json.encode(v)  # the one JSON rule: a non-finite float as "nan"/"inf"/"-inf"


@dataclasses.dataclass(frozen=True)
class OutputParity:
    """One floating-point output, named by its pytree path (``.logits``, ``[0]``).

    Errors are against the fp64 golden: greatest and mean absolute error. ``scale`` is the
    golden's greatest magnitude; ``max_diff_to_scale`` the greatest XLA-vs-CPU difference divided
    by it, and ``max_ulp_magnitude`` the magnitude of the element with the greatest ULP distance
    (near zero, large ULP counts are small differences). ``significant`` compares only the
    elements above 1e-3 of the scale.

    The replays (None when they did not run): ``emulated`` compares XLA with the rounded replay
    exactly (the bit-equality figure); ``replay_distance`` is their greatest difference,
    ``run_rounding`` and ``replay_rounding`` XLA's and the rounded replay's own greatest differences
    from the program's exact math (the unrounded replay), ``replay_bound`` what evaluation order
    may change between two XLA builds (2 x the smaller of those two, + one reordered sum of the
    program's longest reduction at the output's scale; docs/parity.md), and
    ``reproduced`` whether the run is within it. ``unrounded`` compares the exact replay with the
    golden. ``xla_cpu_reproduced``: under another device's rules that round matmul operands,
    whether the replay with XLA:CPU's own rules reproduces the run too (None: not asked).
    ``wide_error``: where the run computed float64 tensors in float32 (JAX's x64 mode off), the
    greatest error against the golden of its program traced with x64 on, replayed (None otherwise).
    ``cause`` is one of ``CAUSES`` (None when XLA equals CPU bit for bit).
    """

    path: str
    xla_vs_cpu: numerics.CompareReport
    xla_error: float
    cpu_error: float
    xla_mean_error: float
    cpu_mean_error: float
    closer: str  # "xla", "cpu" or "tie": which is closer to the golden
    scale: float = 0.0
    max_diff_to_scale: float = 0.0
    max_ulp_magnitude: float = 0.0
    significant: numerics.CompareReport | None = None
    emulated: numerics.CompareReport | None = None
    emulated_error: float | None = None
    unrounded: numerics.CompareReport | None = None
    unrounded_error: float | None = None
    same_math: bool | None = None
    cause: str | None = None
    replay_distance: float | None = None
    run_rounding: float | None = None
    replay_rounding: float | None = None
    replay_bound: float | None = None
    reproduced: bool | None = None
    xla_cpu_reproduced: bool | None = None
    wide_error: float | None = None

    @property
    def bit_identical(self) -> bool:
        r = self.xla_vs_cpu
        return r.ulp_histogram.get("0", 0) == r.total

    def to_dict(self) -> dict[str, Any]:
        keys = ("path", "xla_error", "cpu_error", "xla_mean_error", "cpu_mean_error", "closer", "scale",
                "max_diff_to_scale", "max_ulp_magnitude", "emulated_error", "unrounded_error", "same_math", "cause",
                "replay_distance", "run_rounding", "replay_rounding", "replay_bound", "reproduced",
                "xla_cpu_reproduced", "wide_error")
        d = {k: _finite(getattr(self, k)) for k in keys}
        for k in ("xla_vs_cpu", "significant", "emulated", "unrounded"):
            v = getattr(self, k)
            d[k] = v.to_dict() if v is not None else None
        return d


@dataclasses.dataclass(frozen=True)
class LayerParity:
    """One layer of a scanned stack: scan vs the Python loop on XLA (with the tolerances), XLA
    (scan) vs CPU eager (with the tolerances), and both against the fp64 golden. ``cause`` as an
    output's, from the per-layer replays of the scan's program."""

    index: int
    scan_vs_loop: numerics.CompareReport
    xla_vs_cpu: numerics.CompareReport
    xla_error: float
    cpu_error: float
    cause: str | None = UNEXPLAINED  # None: bit-identical to CPU eager

    @property
    def rounding_explained(self) -> bool:
        return self.cause in (ROUNDING_PLACEMENT, MATMUL_PRECISION, REASSOCIATION)

    @property
    def diverges(self) -> bool:
        """Scan differs from the loop, or XLA differs from CPU eager for a reason other than
        where or in which order it rounds."""
        if not self.scan_vs_loop.passed:
            return True
        return not self.xla_vs_cpu.passed and not self.rounding_explained

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "diverges": self.diverges, "cause": self.cause,
                "scan_vs_loop": self.scan_vs_loop.to_dict(), "xla_vs_cpu": self.xla_vs_cpu.to_dict(),
                "xla_error": _finite(self.xla_error), "cpu_error": _finite(self.cpu_error)}


@dataclasses.dataclass(frozen=True)
class ModuleParity:
    """One call of one submodule, by its nn.Module path (``model.layers.3.mlp.down_proj``;
    ``call`` counts repeated calls of a shared module).

    Errors are root-mean-square differences over the module's floating-point outputs:
    ``total_error``: XLA's output vs the fp64 golden run's; ``inherited_error``: XLA's inputs
    vs the golden's (what earlier modules passed on); ``own_error``: XLA's output vs the
    reference module in fp64 run on the inputs XLA's module received (the shadow of torch.ao.ns:
    the module's own contribution); ``cpu_rounding``: CPU eager's error for the same module on
    the same inputs (what rounding in the dtype costs; under another device's matmul precision,
    with its operands rounded as that device rounds them); ``rounding_level``: that, at least a
    floor of units of roundoff of ``scale`` (the shadow's RMS). ``own_to_rounding`` is the one
    figure the rule, the table and the explanation read: ``diverges`` when it exceeds
    ``threshold``.
    """

    path: str
    call: int
    depth: int
    order: int  # completion order: a module finishes after its children
    total_error: float
    inherited_error: float
    own_error: float
    rounding_level: float
    scale: float
    diverges: bool
    cpu_rounding: float = 0.0
    threshold: float = math.inf

    @property
    def name(self) -> str:
        base = self.path or "<root>"
        return base if self.call == 0 else f"{base}#{self.call}"

    @property
    def own_to_rounding(self) -> float:
        if self.own_error == 0:
            return 0.0
        return self.own_error / self.rounding_level if self.rounding_level > 0 else math.inf

    def to_dict(self) -> dict[str, Any]:
        d = {k: _finite(getattr(self, k)) for k in (
            "path", "call", "depth", "order", "total_error", "inherited_error", "own_error", "rounding_level",
            "cpu_rounding", "scale", "threshold", "diverges")}
        d["own_to_rounding"] = _finite(self.own_to_rounding)
        return d


@dataclasses.dataclass(frozen=True)
class ParityReport:
    """The outcome of :func:`verify`, :func:`scan_layers`, :func:`localize` or
    :func:`compare_capture`.

    ``emulation`` is the bit-equality figure: "matches" when XLA equals the rounded replay bit for
    bit on every output, "differs" when it does not, or "unavailable: <why>". ``reproduced`` is
    what causes rest on: whether XLA equals its rounded replay within the bound evaluation order
    allows on every output (None without replays). ``hlo_math`` is "same" when the exact replay
    matches the fp64 golden (the program computes the reference's math), "differs", or
    "unavailable"; ``unrounded_replay`` is the float that replay computed in: "f64", or "f32" for a
    program that rounds to bf16/f16 and whose f32 replay matched the golden. ``rules`` are the
    device rules the rounded replay applied ("xla-cpu", "tpu-default", "tpu-high", "tpu-highest",
    "gpu-tf32", or "per dot: ..." when read per dot) and ``rules_source`` why ("given", or what
    they were read from). ``rounding_points`` are the ops where XLA stores a bf16/f16 result;
    those with ``after`` set round twice in a row. ``modules`` is the per-module localisation
    (when asked for), ``first_divergent_module`` its first module whose own error is beyond
    rounding. ``seconds`` times each stage. ``document`` is the lead sentence and sections.
    ``frontend`` is how the model reached XLA ("torch_xla" or "torchax"); ``narrowed`` the tensors
    the run computed in 32 bits where torch computes 64 (JAX's x64 mode off, under torchax).
    ``op_audit``: under torchax, when the exact replay leaves the golden, the op audit of the first
    divergent module (the model without a localisation) and the op it found lowered differently.
    """

    verdict: Verdict
    explanation: str
    dtype: str
    rtol: float | None
    atol: float | None
    outputs: tuple[OutputParity, ...] = ()
    emulation: str = "unavailable: not run"
    hlo_math: str = "unavailable"
    rounding_points: tuple[RoundingPoint, ...] = ()
    nondeterminism: tuple[str, numerics.CompareReport] | None = None
    exception: str | None = None
    stage: str | None = None
    layers: tuple[LayerParity, ...] = ()
    first_divergent_layer: int | None = None
    first_mismatched_layer: int | None = None
    modules: tuple[ModuleParity, ...] = ()
    first_divergent_module: str | None = None
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    hlo_text: str | None = dataclasses.field(default=None, repr=False)
    unrounded_replay: str | None = None
    # The XLA device the run used (made where the report is made, in the process that ran XLA).
    device: str = dataclasses.field(default_factory=lambda: _device.current())
    reproduced: bool | None = None
    rules: str = "xla-cpu"
    rules_source: str = "given"
    document: Document | None = dataclasses.field(default=None, repr=False)
    frontend: str = "torch_xla"
    narrowed: tuple[Narrowed, ...] = ()
    op_audit: OpAudit | None = None

    @property
    def passed(self) -> bool:
        return self.verdict == Verdict.PASS

    @property
    def causes(self) -> dict[str, str | None]:
        """Each output's cause by path."""
        return {o.path: o.cause for o in self.outputs}

    @property
    def summary(self) -> str:
        """The lead sentence (verdict, cause, what to do)."""
        return self.document.lead if self.document is not None else self.explanation.split(". ")[0]

    def to_dict(self) -> dict[str, Any]:
        d = {
            "verdict": self.verdict.value, "frontend": self.frontend, "device": self.device, "explanation": self.explanation, "dtype": self.dtype,
            "rtol": self.rtol, "atol": self.atol, "emulation": self.emulation, "reproduced": self.reproduced,
            "hlo_math": self.hlo_math, "unrounded_replay": self.unrounded_replay,
            "rules": self.rules, "rules_source": self.rules_source,
            "outputs": [o.to_dict() for o in self.outputs],
            "rounding_points": [dataclasses.asdict(p) for p in self.rounding_points],
            "exception": self.exception, "stage": self.stage,
            "layers": [l.to_dict() for l in self.layers],
            "first_divergent_layer": self.first_divergent_layer,
            "first_mismatched_layer": self.first_mismatched_layer,
            "modules": [m.to_dict() for m in self.modules],
            "first_divergent_module": self.first_divergent_module,
            "narrowed": [dataclasses.asdict(n) for n in self.narrowed],
            "op_audit": self.op_audit.to_dict() if self.op_audit is not None else None,
            "seconds": {k: round(v, 4) for k, v in self.seconds.items()},
            # The lead sentence and the sections as the text, Markdown and HTML renderings show them.
            "summary": self.summary,
            "sections": [s.to_dict() for s in self.document.sections] if self.document is not None else [],
        }
        if self.nondeterminism:
            d["nondeterminism"] = {"path": self.nondeterminism[0], "report": self.nondeterminism[1].to_dict()}
        return d

    def to_json(self, **kwargs: Any) -> str:
        return _json.dumps(self.to_dict(), **kwargs)

    def module_table(self) -> str:
        """The per-module localisation as a text table (completion order: children first)."""
        if not self.modules:
            return ""
        width = max(len(m.name) + 2 * m.depth for m in self.modules)
        lines = [f"{'module':{width}s}  {'own err':>9s}  {'rounding':>9s}  {'own/rnd':>7s}  "
                 f"{'inherited':>9s}  {'total err':>9s}"]
        for m in self.modules:
            ratio = m.own_to_rounding
            lines.append(
                f"{'  ' * m.depth + m.name:{width}s}  {m.own_error:9.3g}  {m.rounding_level:9.3g}  "
                f"{ratio if math.isfinite(ratio) else float('inf'):7.3g}  {m.inherited_error:9.3g}  "
                f"{m.total_error:9.3g}"
                + ("  <- first divergent" if m.name == self.first_divergent_module else
                   ("  diverges" if m.diverges else "")))
        return "\n".join(lines)

    def to_markdown(self) -> str:
        """The report as Markdown: a title with the verdict, the lead sentence, then the sections
        outputs, rounding, per layer/module, figures."""
        return self._document().markdown(f"Parity: {self.verdict.value} ({self.dtype})")

    def __str__(self) -> str:
        return self._document().text(f"Parity verdict: {self.verdict.value} ({self.dtype}) on XLA:{self.device}")

    def _document(self) -> Document:
        # A report made by hand (no explanation stage) is its explanation, unsectioned.
        return self.document if self.document is not None else Document(self.explanation)
