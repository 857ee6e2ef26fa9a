"""The entry points, each a list of stages over one run record (:mod:`.pipeline`): ``verify``,
``localize``, ``assert_parity``, ``capture`` and ``compare_capture``.

Example:
    >>> import torch
    >>> verify(torch.nn.Linear(4, 4), (torch.randn(2, 4),), dtype="fp32").verdict
    <Verdict.PASS: 'PASS'>
"""

from __future__ import annotations

from typing import Any

import torch

from torch_xla_ext import _versions
from torch_xla_ext.parity import arguments, frontends, pipeline
from torch_xla_ext.parity.captures import Capture, load_capture
from torch_xla_ext.parity.casts import torch_dtype
from torch_xla_ext.parity.errors import ParityError, ParityTypeError
from torch_xla_ext.parity.program.rules import AUTO, resolve
from torch_xla_ext.parity.record import Request
from torch_xla_ext.parity.report import ParityReport
from torch_xla_ext.parity.stages import capture as capture_stages
from torch_xla_ext.parity.stages import cpu_eager, explanation, explorer, golden, localization, replays, xla_run

__all__ = ["assert_parity", "capture", "compare_capture", "compare_stages", "localize", "request", "verify",
           "verify_stages"]


def request(fn: Any, inputs: Any = (), kwargs: dict | None = None, *, dtype: Any = None, rtol: float | None = None,
            atol: float | None = None, reference: Any = None, seed: int = 0, emulate: bool = True,
            localize: bool = False, explorer_dir: str | None = None, rules: Any = AUTO, role: str = "fn",
            frontend: str = "torch_xla") -> Request:
    """verify's arguments, checked: a ParityError (a ValueError) or ParityTypeError names a bad one.
    ``role`` is what the caller calls ``fn`` ("model" for capture, "reference" for compare_capture);
    with ``localize`` under another role, ``fn`` must be an nn.Module. ``frontend``: how the model
    reaches XLA (:mod:`.frontends`); an unknown one raises ``UnknownFrontendError`` naming it.

    Example:
        >>> request(lambda x: x, rules="tpu-fast")
        Traceback (most recent call last):
        ...
        torch_xla_ext.parity.errors.ParityError: rules: expected one of xla-cpu, tpu-default, tpu-high, tpu-highest, gpu-tf32, auto, got 'tpu-fast'
    """
    frontends.of(frontend)
    arguments.check_callable(fn, role)
    if reference is not None:
        arguments.check_callable(reference, "reference")
    arguments.check_seed(seed)
    if explorer_dir is not None and not isinstance(explorer_dir, str):
        raise ParityTypeError(f"explorer_dir: expected a directory path (str), got {type(explorer_dir).__name__}")
    inputs, kwargs = arguments.check_inputs(inputs, kwargs)
    ref = fn if reference is None else reference
    if localize and role != "fn" and not isinstance(fn, torch.nn.Module):
        raise ParityTypeError(f"{role}: per-module localisation needs an nn.Module, got {type(fn).__name__}")
    if localize and not (isinstance(fn, torch.nn.Module) and isinstance(ref, torch.nn.Module)):
        raise ParityTypeError("localize: per-module localisation needs fn (and the reference) to be nn.Modules")
    if rules != AUTO:
        resolve(rules)  # a bad name raises here, before anything runs
    return Request(fn, ref, reference is not None, inputs, kwargs, torch_dtype(dtype), rtol, atol,
                   arguments.tolerances(rtol, atol), seed, emulate, localize, explorer_dir, rules, frontend)


def verify_stages(r: Request) -> list[pipeline.Stage]:
    """verify's stages for ``r``: the XLA run (its program's replays compiling, and where they can,
    running, beside what follows), CPU eager, the fp64 golden (with localize: the localisation's),
    the replays, the localisation (on a second, hooked XLA run when the rounded replay does not
    reproduce the run), the outputs compared, a second CPU eager run where an output is beyond the
    tolerances (a reference that differs from itself ends the run there), the frontend's own checks
    (torchax's op audit), Model Explorer.

    Example:
        >>> import torch
        >>> [s.name for s in verify_stages(request(torch.nn.Linear(2, 2), localize=True))]  # doctest: +NORMALIZE_WHITESPACE
        ['XLA', 'CPU eager', "outputs' shapes", 'replays', 'XLA capture', 'localisation', 'outputs compared',
         'second CPU eager', 'CPU eager against itself']
    """
    fe = frontends.of(r.frontend)
    return [
        fe.stage(replays.start_early, program=r.emulate or r.explorer_dir is not None),
        cpu_eager.FIRST,
        *golden.PLAIN.when(not r.localize),
        xla_run.SAME_SHAPES,
        *replays.STAGE.when(r.emulate),
        *capture_stages.SECOND_RUN.when(r.localize),
        *localization.STAGE.when(r.localize),
        replays.COMPARE,
        cpu_eager.SECOND,
        cpu_eager.DETERMINISTIC,
        *fe.checks,
        *explorer.STAGE.when(r.explorer_dir is not None),
    ]


def compare_stages(r: Request, cap: Capture) -> list[pipeline.Stage]:
    """compare_capture's stages: the capture as the run, the replays of its program (with
    ``r.emulate``), the localisation (whose golden is the run's), CPU eager, the outputs compared."""
    return [capture_stages.given(cap), *replays.STAGE.when(r.emulate), localization.OF_CAPTURE, cpu_eager.FIRST,
            replays.COMPARE]


def verify(
    fn: Any,
    inputs: Any = (),
    kwargs: dict | None = None,
    *,
    dtype: Any = None,
    rtol: float | None = None,
    atol: float | None = None,
    reference: Any = None,
    seed: int = 0,
    emulate: bool = True,
    localize: bool = False,
    explorer_dir: str | None = None,
    rules: str = AUTO,
    frontend: str = "torch_xla",
) -> ParityReport:
    """Runs ``fn(*inputs, **kwargs)`` on XLA and its reference on CPU eager (again where an output
    is off) and in fp64, compares every floating-point output (any pytree: HF ModelOutputs, dicts, dataclasses,
    caches; named by pytree path) and says which cause explains each difference.

    ``fn`` and ``reference`` (default: ``fn``) are callables or ``nn.Module``s; a module is
    copied and moved to each device (and cast to ``dtype``, "bf16"/"fp32"/... or a torch.dtype;
    None keeps the inputs' dtypes; integer inputs such as token ids are never cast). The RNG is
    reset to ``seed`` before every run. XLA vs CPU uses ``torch_xla_ext.numerics.compare`` with
    ``rtol``/``atol`` (default torch.testing's for the dtype). With ``emulate``, the XLA run's own
    program is replayed twice by XLA on the CPU: rounded as ``rules``' device rounds ("auto", the
    default: each dot's precision_config on the device the run used, XLA:CPU's own rules on a CPU;
    or one of ``parity.RULES``: "xla-cpu", "tpu-default", "tpu-high", "tpu-highest", "gpu-tf32")
    and exactly
    (:mod:`torch_xla_ext.parity.program.replay`). With ``localize``, every submodule's own error is
    separated from what it inherited (:func:`localize`). With ``explorer_dir``, the program and
    its per-op error go there for Model Explorer (:func:`~torch_xla_ext.parity.explorer.write_model_explorer`).
    ``frontend``: how ``fn`` reaches XLA: "torch_xla" (the default, torch_xla's lazy tensors) or
    "torchax" (the model under torchax's environment on JAX's XLA, compiled as ``torchax.compile``
    compiles it; its program is that function's StableHLO lowering, and "auto" rules read JAX's
    device). Under torchax, float64 and int64 computed as float32 and int32 (JAX's x64 mode off)
    are a cause of their own, named with the tensors, the lines and the fix.

    Bad arguments raise :class:`ParityError`; the verdict is EXCEPTION only when ``fn`` or the
    reference raises on a backend.

    Example:
        >>> import torch
        >>> r = verify(torch.nn.Linear(4, 4), (torch.randn(2, 4),), dtype="fp32")
        >>> r.verdict
        <Verdict.PASS: 'PASS'>
    """
    fe = frontends.of(frontend)
    _versions.require(fe.feature)  # before anything here imports torch_xla or JAX
    r = request(fn, inputs, kwargs, dtype=dtype, rtol=rtol, atol=atol, reference=reference, seed=seed,
                emulate=emulate, localize=localize, explorer_dir=explorer_dir, rules=rules, frontend=frontend)
    return explanation.report(pipeline.run(r, verify_stages(r), uses_xla=fe.uses_xla))


def assert_parity(fn: Any, inputs: Any = (), kwargs: dict | None = None, **options: Any) -> ParityReport:
    """:func:`verify` for pytest: raises AssertionError carrying the report unless it passes.

    Example:
        >>> import torch
        >>> report = assert_parity(torch.nn.Linear(4, 4), (torch.randn(2, 4),), dtype="fp32")
    """
    report = verify(fn, inputs, kwargs, **options)
    if not report.passed:
        raise AssertionError(str(report))
    return report


def localize(fn: Any, inputs: Any = (), kwargs: dict | None = None, **options: Any) -> ParityReport:
    """:func:`verify` with the per-module localisation (``localize=True``).

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16))
        >>> x = torch.randn(2, 16)
        >>> r = localize(model, (x,), dtype="bf16")
        >>> r.first_divergent_module is None
        True
    """
    if "localize" in options:
        raise ParityError("localize: takes verify's options except localize")
    return verify(fn, inputs, kwargs, localize=True, **options)


def capture(model: Any, inputs: Any = (), kwargs: dict | None = None, *, dtype: Any = None, seed: int = 0,
            device: Any = None, frontend: str = "torch_xla") -> Capture:
    """Runs ``model`` on XLA (``device``, default ``torch_xla.device()``) in ``dtype`` with hooks
    on every submodule and returns the per-module capture (tensors on the CPU, one sync), with the
    program the device ran (its precision_config included) and its arguments, so a CPU host can
    replay it (:func:`compare_capture`). What the model raises propagates as a ``UserFailure``
    naming the stage. ``frontend="torchax"``: the run through torchax (its eager run records the
    module tensors; the program is its forward's StableHLO; ``device`` must be None: JAX's default).

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16))
        >>> x = torch.randn(2, 16)
        >>> capture(model, (x,), dtype="bf16").save("xla_run.safetensors")
        'xla_run.safetensors'
    """
    fe = frontends.of(frontend)
    _versions.require(fe.feature)  # before torch_xla or torchax is imported here
    r = request(model, inputs, kwargs, dtype=dtype, seed=seed, localize=True, role="model", frontend=frontend)
    record = pipeline.run(r, [capture_stages.hooked_run(device)], uses_xla=fe.uses_xla)
    if record.failure is not None:
        raise record.failure
    return record.capture


def compare_capture(capture_or_path: Any, reference: Any, inputs: Any = (), kwargs: dict | None = None, *,
                    rtol: float | None = None, atol: float | None = None, seed: int = 0,
                    rules: str = AUTO, emulate: bool = True, frontend: str | None = None) -> ParityReport:
    """Compares a capture (a :class:`~torch_xla_ext.parity.captures.Capture` or its file) with CPU
    runs of ``reference`` on the same inputs, without XLA: the verdict on the final outputs (CPU
    eager in the capture's dtype, fp64 golden), with ``emulate`` the replays of the program the
    device ran (``rules`` as for :func:`verify`; "auto", the default, reads the capture's device
    and each dot's precision_config), and every module's own, inherited and total error
    (:mod:`.stages.localization`). ``frontend`` (None: any): the frontend the capture must have
    been made through; a capture made through another raises ParityError.

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16))
        >>> x = torch.randn(2, 16)
        >>> capture(model, (x,), dtype="bf16").save("xla_run.safetensors")
        'xla_run.safetensors'
        >>> report = compare_capture("xla_run.safetensors", model, (x,))
        >>> report.first_divergent_module is None          # a module name when one diverges
        True
    """
    if emulate:
        _versions.require("parity.replay")  # the replays need JAX; comparing alone needs torch
    cap = capture_or_path if isinstance(capture_or_path, Capture) else load_capture(capture_or_path)
    if frontend is not None:
        made = cap.info.get("frontend", "torch_xla")
        if frontends.of(frontend).name != made:
            raise ParityError(f"frontend: the capture was made through {made}, not {frontend}")
    r = request(reference, inputs, kwargs, dtype=cap.run_dtype, rtol=rtol, atol=atol, reference=reference, seed=seed,
                emulate=emulate, localize=True, rules=rules, role="reference",
                frontend=cap.info.get("frontend", "torch_xla"))  # the report names the capture's frontend
    return explanation.report(pipeline.run(r, compare_stages(r, cap), uses_xla=False))
