"""The export checks every zoo model goes through (tests/export/zoo_*_test.py pick the models, so
Bazel can run the groups in parallel). One export, save, load and run per model (a module-scoped
fixture), checked against independent oracles:

- torch_xla's execution of the same export (StableHLOGraphModule) for `run` and for `to_jax`
  after a save/load round trip (jax.export's format + safetensors): within the summation-order
  bound of bounds.py (ORDER_TOLERANCE), with bit-equality reported as a figure;
- torch.export's own graph signature of the model (a separate torch.export.export with the
  keyword inputs as keywords) for what each argument of `main` is, by name;
- the eager model's output flattened by torch.utils._pytree for the outputs' names, order,
  shapes and dtypes (and its values, within float32 tolerance: eager CPU is another compiler);
- the model's own int64 buffers, for int64 values surviving save and load unnarrowed.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import numpy as np
import torch
import torch.utils._pytree as pytree

from tests.export import bounds
from tests import zoo
from torch_xla_ext import export
from torch_xla_ext._compat import stablehlo as compat

@dataclasses.dataclass
class Case:
    name: str
    model: Any
    args: tuple
    kwargs: dict
    bundle: export.Bundle
    loaded: export.Bundle
    leaves: list            # the user inputs as run() takes them (numpy)
    ours: list[np.ndarray]
    theirs: list[np.ndarray]


def build_case(name: str, tmp_dir: str) -> Case:
    model, args, kwargs = zoo.build(name)
    bundle = export.export(model, args, kwargs)
    path = os.path.join(tmp_dir, name)
    bundle.save(path)
    loaded = export.load(path)
    torch_leaves = pytree.tree_leaves((args, kwargs))
    leaves = [t.numpy() for t in torch_leaves]
    ours = export.run(loaded, *leaves)
    theirs = compat.run_with_torch_xla(bundle.torch_xla_export.graph_module, *torch_leaves)
    return Case(name, model, args, kwargs, bundle, loaded, leaves, ours, theirs)


def assert_within_bound(name: str, got: list, want: list, what: str) -> dict:
    """The summation-order bound of bounds.py (bit-equality is a reported figure)."""
    return bounds.assert_same_program(got, want, what, label=name)


def check_run(case: Case) -> None:
    assert_within_bound(case.name, case.ours, case.theirs, "run vs torch_xla")


def _eager_named_leaves(output: Any, prefix: str = "output") -> list[tuple[str, torch.Tensor]]:
    """(name, tensor) of every tensor in a model's return value, walking ModelOutputs and dicts by
    key and tuples by index, in the order torch.utils._pytree flattens them."""
    if isinstance(output, torch.Tensor):
        return [(prefix, output)]
    if isinstance(output, dict):  # transformers' ModelOutput is an OrderedDict of its set fields
        return [leaf for k, v in output.items() for leaf in _eager_named_leaves(v, f"{prefix}[{k!r}]")]
    if isinstance(output, (tuple, list)):
        return [leaf for i, v in enumerate(output) for leaf in _eager_named_leaves(v, f"{prefix}[{i}]")]
    return []


def check_outputs_named_like_pytree(case: Case) -> None:
    with torch.no_grad():
        eager = case.model(*case.args, **case.kwargs)
    named = _eager_named_leaves(eager)
    # the order is torch.utils._pytree's, the names are the paths to each tensor
    assert [t.shape for _, t in named] == [t.shape for t in pytree.tree_leaves(eager)]
    assert case.loaded.manifest.output_names == [n for n, _ in named]
    for (name, t), o, meta in zip(named, case.ours, case.loaded.manifest.outputs):
        assert list(o.shape) == list(t.shape) == meta["shape"], name
        assert str(o.dtype) == str(t.dtype).replace("torch.", "") == meta["dtype"], name
        # eager CPU PyTorch is another compiler: close, not equal
        np.testing.assert_allclose(o, t.numpy(), rtol=2e-4, atol=2e-4, err_msg=name)


def check_roles_against_graph_signature(case: Case) -> None:
    ep = torch.export.export(case.model, case.args, case.kwargs)
    sig = ep.graph_signature
    params = set(sig.inputs_to_parameters.values())
    buffers = set(sig.inputs_to_buffers.values())
    constants = set(sig.inputs_to_lifted_tensor_constants.values())
    m = case.loaded.manifest
    by_kind: dict[str, set] = {}
    for i in m.inputs:
        by_kind.setdefault(i.kind, set()).add(i.name)
    assert by_kind.get("parameter", set()) <= params, by_kind.get("parameter", set()) - params
    assert by_kind.get("buffer", set()) <= buffers, by_kind.get("buffer", set()) - buffers
    # a constant is a lifted tensor constant (by name) or a scalar torch_xla lifted itself (no name)
    assert {n for n in by_kind.get("constant", set()) if n is not None} <= constants
    # every parameter the program reads is an argument of main (torch_xla drops the unread ones)
    assert by_kind.get("parameter", set()) == params - _unread(ep, sig.inputs_to_parameters)
    assert "collective_token" not in by_kind
    # user inputs: named by argument (keywords by keyword), every one used, in position order
    user = m.user_inputs()
    want = [spec.arg.name for spec in sig.input_specs if spec.kind == torch.export.graph_signature.InputKind.USER_INPUT]
    assert [u["name"] for u in user] == want == [_first_param(case.model)] + list(case.kwargs)
    assert all(u["used"] for u in user)
    for u, leaf in zip(user, case.leaves):
        assert u["shape"] == list(leaf.shape) and u["dtype"] == str(leaf.dtype), u["name"]


def _first_param(model) -> str:
    import inspect

    return next(iter(inspect.signature(model.forward).parameters))


def _unread(ep, inputs_to: dict[str, str]) -> set[str]:
    """State entries whose placeholder no node of torch.export's graph reads."""
    return {target for node in ep.graph.nodes if node.op == "placeholder" and not node.users
            for placeholder, target in inputs_to.items() if placeholder == node.name}


def check_int64_kept(case: Case) -> None:
    m = case.loaded.manifest
    names = {u["name"]: u["dtype"] for u in m.user_inputs()}
    for key in zoo.MODELS[case.name].int_inputs:
        assert names[key] == "int64", key
    for i in m.inputs:
        if i.kind == "buffer" and i.dtype == "int64":  # e.g. position_ids: exact after save/load
            want = dict(case.model.named_buffers())[i.name].numpy()
            got = case.loaded.arrays[i.file]
            assert got.dtype == np.int64
            np.testing.assert_array_equal(got, want)


def check_to_jax_round_trip(case: Case, tmp_dir: str) -> None:
    import jax
    import jax.export

    exp = export.to_jax(case.loaded)
    # No weight is in the program: the module is smaller than the weights it is bound to.
    assert len(exp.exported.mlir_module_serialized) < max(1, sum(w.nbytes for w in exp.weights)) or not exp.weights
    path = os.path.join(tmp_dir, f"{case.name}.jax")
    exp.save(path)
    again = export.load_jax(path)
    user = [a.dtype for a in again.in_avals]
    assert user == [leaf.dtype for leaf in case.leaves]  # int64 kept
    with jax.experimental.enable_x64():  # int64 token ids need x64, as for any JAX function
        got = jax.jit(again.exported.call)(*again.weights, *case.leaves)
    assert_within_bound(case.name, [np.asarray(g) for g in got], case.theirs, "to_jax vs torch_xla")
    assert not jax.config.jax_enable_x64  # the context restored the user's setting


def check_inline_round_trip(case: Case, tmp_dir: str) -> None:
    """Every weight inlined (inline_constants), saved, loaded and run: the text holds no value,
    the values come back bit-exact, and the program still computes what torch_xla's does."""
    lean = export.inline_constants(export.strip_tokens(case.loaded), weights=True)
    assert [i.kind for i in lean.manifest.inputs] == ["user_input"] * len(lean.manifest.inputs)
    weight_bytes = sum(a.nbytes for a in case.loaded.arrays.values())
    assert sum(a.nbytes for a in lean.resources.values()) <= weight_bytes  # equal values share one
    assert len(lean.module_text) < len(case.loaded.module_text) + 200 * (len(case.loaded.manifest.inputs) + 10)
    path = os.path.join(tmp_dir, f"{case.name}.inlined")
    lean.save(path)
    again = export.load(path)
    for name, arr in lean.resources.items():
        np.testing.assert_array_equal(again.resources[name], arr, err_msg=f"{case.name} {name}")
    assert_within_bound(case.name, export.run(again, *case.leaves), case.theirs, "inline_constants vs torch_xla")
