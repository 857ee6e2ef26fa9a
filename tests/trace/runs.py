"""Running the test scripts as users run them: traced through the CLI (``torch-xla-ext trace``), and
untraced under torch_xla's and Dynamo's own reporting, the oracles (shared by the trace tests; not
collected).

* :func:`traced`: ``python -m torch_xla_ext trace --out DIR -- python SCRIPT ARGS`` in a subprocess
  with a timeout; returns its exit status, stdout, stderr and ``report.json``.
* :func:`untraced`: the same script without the trace, with ``PT_XLA_DEBUG_LEVEL=2`` and
  ``TORCH_LOGS=recompiles``, through ``oracle_run.py`` (the ``CompileTime`` metric and Dynamo's
  counters at exit); returns what torch_xla printed, read here with a regex of our own (not the
  trace's parser): each compile's graph hash in order, and each execution's.
"""

import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPTS = os.path.join(HERE, "scripts")
TIMEOUT = 900

_COMPILE_HASH = re.compile(r"^Compilation Analysis:\s+Graph Hash: ([0-9a-f]+)\s*$", re.M)
_COMPILE_CAUSE = re.compile(r"^Compilation Analysis: Compilation Cause\s*$", re.M)
_EXECUTE_HASH = re.compile(r"^Execution Analysis:\s+Graph Hash: ([0-9a-f]+)\s*$", re.M)
_RECOMPILE = re.compile(r"Recompiling function (\S+)")


def script(name):
    return os.path.join(SCRIPTS, name)


def env(**extra):
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in e.get("PYTHONPATH", "").split(os.pathsep) if p])
    e["PJRT_DEVICE"] = "CPU"
    for v in ("PT_XLA_DEBUG", "PT_XLA_DEBUG_LEVEL", "PT_XLA_DEBUG_FILE", "TORCH_TRACE", "TORCH_LOGS",
              "TORCH_XLA_EXT_TRACE", "TORCH_XLA_EXT_TRACE_OWNS"):
        e.pop(v, None)
    e.update(extra)
    return e


def traced(out, command, *trace_args, timeout=TIMEOUT, **extra_env):
    """(returncode, stdout, stderr, report or None) of ``torch-xla-ext trace --out OUT -- COMMAND``."""
    argv = [sys.executable, "-m", "torch_xla_ext", "trace", "--out", str(out), *trace_args, "--", *command]
    proc = subprocess.run(argv, env=env(**extra_env), capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    path = os.path.join(str(out), "report.json")
    report = json.load(open(path)) if os.path.isfile(path) else None
    return proc.returncode, proc.stdout, proc.stderr, report


def untraced(tmp, name, *args, timeout=TIMEOUT, **extra_env):
    """torch_xla's and Dynamo's own records of an untraced run of scripts/NAME."""
    out = os.path.join(str(tmp), f"oracle-{name}.json")
    proc = subprocess.run([sys.executable, os.path.join(HERE, "oracle_run.py"), script(name), *args],
                          env=env(PT_XLA_DEBUG_LEVEL="2", TORCH_LOGS="recompiles", ORACLE_OUT=out, **extra_env),
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    result = json.load(open(out)) if os.path.isfile(out) else {}
    result.update(returncode=proc.returncode, stdout=proc.stdout, stderr=proc.stderr, **analysis(proc.stderr))
    return result


def analysis(text):
    """What PT_XLA_DEBUG_LEVEL=2 printed: compile blocks, their graph hashes in order, execution
    hashes in order, Dynamo's recompiles (TORCH_LOGS=recompiles)."""
    return {"compile_blocks": len(_COMPILE_CAUSE.findall(text)), "compile_hashes": _COMPILE_HASH.findall(text),
            "execution_hashes": _EXECUTE_HASH.findall(text), "recompiles": _RECOMPILE.findall(text)}


def rank_compiles(report, rank=0):
    return [c for c in report["compiles"] if c["rank"] == rank]
