"""Running a function on XLA, on CPU eager and in fp64: dtypes, devices, pytree outputs, the RNG.

Only the user's function runs inside ``UserFailure``'s net: an exception it raises on a backend
becomes ``Verdict.EXCEPTION``; anything else (bad arguments, our own code) raises.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import dataclasses
import time
from collections.abc import Sequence
from typing import Any, Callable, Iterator

import numpy as np

from torch_xla_ext import _dtypes
from torch_xla_ext.parity.errors import HloCaptureError, ParityError, ParityTypeError

__all__ = ["GraphArgs", "UserFailure", "XlaRun", "call", "float_leaves", "is_cast", "move", "prepare", "run_cpu",
           "run_xla", "torch_dtype", "to_numpy", "user_rng_preserved"]

def torch_dtype(dtype: Any, what: str = "dtype"):
    """A torch floating dtype from "bf16"/"fp32"/... or a torch.dtype; None stays None."""
    import torch

    if dtype is None:
        return None
    if isinstance(dtype, torch.dtype):
        if not dtype.is_floating_point:
            raise ParityError(f"{what}: expected a floating-point dtype, got {dtype}")
        return dtype
    if not isinstance(dtype, str):
        raise ParityTypeError(f"{what}: expected one of bf16, fp16, fp32, fp64 or a torch.dtype, got "
                              f"{type(dtype).__name__}")
    row = _dtypes.find(dtype.lower())  # names, MLIR types and aliases, with or without "torch."
    if row is None or not row.is_float or row.name.startswith("float8"):
        raise ParityError(f"{what}: expected one of bf16, fp16, fp32, fp64 or a torch.dtype, got {dtype!r}")
    return getattr(torch, row.name)


class UserFailure(Exception):
    """The user's function (or reference) raised while running at ``stage``."""

    def __init__(self, stage: str, error: BaseException):
        super().__init__(f"{stage}: {type(error).__name__}: {error}")
        self.stage, self.error = stage, error


def move(value: Any, device: Any, dtype: Any) -> Any:
    """Tensors of ``value`` (args tuple, kwargs dict, nested containers) detached, floats cast to
    ``dtype`` on the CPU first (so XLA receives data already in dtype, not a convert), moved."""
    import torch
    from torch_xla_ext._compat.pytree import tree_map

    def one(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        t = t.detach()
        if dtype is not None and t.is_floating_point():
            t = t.to("cpu").to(dtype)
        return t.to(device)

    return tree_map(one, value)


def prepare(fn: Any, device: Any, dtype: Any, *, via: Any = None, made: list | None = None) -> Callable:
    """A module is copied with its floating parameters and buffers cast to ``via`` (when given)
    and then to ``dtype`` on the CPU, and moved; other callables are kept.

    The copy is made tensor by tensor (each cast straight from the original), so it costs one
    copy of the weights in the target dtype, never a float32 copy of the whole model first: at
    real sizes that copy was the largest term of verify's peak memory. Tied weights stay tied.
    ``made`` (a list) receives (copy, original) for every tensor cast."""
    import torch

    if not isinstance(fn, torch.nn.Module):
        return fn

    def cast(t: Any) -> Any:
        return cast_on_cpu(t, dtype, via).to(device)

    memo: dict[int, Any] = {}
    for p in fn.parameters():
        memo[id(p)] = torch.nn.Parameter(cast(p), requires_grad=p.requires_grad)
        if made is not None:
            made.append((memo[id(p)], p))
    for b in fn.buffers():
        memo[id(b)] = cast(b)
        if made is not None:
            made.append((memo[id(b)], b))
    # deepcopy takes every tensor it meets in the memo as already copied.
    return copy.deepcopy(fn, memo)


def is_cast(t: Any) -> bool:
    """Whether :func:`cast_on_cpu` casts ``t`` (what Module.to(dtype) casts); other tensors are
    copied as they are."""
    return t.is_floating_point() or t.is_complex()


def cast_on_cpu(t: Any, dtype: Any, via: Any = None) -> Any:
    """``t`` on the CPU, cast to ``via`` and then ``dtype`` when :func:`is_cast`; :func:`prepare`
    moves this to the device."""
    t = t.detach().to("cpu")
    if is_cast(t):
        for d in (via, dtype):
            if d is not None:
                t = t.to(d)
    return t


def _key_entries(node: Any) -> list[tuple[str, Any]] | None:
    """(path piece, child) pairs of a container, or None for a leaf. torch's pytree registry
    first (with keys), then the containers transformers and users return without keys: HF
    ModelOutputs (dataclasses that are also dicts), other dataclasses, mappings, sequences, and
    objects that hold tensors as attributes (HF caches)."""
    import torch
    from torch_xla_ext._compat import pytree

    if isinstance(node, torch.Tensor) or node is None or isinstance(node, (bool, int, float, str, bytes)):
        return None
    entry = pytree.SUPPORTED_NODES.get(type(node))
    if entry is not None and entry.flatten_with_keys_fn is not None:
        children, _ = entry.flatten_with_keys_fn(node)
        return [(pytree.keystr((k,)), v) for k, v in children]
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        return [(f".{f.name}", getattr(node, f.name)) for f in dataclasses.fields(node)]
    if isinstance(node, dict):
        return [(f"[{k!r}]", v) for k, v in node.items()]
    if isinstance(node, tuple) and hasattr(node, "_fields"):
        return [(f".{f}", getattr(node, f)) for f in node._fields]
    if isinstance(node, (list, tuple)):
        return [(f"[{i}]", v) for i, v in enumerate(node)]
    attrs = getattr(node, "__dict__", None)
    if isinstance(attrs, dict):
        return [(f".{k}", v) for k, v in attrs.items() if not k.startswith("_")]
    return None


def _leaves(node: Any, path: str, seen: set[int], depth: int) -> Iterator[tuple[str, Any]]:
    import torch

    if isinstance(node, torch.Tensor):
        yield path, node
        return
    if id(node) in seen or depth > 16:
        return
    entries = _key_entries(node)
    if entries is None:
        return
    seen.add(id(node))
    for piece, child in entries:
        yield from _leaves(child, path + piece, seen, depth + 1)


def tensor_leaves(out: Any) -> list[tuple[str, Any]]:
    """Every tensor in ``out`` with its pytree path (``.logits``, ``[0]``, ``['k']``)."""
    return list(_leaves(out, "", set(), 0))


def float_leaves(out: Any, what: str) -> list[tuple[str, Any]]:
    """Floating-point tensors of ``out`` by pytree path; ParityError when there are none."""
    leaves = [(p, t) for p, t in tensor_leaves(out) if t.is_floating_point()]
    if not leaves:
        raise ParityError(f"{what} returned no floating-point tensor (got {type(out).__name__})")
    return leaves


@contextlib.contextmanager
def user_rng_preserved():
    """Runs are seeded; the caller's torch and XLA RNG states come back unchanged. A process
    that never imported torch_xla (comparing a capture on the CPU) is left without it."""
    import sys

    import torch

    xm = sys.modules.get("torch_xla.core.xla_model")
    xla_state = xm.get_rng_state() if xm is not None else None
    with torch.random.fork_rng(devices=[]):
        try:
            yield
        finally:
            if xm is not None:
                xm.set_rng_state(xla_state)


def call(stage: str, fn: Callable, args: tuple, kwargs: dict) -> Any:
    """``fn(*args, **kwargs)``; what the user's code raises becomes a UserFailure at ``stage``.
    Our own errors (raised by parity's hooks inside it) pass through unchanged."""
    from torch_xla_ext.errors import TorchXlaExtError

    try:
        return fn(*args, **kwargs)
    except (TorchXlaExtError, UserFailure):
        raise
    except Exception as e:  # the user's code failed on this backend: a verdict, not our error
        raise UserFailure(stage, e) from e


_WIDENING = contextvars.ContextVar("txe_parity_widening", default=False)


def _widening_mode(target: Any, gated: bool):
    """A TorchFunctionMode under which a ``target`` (float64 or float32) run stays in ``target``:
    every request for a narrower float (``x.to(torch.float32)``, ``x.float()``,
    ``dtype=torch.float32``) gets ``target``. Models upcast on purpose (T5's and Llama's RMSNorm
    compute ``hidden.to(torch.float32)``); in the fp64 golden that upcast would round to f32, so the
    golden would carry f32 error the exact replay (every float f64) does not, and the same math
    would look like a different one. ``gated``: only while ``_WIDENING`` is set (the golden's own
    mode, which its CPU shadows switch off)."""
    import torch
    from torch.overrides import TorchFunctionMode

    bits = torch.finfo(target).bits
    narrow = {d for d in (torch.float32, torch.float16, torch.bfloat16) if torch.finfo(d).bits < bits}
    to_target = {m for m, d in ((torch.Tensor.float, torch.float32), (torch.Tensor.half, torch.float16),
                                (torch.Tensor.bfloat16, torch.bfloat16)) if d in narrow}
    method = torch.Tensor.double if target == torch.float64 else torch.Tensor.float

    def widen(v: Any) -> Any:
        return target if v in narrow else v

    class Widening(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if gated and not _WIDENING.get():  # parity's own narrow work inside a golden run (a CPU shadow)
                return func(*args, **(kwargs or {}))
            kwargs = dict(kwargs or {})
            if "dtype" in kwargs:
                kwargs["dtype"] = widen(kwargs["dtype"])
            if func in to_target:
                func = method
            elif func in (torch.Tensor.to, torch.Tensor.type) and args:
                rest = []
                for a in args[1:]:
                    if isinstance(a, torch.Tensor) and a.dtype in narrow:  # x.to(other): other's device
                        a = a.device
                        rest.append(a)
                        rest.append(target)
                        continue
                    rest.append(widen(a))
                args = (args[0], *rest)
            return func(*args, **kwargs)

    return Widening()


@contextlib.contextmanager
def default_dtype(dtype: Any):
    """For a float64 run (``dtype`` float64): torch's default dtype set to float64 for the
    duration, so models that make tensors from Python numbers (transformers' attention masks fill
    ``torch.finfo(dtype).min`` into a default-dtype tensor) run in fp64 as a whole, and every
    explicit narrowing to a float32/16 dtype widened to float64 (:func:`_widening_mode`)."""
    import torch

    if dtype != torch.float64:
        yield
        return
    with _run_widened(torch.float64, gated=True):
        yield


@contextlib.contextmanager
def widened(dtype: Any):
    """Inside a float64 run (:func:`default_dtype`), runs the block in ``dtype`` the way that run
    runs in float64: for float32, torch's default dtype is float32 and every request for a narrower
    float gets float32 (a localisation's float32 shadow). float64 changes nothing."""
    import torch

    if dtype == torch.float64:
        yield
        return
    # Not gated, and the enclosing float64 mode (gated) lets this block's float32 be.
    with _run_widened(dtype, gated=False):
        yield


@contextlib.contextmanager
def _run_widened(dtype: Any, gated: bool):
    """The block with torch's default dtype ``dtype``, ``_WIDENING`` set to ``gated`` and a
    :func:`_widening_mode` to ``dtype`` active."""
    import torch

    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    token = _WIDENING.set(gated)
    try:
        with _widening_mode(dtype, gated=gated):
            yield
    finally:
        _WIDENING.reset(token)
        torch.set_default_dtype(before)


@contextlib.contextmanager
def narrowing():
    """Inside a float64 run (:func:`default_dtype`), lets the code in the block narrow dtypes as
    written: a CPU shadow in bf16 that runs while the golden's hooks are active."""
    token = _WIDENING.set(False)
    try:
        yield
    finally:
        _WIDENING.reset(token)


def run_cpu(ref: Any, args: tuple, kwargs: dict, dtype: Any, seed: int, *, via: Any = None,
            stage: str = "CPU eager", run: Callable[..., Any] = call) -> tuple[list[tuple[str, Any]], float]:
    """(float outputs by path, seconds). ``via``: round inputs and parameters to this dtype
    first (the golden of what XLA received). ``run(stage, model, args, kwargs)`` calls the
    prepared model (:func:`call`, or a recorder of its module calls)."""
    import torch

    torch.manual_seed(seed)
    with torch.no_grad():
        if via is not None:
            args, kwargs = move(args, "cpu", via), move(kwargs, "cpu", via)
        fn = prepare(ref, "cpu", dtype, via=via)
        a, k = move(args, "cpu", dtype), move(kwargs, "cpu", dtype)
        t0 = time.perf_counter()
        with default_dtype(dtype):
            out = run(stage, fn, a, k)
        seconds = time.perf_counter() - t0
    return [(p, t.detach().clone()) for p, t in float_leaves(out, "the reference")], seconds


class _Recast:
    """One argument of the XLA run's program made again when needed: ``original`` (the user's
    tensor, which stays) cast exactly as :func:`prepare` cast it for the run, so bit for bit what
    the device held."""

    def __init__(self, original: Any, dtype: Any):
        self.original, self.dtype = original, dtype

    def __call__(self) -> np.ndarray:
        return to_numpy(cast_on_cpu(self.original, self.dtype))


class GraphArgs(Sequence):
    """The XLA run's program arguments as numpy arrays. The model's weights are not held: each is
    cast again from the user's model when asked for (a fresh array each time), so at real sizes
    no copy of the weights waits through the run for the replays; other arguments are copies."""

    def __init__(self, items: list):
        self._items = items  # numpy arrays and _Recast

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        item = self._items[k]
        return item() if isinstance(item, _Recast) else item

    def lazy(self) -> list:
        """The items unmade (arrays and makers); call :func:`made` on one to get its array."""
        return list(self._items)

    def clear(self) -> None:
        self._items = []


def made(item: Any) -> Any:
    """An item of :meth:`GraphArgs.lazy` as its array."""
    return item() if isinstance(item, _Recast) else item


@dataclasses.dataclass
class XlaRun:
    """Outputs of the XLA run and its program: the HloModuleProto and the device data it reads
    (``graph_args``, numpy), or why torch_xla could not give them (``hlo_error``)."""

    outputs: list[tuple[str, Any]]
    proto: bytes | None
    graph_args: GraphArgs | None
    hlo_error: str | None
    seconds: float
    # HLO instruction -> module path (parity.explorer); None: no op metadata (XLA_HLO_DEBUG off).
    module_paths: dict[str, str] | None = None
    # With ``replayed``: the program of the outputs and the recorded module tensors (these follow
    # the outputs among its results), for the rounded replay, and its arguments.
    capture_proto: bytes | None = None
    capture_args: GraphArgs | None = None


def run_xla(fn: Any, args: tuple, kwargs: dict, dtype: Any, seed: int, capture_hlo: bool,
            on_program: Callable[..., Any] | None = None, *, run: Callable[..., Any] = call,
            device: Any = None, stage: str = "XLA", replayed: Any = None) -> XlaRun:
    """The XLA run on ``device`` (default ``torch_xla.device()``). ``on_program(proto,
    capture_proto)`` gets the HloModuleProto of the outputs (and of the outputs with the recorded
    module tensors, or None) as soon as they exist, before torch_xla compiles and executes the
    outputs' (verify starts compiling its replays there). ``run(stage, model, args, kwargs)`` calls
    the prepared model (:func:`call`; a capture's recorder keeps every module call's tensors, which
    the one execution then computes with the outputs, while the program given to ``on_program``
    and kept in ``proto`` is the outputs' own). ``replayed``: that recorder (or
    ``capturing.BlockValues``, the blocks' boundaries alone), whose tensors are not computed by
    this run but go into ``capture_proto`` for the rounded replay, which reproduces the run
    (capturing.Recorder.replayed) and is cut at them: torch_xla compiles and executes the
    outputs' program alone, with no module tensor among its outputs (each made XLA's compile
    longer)."""
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm

    from torch_xla_ext._compat import hlo as _hlo
    from torch_xla_ext._compat import hlo_debug as _hlo_debug

    device = torch_xla.device() if device is None else device
    torch.manual_seed(seed)
    xm.set_rng_state(seed)
    t0 = time.perf_counter()
    with torch.no_grad():
        pairs: list = []
        model = prepare(fn, device, dtype, made=pairs)
        a, k = move(args, device, dtype), move(kwargs, device, dtype)
        with _hlo_debug.module_scopes(model if capture_hlo else None):  # module paths in the HLO
            out = run(stage, model, a, k)
    leaves = float_leaves(out, "fn")
    proto = graph_args = err = module_paths = capture_proto = capture_args = None
    if capture_hlo:
        # Before sync: afterwards the outputs are device data and the graph is gone.
        tensors = [t for _, t in leaves]
        try:
            proto, module_paths = _hlo_debug.split_metadata(_hlo.lowered_hlo_proto(tensors))
            graph_args = _graph_args(tensors, pairs, dtype)
            extra = replayed.device_values(device) if replayed is not None else []
            if extra:
                capture_proto, _ = _hlo_debug.split_metadata(_hlo.lowered_hlo_proto(tensors + extra))
                capture_args = _graph_args(tensors + extra, pairs, dtype)
            del extra
        except (RuntimeError, ValueError) as e:  # torch_xla's own error types
            err = str(HloCaptureError(f"torch_xla could not give the HLO of the XLA run: {type(e).__name__}: {e}"))
    if replayed is not None:
        replayed.release()  # its device tensors die here: the sync below runs the outputs' program
    if proto is not None and on_program is not None:
        on_program(proto, capture_proto)
    try:
        torch_xla.sync()
        outputs = [(p, t.cpu()) for p, t in leaves]
    except RuntimeError as e:  # torch_xla failed to execute the user's program
        raise UserFailure(stage, e) from e
    del pairs, model
    return XlaRun(outputs, proto, graph_args, err, time.perf_counter() - t0, module_paths, capture_proto, capture_args)


def _graph_args(tensors: list, pairs: list, dtype: Any) -> GraphArgs:
    """The arguments of the program of ``tensors`` (the device data it reads), in its order. The
    model's weights are made again for the replays from the user's model; copying them back now
    would hold a copy through torch_xla's compile and execution (the run's peak at real sizes).
    Anything else is copied now: the run may donate its buffer."""
    from torch_xla_ext._compat import hlo as _hlo

    origin = {_hlo.tensor_id(c): (c, o) for c, o in pairs}
    items = []
    for i, t in zip(_hlo.graph_input_ids(tensors), _hlo.graph_inputs(tensors)):
        c, o = origin.get(i, (None, None))
        same = c is not None and c.dtype == t.dtype and tuple(c.shape) == tuple(t.shape)
        items.append(_Recast(o, dtype) if same else to_numpy(t.cpu()))
    return GraphArgs(items)


_LIBC_TRIM: Any = None


@contextlib.contextmanager
def collector_skips_existing_objects() -> Iterator[None]:
    """While active, Python's garbage collector passes over every object that existed when it
    began (``gc.freeze``), torch_xla's among them (imported first, if it is not yet):
    :func:`release_freed_memory`'s collections then scan what was made since, not the whole
    process (half a million objects once torch, transformers and torch_xla are imported: 0.2 to
    0.3 s per collection, five in a verify). The garbage that existed before is collected first
    (one full collection), so none of it is kept; what lives is handed back to the collector
    when it ends; nothing made inside is ever frozen. Usable as a decorator."""
    import gc

    import torch_xla  # noqa: F401  (its objects are a third of the process's)

    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def release_freed_memory(collect: bool = True) -> None:
    """Collects garbage and hands freed heap pages back to the OS (glibc's ``malloc_trim``; a
    no-op elsewhere). Weights freed in pieces smaller than glibc's mmap threshold otherwise stay in
    the process's heap, and the next stage's buffers come on top of them. ``collect=False``: only
    the trim (cheap enough to run often; what was freed by reference counting)."""
    global _LIBC_TRIM
    import gc

    if collect:
        gc.collect()
    if _LIBC_TRIM is None:
        try:
            import ctypes

            _LIBC_TRIM = ctypes.CDLL(None).malloc_trim
        except (OSError, AttributeError):
            _LIBC_TRIM = False
    if _LIBC_TRIM:
        _LIBC_TRIM(0)


def to_numpy(t: Any) -> np.ndarray:
    """A CPU tensor as numpy; ml_dtypes' types (bfloat16, float8) bit for bit (the one conversion)."""
    return _dtypes.numpy_from_tensor(t)
