"""The model as a torch.export program, for every exporter: the user inputs' argument names,
keyword inputs flattened positionally (one program order for both frontends: torch_xla's exporter
takes no kwargs), a given ExportedProgram's own example inputs, the state's kinds by name and the
outputs' names by pytree path.

Example:
    >>> import torch
    >>> class Masked(torch.nn.Module):
    ...     def forward(self, input_ids, attention_mask=None):
    ...         return input_ids * attention_mask
    >>> model, args, kwargs, names = arguments(Masked(), (torch.ones(2, 3),), {"attention_mask": torch.ones(2, 3)})
    >>> names
    ['input_ids', 'attention_mask']
    >>> ep, prefix = trace(model, args, kwargs, strict=False)
    >>> prefix, [s.arg.name for s in ep.graph_signature.input_specs]
    ('inner.', ['flat_0', 'flat_1'])
"""

from __future__ import annotations

import inspect
from typing import Any, Sequence

from torch_xla_ext.errors import ArgumentTypeError, UnimplementedError
from torch_xla_ext.export.errors import ExportLoweringError
from torch_xla_ext.export.leaves import leaf_paths
from torch_xla_ext.export.manifest import torch_dtype_name

__all__ = ["KEYWORDS_PREFIX", "arguments", "check_outputs", "given_program", "output_names", "state_kinds",
           "strip_prefix", "trace"]

# The state of a model traced with keyword inputs is named under the wrapper's "inner" submodule.
KEYWORDS_PREFIX = "inner."


def arguments(model: Any, args: Any, kwargs: Any) -> tuple[Any, tuple, dict, list[str]]:
    """(model, args, kwargs, argument names) checked: args a tuple or list, kwargs a dict or None;
    ArgumentTypeError naming the argument otherwise."""
    if not isinstance(args, (tuple, list)):
        raise ArgumentTypeError(f"args: expected a tuple of example inputs, got {type(args).__name__}")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise ArgumentTypeError(f"kwargs: expected a dict of keyword inputs, got {type(kwargs).__name__}")
    kwargs = dict(kwargs or {})
    return model, tuple(args), kwargs, argument_names(model, len(args), list(kwargs))


def trace(model: Any, args: tuple, kwargs: dict, *, strict: bool) -> tuple[Any, str]:
    """(torch.export's program of ``model(*args, **kwargs)``, the prefix of its state's names).
    Keyword inputs are passed positionally after ``args`` through a wrapper module (so `run`
    takes every user input in one order), whose submodule puts KEYWORDS_PREFIX before the
    model's state names. torch.export's own errors propagate."""
    import torch

    target, flat_args, prefix = model, tuple(args), ""
    if kwargs:
        target, flat_args = _Positional(model, len(args), list(kwargs)), tuple(args) + tuple(kwargs.values())
        prefix = KEYWORDS_PREFIX
    return torch.export.export(target, flat_args, strict=strict), prefix


def given_program(ep: Any, args: Any, kwargs: Any) -> tuple[Any, tuple, dict]:
    """(program, args, kwargs) of a given ExportedProgram: exporters trace it with its own example
    inputs (others would not match)."""
    if args is not None or kwargs is not None:
        raise ArgumentTypeError("args, kwargs: an ExportedProgram is exported with its own example inputs; "
                                "pass none")
    if ep.example_inputs is None:
        raise ArgumentTypeError("model: an ExportedProgram without example inputs (the exporters need them)")
    args, kwargs = tuple(ep.example_inputs[0]), dict(ep.example_inputs[1])
    if kwargs:
        raise UnimplementedError(f"model: an ExportedProgram with keyword inputs ({', '.join(kwargs)}); "
                                 f"torch_xla's exporter takes positional inputs only (pass the nn.Module "
                                 f"and kwargs instead)")
    return ep, args, kwargs


def state_kinds(ep: Any, prefix: str = "") -> dict[str, str]:
    """{state name: "parameter" | "buffer" | "constant"} from torch.export's graph signature, the
    names without ``prefix``."""
    sig = ep.graph_signature
    kinds: dict[str, str] = {}
    for targets, kind in ((sig.inputs_to_parameters, "parameter"), (sig.inputs_to_buffers, "buffer"),
                          (sig.inputs_to_lifted_tensor_constants, "constant")):
        for t in targets.values():
            kinds[strip_prefix(t, prefix)] = kind
    return kinds


def strip_prefix(name: str, prefix: str) -> str:
    return name[len(prefix):] if prefix and name.startswith(prefix) else name


def output_names(ep: Any) -> list[str] | None:
    """"output" plus each output leaf's pytree path in the model's return value, or None when
    torch.export recorded no output spec."""
    return ["output" + p for p in leaf_paths(ep.call_spec.out_spec)] if ep.call_spec.out_spec else None


def check_outputs(ep: Any, output_signature: list[tuple[list[int], str]], out_names: list[str] | None,
                        lowering: str) -> None:
    """Every output of the lowered program (``output_signature``: (shape, dtype) per result) has
    the shape and dtype torch.export's program gives it; a lowering that changes one computes
    something else, and is refused (ExportLoweringError naming the output) rather than saved.
    ``lowering`` names whose lowering it is ("torch_xla's")."""
    import torch
    from torch.export.graph_signature import OutputKind

    out_node = next(n for n in reversed(ep.graph.nodes) if n.op == "output")
    specs = ep.graph_signature.output_specs
    values = [v for v, spec in zip(out_node.args[0], specs) if spec.kind == OutputKind.USER_OUTPUT]
    expected = [v.meta.get("val") for v in values if isinstance(v, torch.fx.Node)]
    if len(expected) != len(output_signature):
        return  # non-tensor leaves in the return value: no reliable pairing
    for k, (val, (shape, dtype)) in enumerate(zip(expected, output_signature)):
        if not isinstance(val, torch.Tensor) or not all(isinstance(d, int) for d in val.shape):
            continue
        name = out_names[k] if out_names else f"output {k}"
        if list(val.shape) != list(shape):
            raise ExportLoweringError(
                f"{name}: {lowering} lowering gives shape {list(shape)} where torch.export's program has "
                f"{list(val.shape)}; the exported program would compute something else, so it is not saved "
                f"(an op of this output that {lowering} lowering gets wrong)")
        want = torch_dtype_name(str(val.dtype))
        if torch_dtype_name(dtype) != want:
            raise ExportLoweringError(
                f"{name}: {lowering} lowering gives dtype {torch_dtype_name(dtype)} where torch.export's program has "
                f"{want}; the exported program would compute something else, so it is not saved (an op of this "
                f"output that {lowering} lowering computes in another dtype)")


def argument_names(model: Any, num_args: int, kwarg_names: list[str]) -> list[str]:
    """The name of each positional argument (the forward signature's, else "args[i]"), then the
    keywords."""
    try:
        fn = model.forward if hasattr(model, "forward") else model
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):  # builtins and C callables have no signature
        params = []
    names = [params[i].name if i < len(params) else f"args[{i}]" for i in range(num_args)]
    return names + list(kwarg_names)


def _positional_module() -> Any:
    import torch

    class Positional(torch.nn.Module):
        """`inner(*args, **kwargs)` called with (args, kwargs) flattened positionally."""

        def __init__(self, inner: Any, num_args: int, kwarg_names: list[str]):
            super().__init__()
            self.inner = inner
            self.num_args = num_args
            self.kwarg_names = kwarg_names

        def forward(self, *flat: Any) -> Any:
            n = self.num_args
            return self.inner(*flat[:n], **dict(zip(self.kwarg_names, flat[n:])))

    return Positional


def _Positional(inner: Any, num_args: int, kwarg_names: Sequence[str]) -> Any:  # noqa: N802 - a class made lazily (torch import)
    return _positional_module()(inner, num_args, list(kwarg_names))
