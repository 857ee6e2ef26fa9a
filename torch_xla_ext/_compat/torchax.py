"""torchax (google/torchax; the pin is 0.0.13): the lowering of a torch.export program to JAX that
``torchax.export.exported_program_to_stablehlo`` does, the axis its c10d collectives reduce over,
and JAX's x64 mode around them. The one place that knows torchax's APIs and their quirks;
everything else works from the plain data here.

What differs from ``exported_program_to_stablehlo`` (and why):

- the state is bound by the program's own ``input_specs`` order. torchax 0.0.13 binds parameters,
  then buffers, then lifted constants, but torch 2.9's decomposed programs put lifted constants
  before buffers (transformers' BERT and CLIP), so its export reads the wrong tensors there;
- buffer and user-input mutations are listed, not silently dropped (torchax keeps only the user
  outputs, as torch_xla's exporter does);
- the lowering runs with JAX's x64 mode on, so int64 and float64 stay what torch says (with it off
  JAX computes them as int32 and float32);
- the ``"torch_dist"`` axis of torchax's c10d collectives is bound (a ``shard_map`` over an abstract
  mesh of ``num_replicas``), where ``jax.export`` of torchax's own function fails on the unbound axis;
- a node torchax cannot lower is named (``NodeFailure``), not an ``AssertionError`` of its target.

Importing this module imports nothing of torch, JAX or torchax.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable, Iterator

import numpy as np

from torch_xla_ext import _dtypes
from torch_xla_ext.errors import UnimplementedError

AXIS = "torch_dist"  # torchax's c10d collectives reduce over this axis name (torchax/ops/jc10d.py)
C10D_NAMESPACE = "_c10d_functional"
# The reduce names torchax's all_reduce lowering takes, and the JAX collective each becomes.
C10D_REDUCES = {"sum": "psum", "avg": "pmean", "min": "pmin", "max": "pmax"}


class NodeFailure(Exception):
    """torchax could not lower one node of the program: ``node`` (the torch.fx node) and ``cause``
    (torchax's or JAX's exception; None for an op without a lowering)."""

    def __init__(self, node: Any, cause: BaseException | None, why: str):
        super().__init__(why)
        self.node = node
        self.cause = cause
        self.why = why  # (torch.fx's interpreter appends the node and its traceback to args)


@dataclasses.dataclass
class State:
    """One non-user input of the program, in its ``input_specs`` order: kind ("parameter",
    "buffer", "constant"), its state-dict or constant name, its value."""

    kind: str
    name: str
    value: np.ndarray


@dataclasses.dataclass
class Lowered:
    """torchax's lowering of a program, as plain data.

    text: the StableHLO module (``jax.export``'s ``mlir_module()``, with debug locations). Its `main` takes the kept
    arguments of ``states + user inputs`` (``kept``: jax.export's ``module_kept_var_idx``) and
    returns the user outputs. ``user_avals``: (shape, dtype name) of every user input in
    position order; ``outputs``: (shape, dtype name) of every result. ``mutations``: (kind,
    name) of each in-place write the program does not return ("buffer" or "user_input").
    ``diverged``: (node, what) of each node whose JAX value has another dtype or shape than
    torch.export's value of it, in program order (torchax 0.0.13's ``cumsum`` of int32 stays
    int32, where torch's is int64).
    """

    text: str
    states: list[State]
    user_avals: list[tuple[list[int], str]]
    kept: list[int]
    outputs: list[tuple[list[int], str]]
    mutations: list[tuple[str, str]]
    diverged: list[tuple[Any, str]] = dataclasses.field(default_factory=list)


_KINDS = {"PARAMETER": "parameter", "BUFFER": "buffer", "CONSTANT_TENSOR": "constant"}


def decompose(exported_program: Any) -> Any:
    """The program after torch.export's default decompositions and then torchax's own table, as
    ``torchax.export.exported_program_to_jax`` decomposes it before lowering."""
    from torchax import decompositions

    return exported_program.run_decompositions().run_decompositions(decompositions.DECOMPOSITIONS)


def has_lowering(target: Any) -> bool:
    """Whether torchax has a JAX lowering of an aten (or c10d) op: its registry by overload or by
    overload packet, as ``torchax.export.JaxInterpreter`` looks it up."""
    import torchax
    from torchax.ops import ops_registry

    torchax.default_env()  # loads every op module (jaten, jtorch, jc10d) into the registry
    op = ops_registry.all_aten_ops.get(target)
    if op is None and hasattr(target, "overloadpacket"):
        op = ops_registry.all_aten_ops.get(target.overloadpacket)
    return op is not None and op.is_jax_function


def is_aten_op(target: Any) -> bool:
    """Whether an fx node's target is an op overload (what torchax's interpreter lowers through
    its registry; anything else, ``operator.getitem``, runs as Python)."""
    import torch

    return isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket))


def c10d_op(target: Any) -> str | None:
    """"all_reduce" for ``torch.ops._c10d_functional.all_reduce.default`` (any c10d functional
    collective's name), None for any other target."""
    name = getattr(target, "name", None)
    text = name() if callable(name) else str(target)
    prefix = C10D_NAMESPACE + "::"
    if not text.startswith(prefix):
        return None
    return text[len(prefix):].split(".", 1)[0]


@contextlib.contextmanager
def x64() -> Iterator[None]:
    """JAX's x64 mode on, for this thread, restored after: ``jax.enable_x64`` (JAX 0.8 and
    later), ``jax.experimental.enable_x64`` before."""
    import jax

    scoped = getattr(jax, "enable_x64", None)
    if scoped is not None:
        with scoped(True):
            yield
        return
    import jax.experimental

    with jax.experimental.enable_x64():
        yield


def _bind_axis(fn: Callable, num_replicas: int) -> Callable:
    """``fn`` with torchax's collective axis bound: a shard_map over an abstract mesh of
    ``num_replicas`` along AXIS, every argument and result replicated (no device is needed to
    trace it). jax.export of torchax's function alone fails on the unbound axis."""
    import jax
    from jax.sharding import AbstractMesh, PartitionSpec

    mesh = AbstractMesh((num_replicas,), (AXIS,))
    shard_map = getattr(jax, "shard_map", None)
    if shard_map is not None:  # JAX 0.7 and later
        return shard_map(fn, mesh=mesh, in_specs=PartitionSpec(), out_specs=PartitionSpec(), check_vma=False)
    from jax.experimental.shard_map import shard_map as experimental

    return experimental(fn, mesh=mesh, in_specs=PartitionSpec(), out_specs=PartitionSpec(), check_rep=False)


def _interpreter(graph_module: Any, diverged: list) -> Any:
    """torchax's fx interpreter over ``graph_module`` that says which node failed, and appends to
    ``diverged`` (node, what) for each node whose JAX result has another dtype or shape than
    torch.export's own value of it (``node.meta["val"]``)."""
    from torchax import export as torchax_export

    class Interpreter(torchax_export.JaxInterpreter):
        def run_node(self, n: Any) -> Any:
            if n.op == "call_function" and is_aten_op(n.target) and not has_lowering(n.target):
                raise NodeFailure(n, None, f"torchax has no JAX lowering of {n.target}")
            try:
                result = super().run_node(n)
            except NodeFailure:
                raise
            except Exception as e:  # noqa: BLE001 - torchax's or JAX's error, named with the node that raised it
                raise NodeFailure(n, e, f"torchax's lowering of {n.target} failed") from e
            if n.op == "call_function":
                what = _divergence(n.meta.get("val"), result)
                if what:
                    diverged.append((n, what))
            return result

    return Interpreter(graph_module)


def _divergence(val: Any, result: Any) -> str | None:
    """"float32 where torch has float64" when a JAX result differs from torch.export's value of
    the node in dtype or shape; None when they agree (or either is not one tensor)."""
    import torch

    if not isinstance(val, torch.Tensor) or not hasattr(result, "dtype") or not hasattr(result, "shape"):
        return None
    row = _dtypes.from_torch(val.dtype)
    want = _dtypes.numpy_dtype(row.name) if row is not None else None
    if want is not None and np.dtype(result.dtype) != want:
        return f"{_dtypes.name_of(np.dtype(result.dtype))} where torch has {row.name}"
    if all(isinstance(d, int) for d in val.shape) and tuple(result.shape) != tuple(val.shape):
        return f"shape {list(result.shape)} where torch has {list(val.shape)}"
    return None


def lower(program: Any, *, num_replicas: int = 1, collectives: bool = False) -> Lowered:
    """torchax's lowering of a decomposed torch.export program (:func:`decompose`) as a
    ``jax.export`` module for the CPU, traced with x64 on. With ``collectives`` (the program
    calls c10d functional collectives), the "torch_dist" axis is bound with ``num_replicas``
    along it. Raises NodeFailure naming the node torchax cannot lower."""
    import jax
    import jax.export  # a submodule `import jax` does not load in 0.7.1
    import torchax
    from torch.export.graph_signature import InputKind, OutputKind
    from torchax import export as torchax_export

    torchax.default_env()  # torchax's op registry, c10d collectives included
    sig = program.graph_signature
    specs = list(sig.input_specs)
    states: list[State] = []
    for spec in specs:
        if spec.kind == InputKind.USER_INPUT:
            continue
        kind = _KINDS.get(spec.kind.name)
        if kind is None:  # a token or a script object: no tensor to bind
            raise UnimplementedError(f"the program takes a {spec.kind.name} input ({spec.target}), which torchax "
                                     f"cannot bind")
        value = program.state_dict[spec.target] if spec.target in program.state_dict else program.constants[spec.target]
        states.append(State(kind, spec.target, _dtypes.numpy_from_tensor(value.detach())))
    is_user = [spec.kind == InputKind.USER_INPUT for spec in specs]
    returned = [k for k, spec in enumerate(sig.output_specs) if spec.kind in (OutputKind.USER_OUTPUT, OutputKind.LOSS_OUTPUT)]
    mutations = [("buffer" if spec.kind == OutputKind.BUFFER_MUTATION else "user_input", spec.target)
                 for spec in sig.output_specs
                 if spec.kind in (OutputKind.BUFFER_MUTATION, OutputKind.USER_INPUT_MUTATION)]
    graph_module = program.graph_module

    diverged: list = []

    def func(state_values: list, user_values: list) -> list:
        s, u = iter(state_values), iter(user_values)
        flat = [next(u) if user else next(s) for user in is_user]
        results = _interpreter(graph_module, diverged).run(*flat, enable_io_processing=False)
        return [results[k] for k in returned]

    fn = _bind_axis(func, num_replicas) if collectives else func
    with x64():
        user_avals = torchax_export.extract_avals(program)
        state_avals = [jax.ShapeDtypeStruct(s.value.shape, s.value.dtype) for s in states]
        exported = jax.export.export(jax.jit(fn), platforms=("cpu",))(state_avals, user_avals)
    return Lowered(
        text=exported.mlir_module(), states=states,
        user_avals=[(list(a.shape), _dtypes.name_of(np.dtype(a.dtype))) for a in user_avals],
        kept=sorted(exported.module_kept_var_idx),
        outputs=[(list(a.shape), _dtypes.name_of(np.dtype(a.dtype))) for a in exported.out_avals],
        mutations=mutations, diverged=diverged)


def version_problem() -> str | None:
    """None when the ``torchax`` package Python imports is the installed torchax distribution's
    own, else what differs: torch_xla's wheel ships its own older ``torchax/`` (0.0.6-era files)
    and installs it over the distribution's, leaving torchax's metadata saying another version."""
    import importlib.metadata

    from torch_xla_ext._compat import torchax_import

    torchax_import.install()
    import torchax

    try:
        installed = importlib.metadata.version("torchax")
    except importlib.metadata.PackageNotFoundError:
        return None
    imported = str(getattr(torchax, "__version__", ""))
    if imported == installed:
        return None
    return (f"the torchax Python imports is {imported or 'unversioned'} ({torchax.__file__}), not the installed "
            f"torchax {installed}: another package's copy (torch_xla's wheel ships one) was written over its files")
