"""The one bounded cache of slow-to-make entries (torch_xla_ext/_cache.py, behind jax_call's
lowerings and export.run's executables): least recently used out first, made once per key even
when threads ask together, made outside the lock, and a failed make neither kept nor hidden."""

import threading

import pytest

from torch_xla_ext._cache import CacheStats, MakeOnceCache


def test_least_recently_used_goes_first():
    c = MakeOnceCache(2)
    c.get("a", lambda: 1)
    c.get("b", lambda: 2)
    c.get("a", lambda: pytest.fail("a is cached"))  # a is now the most recent
    c.get("c", lambda: 3)
    assert c.keys() == ["a", "c"] and c.info() == CacheStats(made=3, hits=1, entries=2)


def test_a_slow_make_blocks_neither_other_keys_nor_a_second_asker():
    c = MakeOnceCache(4)
    c.get("cached", lambda: "v")
    inside, release = threading.Event(), threading.Event()
    calls = []

    def slow():
        calls.append(1)
        inside.set()
        assert release.wait(30)
        return "slow"

    results = []
    makers = [threading.Thread(target=lambda: results.append(c.get("k", slow))) for _ in range(2)]
    makers[0].start()
    assert inside.wait(30)
    makers[1].start()
    got = []
    other = threading.Thread(target=lambda: got.append(c.get("cached", lambda: "never")))
    other.start()
    other.join(10)
    assert got == ["v"]  # answered while "k" is being made
    release.set()
    for t in makers:
        t.join(30)
    assert results == ["slow", "slow"] and calls == [1]


def test_a_failed_make_is_not_kept_and_reaches_every_waiter():
    c = MakeOnceCache(2)
    inside, release = threading.Event(), threading.Event()

    def fail():
        inside.set()
        release.wait(30)
        raise ValueError("cannot make it")

    errors = []

    def ask():
        try:
            c.get("k", fail)
        except ValueError as e:
            errors.append(str(e))

    threads = [threading.Thread(target=ask) for _ in range(2)]
    threads[0].start()
    assert inside.wait(30)
    threads[1].start()
    release.set()
    for t in threads:
        t.join(30)
    assert errors == ["cannot make it"] * 2 and len(c) == 0
    assert c.get("k", lambda: "made") == "made"  # tried again


def test_maxsize_must_be_positive():
    with pytest.raises(ValueError, match="maxsize"):
        MakeOnceCache(0)
