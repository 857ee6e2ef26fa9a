"""The script trace of torchax programs, the quick ones, against JAX's own records of the same
process (``jax_log_compiles`` and ``jax_explain_cache_misses``, captured inside it by
``oracle_run.py``) and Python's own traceback of an untraced run:

* ``.item()`` inside a compiled forward: the report names the line, the op and the function as a
  finding, the traced command exits as the untraced script does, and every compile (all op by op)
  is JAX's; its report.json reads back into the same typed report;
* the gate: torchax missing, or a JAX without the API the recorder reads, is refused naming the
  install line or the API; asked in a traced process before Dynamo is imported, it answers (the
  probe's import runs the trace's hook, which asks the gate again).
"""

import os
import subprocess
import sys
import textwrap

from tests.trace import jax_log, runs
from torch_xla_ext.trace import report as trace_report
from torch_xla_ext.trace.report import load


def test_item_inside_a_compiled_forward_is_a_finding_and_the_exit_code_passes_through(tmp_path):
    name = "torchax_item.py"
    run = runs.traced_jax_script(tmp_path, name)
    plain = subprocess.run([sys.executable, runs.script(name)], env=runs.env(JAX_PLATFORMS="cpu"),
                           capture_output=True, text=True, timeout=runs.TIMEOUT, cwd=runs.ROOT)
    # Python's own account of the untraced run: the exit status, the error, the line it raised at.
    assert plain.returncode == run.status == 1, (plain.returncode, run.status)
    line = runs.line_of(name, "int(lengths.max().item())")
    assert f'{runs.script(name)}", line {line}, in forward' in plain.stderr
    assert "ConcretizationTypeError" in plain.stderr and "ConcretizationTypeError" in run.stderr
    assert "This occurred in the item() method" in plain.stderr  # JAX's own words for the op

    (finding,) = run.report["findings"]
    assert finding["kind"] == "concretization" and finding["op"] == "item"
    assert finding["site"].endswith(f"{name}:{line}") and ".item()" in finding["code"]
    assert finding["function"] == "BagClassifier.forward" and finding["call"] == 1
    assert finding["call_site"].endswith(f"{name}:{runs.line_of(name, 'fast(ids, lengths)')}")
    assert any(f"{name}:{line}" in s and "concretization" in s for s in run.report["summary"])

    # JAX compiled nothing for the forward (its trace raised): every compile is op by op.
    (o,) = run.oracle.values()
    rows = run.report["compiles"]
    jax_log.check(o["jax_log"], rows, run.report["ranks"][0])
    assert all(r["eager"] for r in rows) and "jit(call_torch)" not in jax_log.counts(o["jax_log"])
    (fn,) = run.report["functions"]
    assert fn["calls"] == 1 and fn["compiles"] == 0
    assert "CompileTime" not in run.report["summary"][0]  # torch_xla compiled nothing here: its count is not shown
    # report.json reads back into the report the rank files build (what the doctor reads)
    assert load.read_report(os.path.join(run.dir, "report.json")) == trace_report.build_dir(run.dir)


_GATE = """
import importlib.metadata as md, sys
{prelude}
from torch_xla_ext import _versions
for feature in ("trace.torchax", "trace.jax"):
    try:
        _versions.require(feature)
        print(feature, "| passes")
    except ImportError as e:
        print(feature, "|", type(e).__name__, "|", str(e).replace("\\n", " / "))
print("torchax imported |", "torchax" in sys.modules)
"""

_NO_TORCHAX = """
real = md.version
def version(name):
    if name == "torchax":
        raise md.PackageNotFoundError(name)
    return real(name)
md.version = version
from tests.jax_call.without_torchax import without_torchax
without_torchax().__enter__()
"""


def _gate(prelude):
    code = _GATE.format(prelude=textwrap.dedent(prelude))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return dict(line.split(" | ", 1) for line in r.stdout.splitlines() if " | " in line)


def test_torchax_missing_is_refused_naming_the_install_line():
    lines = _gate(_NO_TORCHAX)
    kind, message = lines["trace.torchax"].split(" | ", 1)
    assert kind == "UnsupportedStackError"
    assert message.startswith("torch_xla_ext.trace (torchax's compiled functions and op-by-op computations) "
                              "cannot run on this stack: torchax is not installed"), message
    assert "pip install 'torch-xla-ext[torchax]'" in message and "torchax -" in message
    assert lines["trace.jax"] == "passes"  # JAX's own compiles are still recorded
    assert lines["torchax imported"] == "False"


def test_a_jax_without_the_compile_listener_is_refused_naming_the_api():
    lines = _gate("import jax.monitoring\ndel jax.monitoring.register_event_duration_secs_listener\n")
    for feature in ("trace.jax", "trace.torchax"):
        kind, message = lines[feature].split(" | ", 1)
        assert kind == "UnsupportedStackError"
        assert ("jax.monitoring.register_event_duration_secs_listener (used by _compat/jax_monitoring.py"
                in message), message
        assert "install a jax that has these APIs" in message


def test_the_gate_asked_before_dynamo_imports_in_a_traced_process(tmp_path):
    # The probe imports torch._dynamo, whose import hook (the trace's Dynamo half) asks the gate
    # again from inside the first question: it answers instead of waiting on itself.
    code = "from torch_xla_ext import _versions; print('graph_breaks', _versions.available('graph_breaks'))"
    status, out, err, _ = runs.traced(tmp_path / "trace", [sys.executable, "-c", code], timeout=240)
    assert status == 0 and out == "graph_breaks True\n", err[-3000:]

