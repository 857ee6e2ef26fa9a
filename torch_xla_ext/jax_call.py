"""Call a JAX function on XLA tensors, needing only jax and jaxlib.

Same contract as ``torch_xla.core.xla_builder.call_jax`` (XLA tensors and any pytree in, XLA
tensors in the output pytree out), with JAX's real calling convention instead of
``keep_unused=True``: the function is lowered with ``keep_unused=False`` and only the tensors JAX
keeps (``kept_var_idx``) are passed, plus the constants JAX hoists into leading parameters when
``jax_use_simplified_jaxpr_constants`` is on. The leaf -> HLO parameter mapping is built and
checked against the HLO module in C++ (``cc/jax_call``), so a mismatch names the leaf path.

Example:
    >>> import jax.numpy as jnp, torch, torch_xla
    >>> from torch_xla_ext import jax_call
    >>> x = torch.ones(3, device="xla")
    >>> def f(a, unused, scale):
    ...     return {"y": jnp.sin(a) * scale}
    >>> out = jax_call.call_jax(f, (x, x, 2.0))      # `unused` is not an HLO parameter
    >>> [round(v, 4) for v in out["y"].cpu().tolist()]   # 2 sin(1)
    [1.6829, 1.6829, 1.6829]
    >>> print(jax_call.explain(f, (x, x, 2.0)))
    path     kind    kept  hlo_param  shape  dtype
    args[0]  tensor  yes   0          (3,)   float32
    args[1]  tensor  no    -          (3,)   float32
    args[2]  static  -     -          -      = 2.0
    HLO module 'jit_f': 1 parameters (0 hoisted constants, 1 kept leaves); outputs: f32[3]

Non-tensor leaves (Python scalars, strings, dtypes) are static: they are baked into the lowered
module and are part of the cache key, with the function's identity, the pytree structure, the
tensors' shapes and dtypes, and JAX's trace context (the config that changes lowering). A call
with a cached signature does not trace or lower again; ``cache_info()`` counts lowerings. As with
``jax.jit``, values the function closes over are baked in when it is first lowered, and a
function defined anew on every step is a new cache entry each time. The cache keeps the
``MAX_CACHED_SIGNATURES`` most recently used signatures (the oldest lowering goes first), and a
lowering never holds it: a call whose signature is cached runs while another thread lowers.

``install()`` routes torch_xla's own ``xla_builder.call_jax`` (and so ``shard_as``, the SPMD
backward of scan/XLAPatchedLinear, Pallas kernels) here; ``uninstall()`` restores it.
"""

from __future__ import annotations

from torch_xla_ext import _versions

_versions.require("jax_call")  # before anything here imports torch

import dataclasses
from typing import Any, Callable, NamedTuple

import jax
import numpy as np
import torch
from jax import export as _jax_export

from torch_xla_ext import _dtypes
from torch_xla_ext._cache import MakeOnceCache
from torch_xla_ext._compat import jax_trace as _jt
from torch_xla_ext._compat import xla_builder as _xb
from torch_xla_ext._ext import jax_call as _core
from torch_xla_ext.errors import ArgumentTypeError, InvalidArgumentError, TorchXlaExtError

__all__ = [
    "call_jax",
    "explain",
    "install",
    "uninstall",
    "is_installed",
    "cache_info",
    "clear_cache",
    "ParamMapping",
    "ParamRow",
    "HoistedConstant",
    "CacheInfo",
    "JaxCallError",
    "JaxCallArgumentError",
    "JaxCallTraceError",
    "JaxCallOutputError",
]


class JaxCallError(TorchXlaExtError):
    """Base of the errors raised by call_jax / explain. A mismatch between the lowered HLO module
    and the kept leaves is found in C++ and raised as :class:`~torch_xla_ext.errors.InvalidArgumentError`
    naming the leaf path."""


class JaxCallArgumentError(JaxCallError, ArgumentTypeError):
    """An input leaf call_jax cannot pass: a non-XLA tensor, an unsupported dtype, an array that is
    not a torch tensor, or an unhashable static value. The message starts with the leaf path."""


class JaxCallTraceError(JaxCallError, InvalidArgumentError):
    """The JAX function raised while being traced or lowered; the original exception is the
    __cause__ and the message names the function and the leaf signature."""


class JaxCallOutputError(JaxCallError, ArgumentTypeError):
    """The JAX function returned a leaf that is not an array (path given as ``output...``)."""


@dataclasses.dataclass(frozen=True)
class ParamRow:
    """One flattened input leaf. ``hlo_param`` is its HLO parameter index, or None when it is
    static or unused (``kept`` False). ``shape``/``dtype`` are None for static leaves."""

    path: str
    kind: str  # "tensor" or "static"
    kept: bool
    hlo_param: int | None
    shape: tuple[int, ...] | None
    dtype: str | None
    value: str | None = None  # static leaves: repr of the value


@dataclasses.dataclass(frozen=True)
class HoistedConstant:
    """A constant JAX hoisted into a leading HLO parameter (simplified jaxpr constants on)."""

    index: int
    hlo_param: int
    shape: tuple[int, ...]
    dtype: str


@dataclasses.dataclass(frozen=True)
class ParamMapping:
    """How call_jax maps a pytree's leaves to the parameters of the lowered HLO module."""

    module_name: str
    rows: tuple[ParamRow, ...]
    constants: tuple[HoistedConstant, ...]
    num_hlo_params: int
    outputs: tuple[str, ...]  # HLO types of the outputs, e.g. "f32[3,4]"
    table: str = dataclasses.field(repr=False, compare=False)

    def row(self, path: str) -> ParamRow:
        """The row of the leaf at ``path`` ("args[0]", "kwargs['scale']"); an
        InvalidArgumentError naming ``path`` and the leaves there are when it is not one."""
        for r in self.rows:
            if r.path == path:
                return r
        raise InvalidArgumentError(f"path: {path!r} is not a leaf of {self.module_name}'s arguments; its leaves are "
                                   f"{', '.join(r.path for r in self.rows) or 'none'}")

    def __str__(self) -> str:
        return self.table


class CacheInfo(NamedTuple):
    lowerings: int  # traces + lowerings done (cache misses)
    hits: int
    entries: int


# torch dtype -> JAX/numpy dtype name (names cc/jax_call understands): the one dtype table's rows
# this torch has (torch_xla_ext/_dtypes.py).
TORCH_TO_JAX = {_dtypes.torch_dtype(r.name): r.name for r in _dtypes.ROWS if _dtypes.torch_dtype(r.name) is not None}
JAX_TO_TORCH = {v: k for k, v in TORCH_TO_JAX.items()}

_STATIC_SCALARS = (bool, int, float, complex, str, bytes, np.generic, np.dtype, type(Ellipsis))


class _Entry:
    """One lowered signature: the computation and how to feed it."""

    __slots__ = ("name", "proto", "mapping", "sources", "out_treedef", "const_values", "const_tensors",
                 "computation", "leaf_paths")

    def __init__(self, name, proto, mapping, out_treedef, const_values, leaf_paths):
        self.name = name
        self.proto = proto
        self.mapping = mapping
        self.sources = tuple((src.kind, src.index) for src in mapping.sources)  # per HLO parameter
        self.out_treedef = out_treedef
        self.const_values = const_values
        self.const_tensors: dict[str, list[torch.Tensor]] = {}
        self.computation = None
        self.leaf_paths = leaf_paths


# Lowered signatures by (function identity, signature, name): JAX traces, lowers and exports
# outside the cache's lock, once per signature even when threads ask for it together.
MAX_CACHED_SIGNATURES = 256
_CACHE = MakeOnceCache(MAX_CACHED_SIGNATURES)


def _identity(fn: Any) -> Any:
    try:
        hash(fn)
        return fn  # functions hash by identity; bound methods by (self, function)
    except TypeError:
        return ("id", id(fn), fn)  # kept alive by the key, so the id cannot be reused


def _signature_key(leaves: list, treedef: Any) -> tuple:
    sig = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            sig.append((leaf.dtype, leaf.shape, leaf.device.type))
        elif isinstance(leaf, jax.ShapeDtypeStruct):
            sig.append(("abstract", leaf.dtype, leaf.shape))
        else:
            sig.append((type(leaf), leaf))
    return (treedef, tuple(sig), _jt.trace_context())


def _leaf_path(path: tuple) -> str:
    # (args, kwargs) is flattened as one tuple: name the root instead of "[0]" / "[1]".
    root = "args" if path[0].idx == 0 else "kwargs"
    return root + jax.tree_util.keystr(path[1:])


def _to_jax_static(path: str, leaf: Any) -> Any:
    if isinstance(leaf, torch.dtype):
        if leaf not in TORCH_TO_JAX:
            raise JaxCallArgumentError(f"{path}: torch dtype {leaf} has no JAX equivalent")
        return jax.numpy.dtype(TORCH_TO_JAX[leaf])
    if isinstance(leaf, (np.ndarray, jax.Array)):
        raise JaxCallArgumentError(
            f"{path}: a {type(leaf).__name__} is not a call_jax argument; pass an XLA tensor, or close "
            f"over the array in the function (it then becomes a constant)")
    try:
        hash(leaf)
    except TypeError:
        raise JaxCallArgumentError(
            f"{path}: static argument of type {type(leaf).__name__} is not hashable, so it cannot be "
            f"part of the cache key") from None
    return leaf


def _classify(args: tuple, kwargs: dict, require_xla: bool):
    """Leaves with their paths -> (cc leaf tuples, ShapeDtypeStructs, statics by position)."""
    with_path, _ = jax.tree_util.tree_flatten_with_path((args, kwargs))
    cc_leaves, specs, statics, paths = [], [], {}, []
    for i, (kp, leaf) in enumerate(with_path):
        path = _leaf_path(kp)
        paths.append(path)
        if isinstance(leaf, torch.Tensor):
            if require_xla and leaf.device.type != "xla":
                raise JaxCallArgumentError(
                    f"{path}: expected an XLA tensor, got a tensor on '{leaf.device}' "
                    f"(move it with .to('xla'))")
            dtype = TORCH_TO_JAX.get(leaf.dtype)
            if dtype is None:
                raise JaxCallArgumentError(f"{path}: dtype {leaf.dtype} is not supported by JAX")
            shape = tuple(leaf.shape)
        elif isinstance(leaf, jax.ShapeDtypeStruct):
            dtype, shape = np.dtype(leaf.dtype).name, tuple(leaf.shape)
        else:
            value = _to_jax_static(path, leaf)
            statics[i] = value
            cc_leaves.append((path, "static", "", [], repr(value)))
            continue
        specs.append(jax.ShapeDtypeStruct(shape, jax.numpy.dtype(dtype)))
        cc_leaves.append((path, "tensor", dtype, list(shape), ""))
    return cc_leaves, specs, statics, paths


def _is_output_leaf(x: Any) -> bool:
    return isinstance(x, (jax.Array, np.ndarray, np.generic, bool, int, float, complex))  # tracers are jax.Arrays


def _lower_kept(fn: Callable, specs: list, platform: str, *, keep_unused: bool):
    """Lowers ``fn`` for ``platform`` -> (Lowered, hoisted constant values, kept_var_idx).

    kept_var_idx is JAX's calling convention: indices into [hoisted constants..., tensor leaves...]
    of the module's parameters. The leaves' part comes from jax.export's public
    ``Exported.module_kept_var_idx`` (the same DCE as the jit lowering; the C++ mapping checks the
    two agree with the module); hoisted constants are always parameters and lead."""
    jitted = jax.jit(fn, keep_unused=keep_unused)
    # torch_xla's SPMD partitioner reads GSPMD sharding annotations, not Shardy's.
    with _xb.jax_env(), _jt.gspmd_partitioner():
        lowered = jitted.trace(*specs).lower(lowering_platforms=(platform,))
        exported = _jax_export.export(jitted, platforms=(platform,))(*specs)
    consts = _jt.hoisted_constants(lowered)
    kept = list(range(len(consts))) + [len(consts) + i for i in sorted(exported.module_kept_var_idx)]
    return lowered, consts, kept


def _lower(jax_fn: Callable, args: tuple, kwargs: dict, treedef: Any, name: str | None,
           require_xla: bool) -> _Entry:
    cc_leaves, specs, statics, paths = _classify(args, kwargs, require_xla)
    num_leaves = len(cc_leaves)
    out_tree: list[Any] = []
    out_paths: list[str] = []

    def flat_fn(*tensors):
        it = iter(tensors)
        flat = [statics[i] if i in statics else next(it) for i in range(num_leaves)]
        a, kw = jax.tree_util.tree_unflatten(treedef, flat)
        out = jax_fn(*a, **kw)
        out_with_path, out_def = jax.tree_util.tree_flatten_with_path(out)
        for kp, leaf in out_with_path:
            if not _is_output_leaf(leaf):
                raise JaxCallOutputError(
                    f"output{jax.tree_util.keystr(kp)}: the JAX function returned a "
                    f"{type(leaf).__name__}, not an array")
        out_tree.append(out_def)
        out_paths[:] = ["output" + jax.tree_util.keystr(kp) for kp, _ in out_with_path]
        return [leaf for _, leaf in out_with_path]

    fn_name = getattr(jax_fn, "__name__", type(jax_fn).__name__)
    flat_fn.__name__ = flat_fn.__qualname__ = fn_name if fn_name.isidentifier() else "jax_fn"
    _xb.init_runtime_before_jax()
    platform = _xb.lowering_platform()
    signature = ", ".join(f"{p}: {s.dtype}{list(s.shape)}" for p, s in
                          zip((l[0] for l in cc_leaves if l[1] == "tensor"), specs))
    try:
        lowered, const_values, kept = _lower_kept(flat_fn, specs, platform, keep_unused=False)
    except JaxCallError:
        raise
    except Exception as e:  # the user's function (or JAX on it) failed: name both, keep the cause
        raise JaxCallTraceError(
            f"{fn_name} raised {type(e).__name__} while being traced and lowered for {platform} with "
            f"({signature}): {e}") from e
    if not kept:
        # torch_xla's user computation needs at least one input: keep the first tensor leaf as an
        # (unread) parameter. Other leaves are unused, so zeros stand in for them while tracing.
        if not specs:
            raise JaxCallArgumentError(
                "args: call_jax needs at least one tensor leaf (torch_xla's user computation cannot "
                "take zero inputs)")

        def first_only(t0):
            return flat_fn(t0, *(jax.numpy.zeros(s.shape, s.dtype) for s in specs[1:]))

        first_only.__name__ = first_only.__qualname__ = flat_fn.__name__
        lowered, const_values, kept = _lower_kept(first_only, specs[:1], platform, keep_unused=True)
    proto = lowered.compiler_ir("hlo").as_serialized_hlo_module_proto()
    const_specs = [(c.dtype.name, list(c.shape)) for c in const_values]
    outputs = [(p, np.dtype(o.dtype).name, list(o.shape)) for p, o in zip(out_paths, lowered.out_info)]
    try:
        mapping = _core.build_param_mapping(cc_leaves, const_specs, kept, proto, outputs)
    except InvalidArgumentError as e:
        if not jax.config.jax_enable_x64 and any(l[2] in _dtypes.X64_ONLY for l in cc_leaves):
            e.add_note("jax_enable_x64 is off, so JAX lowers 64-bit leaves as 32-bit")
        raise
    label = name or f"jax_call::{fn_name}"
    if "::" not in label:
        label = "xla::" + label
    return _Entry(label, proto, mapping, out_tree[-1], const_values, tuple(paths))


def _get_entry(jax_fn: Callable, identity: Any, args: Any, kwargs: Any, name: str | None,
               require_xla: bool) -> tuple[_Entry, list]:
    if not callable(jax_fn):
        raise JaxCallArgumentError(f"jax_fn: expected a callable JAX function, got {type(jax_fn).__name__}")
    if not isinstance(args, (tuple, list)):
        raise JaxCallArgumentError(f"args: expected a tuple of arguments, got {type(args).__name__}")
    args = tuple(args)
    kwargs = {} if kwargs is None else kwargs
    if not isinstance(kwargs, dict):
        raise JaxCallArgumentError(f"kwargs: expected a dict of keyword arguments, got {type(kwargs).__name__}")
    leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
    key = (identity, _signature_key(leaves, treedef), name)
    try:
        hash(key)
    except TypeError:
        _classify(args, kwargs, require_xla)  # raises naming the unhashable leaf
        raise
    entry = _CACHE.get(key, lambda: _lower(jax_fn, args, kwargs, treedef, name, require_xla))
    return entry, leaves


def _constants_on(entry: _Entry, device: torch.device) -> list[torch.Tensor]:
    key = str(device)
    tensors = entry.const_tensors.get(key)
    if tensors is None:
        tensors = []
        for c in entry.const_values:
            tensors.append(_dtypes.tensor_from_numpy(c).to(device))
        entry.const_tensors[key] = tensors
    return tensors


def _run(entry: _Entry, leaves: list) -> Any:
    if entry.computation is None:
        entry.computation = _xb.computation_from_hlo_module_proto(entry.name, entry.proto)
    if entry.const_values:
        device = next((leaves[i].device for kind, i in entry.sources if kind == "leaf"), None) or _xb.default_device()
        consts = _constants_on(entry, device)
        inputs = [leaves[i] if kind == "leaf" else consts[i] for kind, i in entry.sources]
    else:
        inputs = [leaves[i] for _, i in entry.sources]
    outs = _xb.user_computation(entry.name, inputs, entry.computation)
    return jax.tree_util.tree_unflatten(entry.out_treedef, outs)


# Dynamo cannot trace JAX (its pytree and tracing code is C++); inside torch.compile the call is a
# graph break and runs as lazy-tensor code, which is what it is.
@torch.compiler.disable
def call_jax(jax_fn: Callable, args: tuple, kwargs: dict | None = None, *, name: str | None = None) -> Any:
    """Runs ``jax_fn(*args, **kwargs)`` as one node of torch_xla's lazy graph.

    Tensor leaves must be XLA tensors; other leaves are static. Returns the output pytree with
    XLA tensors for its array leaves. Only the tensors JAX keeps are passed to the computation.
    Under ``torch.compile`` the call is a graph break (Dynamo cannot trace JAX).

    Example:
        >>> import torch, torch_xla
        >>> x, w = torch.ones(2, 3, device="xla"), torch.eye(3, device="xla")
        >>> y = call_jax(lambda a, b: a @ b, (x, w))
        >>> y.device.type, y.cpu().tolist()
        ('xla', [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    """
    entry, leaves = _get_entry(jax_fn, _identity(jax_fn), args, kwargs, name, require_xla=True)
    return _run(entry, leaves)


def explain(jax_fn: Callable, args: tuple, kwargs: dict | None = None) -> ParamMapping:
    """The leaf -> HLO parameter mapping call_jax uses for this signature (lowering it if needed).

    Tensor leaves may be torch tensors on any device or ``jax.ShapeDtypeStruct``s.

    Example:
        >>> import torch
        >>> x = torch.ones(3)                       # any device: explain only lowers
        >>> m = explain(lambda a, b: a * 2, (x, x))
        >>> m.row("args[1]").kept, m.num_hlo_params
        (False, 1)
    """
    entry, _ = _get_entry(jax_fn, _identity(jax_fn), args, kwargs, None, require_xla=False)
    mp = entry.mapping
    rows = tuple(
        ParamRow(r.path, r.kind, r.kept, r.hlo_param,
                 tuple(r.shape) if r.kind == "tensor" else None,
                 r.dtype if r.kind == "tensor" else None,
                 r.value if r.kind == "static" else None)
        for r in mp.rows)
    constants = tuple(HoistedConstant(c.index, c.hlo_param, tuple(c.shape), c.dtype) for c in mp.constants)
    return ParamMapping(mp.module_name, rows, constants, mp.num_hlo_params,
                        tuple(str(t) for t in mp.results), mp.to_table())


def cache_info() -> CacheInfo:
    """Lowerings (cache misses), hits, and cached signatures across all functions."""
    made, hits, entries = _CACHE.info()
    return CacheInfo(made, hits, entries)


def _cached_signatures() -> int:
    return len(_CACHE)


def clear_cache() -> None:
    """Drops every cached lowering (the counters keep counting)."""
    _CACHE.clear()


def _installed_call_jax(jax_func, args, kwargs=None, name=None, override_hash=None):
    # torch_xla's signature: override_hash replaces the function's identity in the cache key.
    identity = ("override_hash", override_hash) if override_hash is not None else _identity(jax_func)
    entry, leaves = _get_entry(jax_func, identity, args, kwargs, name, require_xla=True)
    return _run(entry, leaves)


def install() -> None:
    """Routes torch_xla's ``xla_builder.call_jax`` (and modules that imported it by name) here, so
    torch_xla features built on it (``shard_as``, scan's SPMD backward, Pallas wrappers) work
    without flax/torchax. Opt-in; undo with :func:`uninstall`.

    Example:
        >>> import jax.numpy as jnp, torch, torch_xla
        >>> from torch_xla.core import xla_builder
        >>> install()                   # xs.shard_as and friends now take this path too
        >>> before = cache_info().lowerings
        >>> y = xla_builder.call_jax(jnp.cos, (torch.zeros(2, device="xla"),))   # no flax needed
        >>> y.cpu().tolist(), cache_info().lowerings - before
        ([1.0, 1.0], 1)
        >>> uninstall(); is_installed()
        False
    """
    _xb.install_call_jax(_installed_call_jax, _cached_signatures, clear_cache)


def uninstall() -> None:
    """Restores torch_xla's own ``call_jax`` everywhere :func:`install` replaced it."""
    _xb.uninstall_call_jax()


def is_installed() -> bool:
    return _xb.is_installed()
