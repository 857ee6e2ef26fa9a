"""What the real torch_xla_ext Python API sees of a fork's hooks (docs/FORK.md, "One copy of the
hook state per process"), with the fork's extension module linked both ways:

* through //cc/shared:libtxe_hooks.so, the library _ext.so links too: one copy of the hook state
  in the process, so graph_breaks.account() enables and reads what the fork records and
  collectives.recorded_calls() lists its all-reduces. The fork is loaded first, in a fresh
  interpreter, as torch_xla's _XLAC is in a training process.
* with its own static copy of cc/: its records land in that copy, which the Python side never
  sees.

The fork stand-ins are loaded with ctypes (RTLD_LOCAL, as Python imports extension modules).
"""

import ctypes
import os
import subprocess
import sys
import textwrap

import pytest

# --config=asan: an instrumented extension module cannot load into the uninstrumented interpreter
# ("ASan runtime does not come first"); the C++ tests here cover the ASan run. The tests import
# torch_xla_ext themselves, so that they are collected (and skipped) there.
pytestmark = pytest.mark.skipif("ASAN_OPTIONS" in os.environ,
                                reason="the Python API does not run under --config=asan")

_DIR = os.path.join(os.environ.get("TEST_SRCDIR", "."), os.environ.get("TEST_WORKSPACE", "txe"),
                    "examples", "fork")
_LIB = os.path.join(_DIR, "libfork_xlac_standin_static.so")
_LIB_SHARED_HOOKS = os.path.join(_DIR, "libfork_xlac_standin_shared_hooks.so")


def test_account_sees_a_fork_linked_through_libtxe_hooks():
    script = textwrap.dedent(f"""
        import ctypes, json
        fork = ctypes.CDLL({_LIB_SHARED_HOOKS!r})  # first, as torch_xla's _XLAC is
        for name in ("fork_fallback_op_count", "fork_recorded_all_reduces"):
            getattr(fork, name).restype = ctypes.c_long
        from torch_xla_ext import collectives, graph_breaks
        start = collectives.next_sequence()
        with graph_breaks.account() as ledger:
            assert fork.fork_run_fallback_and_graph() == 0      # account() enabled the one copy: recorded
            assert fork.fork_compile_all_reduce() == 0
        calls = collectives.recorded_calls(start)
        maps = {{line.split()[-1] for line in open("/proc/self/maps") if "libtxe_hooks.so" in line}}
        print(json.dumps({{
            "native_hooks": ledger.report().native_hooks,
            "calls": [[c.requested_scale, c.applied_scale, c.lowering] for c in calls],
            "fork_fallback_ops": fork.fork_fallback_op_count(),
            "fork_all_reduces": fork.fork_recorded_all_reduces(),
            "copies": len(maps),
        }}))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    got = __import__("json").loads(out.stdout.strip().splitlines()[-1])
    # The fork's fallback records one op (digamma); its runtime the identity graph a sharded
    # tensor's transfer to the host compiles and runs, and the module with the all-reduce, which
    # its Compile typed after the HLO -> StableHLO conversion: a sum scaled by 0.25.
    assert {k: got["native_hooks"].get(k) for k in ("fallback_op", "compile", "execute", "transfer_to_host")} == {
        "fallback_op": 1, "compile": 2, "execute": 1, "transfer_to_host": 1}, got
    assert got["calls"] == [[0.25, 0.25, "all_reduce+multiply"]], got
    assert (got["fork_fallback_ops"], got["fork_all_reduces"]) >= (1, 1), got
    assert got["copies"] == 1, got


def _fork():
    lib = ctypes.CDLL(_LIB)  # ctypes' default mode is RTLD_LOCAL
    for name in ("fork_fallback_op_count", "fork_recorded_all_reduces"):
        getattr(lib, name).restype = ctypes.c_long
    return lib


def test_account_does_not_see_a_fork_with_its_own_copy_of_cc():
    from torch_xla_ext import collectives, graph_breaks

    fork = _fork()
    start = collectives.next_sequence()
    with graph_breaks.account() as ledger:
        assert fork.fork_run_fallback_and_graph() == 0  # account() enabled _ext's copy only: not recorded
        fork.fork_set_hooks_enabled(1)      # the fork enables its own copy
        assert fork.fork_run_fallback_and_graph() == 0
        assert fork.fork_compile_all_reduce() == 0
        fork.fork_set_hooks_enabled(0)
    # The fork's copy holds the records: one fallback op (second run only), one all-reduce.
    assert fork.fork_fallback_op_count() == 1
    assert fork.fork_recorded_all_reduces() == 1
    # torch_xla_ext's copy saw none of it.
    assert ledger.report().native_hooks == {}
    assert collectives.recorded_calls(start) == []


def test_the_same_hooks_called_through_ext_are_seen():
    # Control: the hook API itself works from Python's side of the same process.
    from torch_xla_ext import collectives, graph_breaks

    start = collectives.next_sequence()
    with graph_breaks.account() as ledger:
        graph_breaks._core.on_fallback_op("aten::digamma")
        collectives.record_all_reduce("sum", 0.25, 1.0, world_size=1, lowering="clone")
    assert ledger.report().native_hooks == {"fallback_op": 1}
    [call] = collectives.recorded_calls(start)
    assert (call.requested_scale, call.applied_scale, call.lowering) == (0.25, 1.0, "clone")
