"""jax_call's cache of lowered signatures: bounded (the least recently used lowering goes first)
and never held while JAX traces and lowers, so a call whose signature is cached runs while another
thread lowers; ``ParamMapping.row`` of a path that is no leaf is a typed error naming it. Oracles:
``cache_info()``'s lowering count (JAX traced again or not) and real threads."""

import threading

import jax.numpy as jnp
import pytest
import torch

from torch_xla_ext import _cache, jax_call
from torch_xla_ext.errors import InvalidArgumentError

x = torch.ones(3)  # explain lowers for any device


def test_a_slow_lowering_does_not_block_a_cached_call():
    def fast(a):
        return a + 1.0

    jax_call.explain(fast, (x,))  # cached
    tracing, release = threading.Event(), threading.Event()

    def slow(a):
        tracing.set()
        assert release.wait(60), "the test never released the lowering"
        return a * 2.0

    lowering = threading.Thread(target=jax_call.explain, args=(slow, (x,)))
    lowering.start()
    try:
        assert tracing.wait(60)
        done = threading.Event()
        cached = threading.Thread(target=lambda: (jax_call.explain(fast, (x,)), done.set()))
        cached.start()
        # the cached signature answers while slow's lowering is still inside JAX's trace
        assert done.wait(30), "a cached call waited for another function's lowering"
        assert lowering.is_alive()
    finally:
        release.set()
        lowering.join(60)
    assert not lowering.is_alive()


def test_two_threads_lower_one_signature_once():
    started, release = threading.Event(), threading.Event()
    traced = []

    def f(a):
        traced.append(1)
        started.set()
        release.wait(60)
        return a - 1.0

    before = jax_call.cache_info().lowerings
    threads = [threading.Thread(target=jax_call.explain, args=(f, (x,))) for _ in range(2)]
    for t in threads:
        t.start()
    assert started.wait(60)
    release.set()
    for t in threads:
        t.join(60)
    assert len(traced) == 1 and jax_call.cache_info().lowerings - before == 1


def test_the_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(jax_call, "_CACHE", _cache.MakeOnceCache(3))
    fns = [lambda a, k=k: a * k for k in range(5)]
    for f in fns:
        jax_call.explain(f, (x,))
    info = jax_call.cache_info()
    assert (info.lowerings, info.entries) == (5, 3)
    jax_call.explain(fns[-1], (x,))  # still cached
    jax_call.explain(fns[0], (x,))   # went first: lowered again
    assert jax_call.cache_info().lowerings == 6
    assert jax_call.MAX_CACHED_SIGNATURES >= 64  # the default keeps a training loop's signatures


def test_row_of_a_path_that_is_no_leaf_names_it():
    m = jax_call.explain(lambda a, b: a * jnp.float32(2), (x, x))
    assert m.row("args[1]").kept is False
    with pytest.raises(InvalidArgumentError, match=r"path: 'args\[5\]' is not a leaf of .*; its leaves are "
                                                   r"args\[0\], args\[1\]"):
        m.row("args[5]")
