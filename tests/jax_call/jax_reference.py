"""Runs a call_jax function in JAX itself (jaxlib's CPU client), the reference for the tests."""

import jax
import numpy as np
import torch


def to_numpy(t: torch.Tensor) -> np.ndarray:
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.view(torch.uint16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def run_in_jax(fn, args, kwargs=None):
    """fn(*args, **kwargs) under jax.jit with torch tensors as JAX arrays and every other leaf
    static (closed over), as call_jax treats them."""
    kwargs = kwargs or {}
    leaves, treedef = jax.tree_util.tree_flatten((tuple(args), kwargs))
    is_tensor = [isinstance(leaf, torch.Tensor) for leaf in leaves]
    arrays = [jax.numpy.asarray(to_numpy(leaf)) for leaf, t in zip(leaves, is_tensor) if t]

    def flat(*tensors):
        it = iter(tensors)
        flat_leaves = [next(it) if t else leaf for leaf, t in zip(leaves, is_tensor)]
        a, kw = jax.tree_util.tree_unflatten(treedef, flat_leaves)
        return fn(*a, **kw)

    return jax.jit(flat)(*arrays)


def assert_bit_equal(ours, reference):
    """Every array leaf of `ours` (torch tensors) equals `reference` (JAX arrays) bit for bit,
    with the same pytree structure."""
    ours_leaves, ours_def = jax.tree_util.tree_flatten(ours)
    ref_leaves, ref_def = jax.tree_util.tree_flatten(reference)
    assert ours_def == ref_def, (ours_def, ref_def)
    for i, (o, r) in enumerate(zip(ours_leaves, ref_leaves)):
        o = to_numpy(o)
        r = np.asarray(r)
        assert o.dtype == r.dtype, (i, o.dtype, r.dtype)
        assert o.shape == r.shape, (i, o.shape, r.shape)
        np.testing.assert_array_equal(o.view(f"u{o.dtype.itemsize}") if o.dtype.kind == "f" or o.dtype.name == "bfloat16" else o,
                                      r.view(f"u{r.dtype.itemsize}") if r.dtype.kind == "f" or r.dtype.name == "bfloat16" else r,
                                      err_msg=f"output leaf {i}")
