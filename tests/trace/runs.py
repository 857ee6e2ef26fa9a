"""Running the test scripts as users run them, traced through the CLI, with upstream's own records of
the same processes as the oracles (shared by the trace tests; not collected).

* :func:`traced`: ``python -m torch_xla_ext trace --out DIR [ARGS] -- COMMAND`` in a subprocess
  with a timeout; returns its exit status, stdout, stderr and ``report.json``.
* :func:`traced_script`: ``scripts/NAME`` run through ``oracle_run.py`` inside the traced command
  (one process: the trace and the oracle see the same compiles), with ``TORCH_LOGS=recompiles``;
  returns a :class:`Run` holding the report and, per process, the oracle's records:
  ``CompileTime``, Dynamo's counters, explain's accumulator (``oracle_run.py``), and torch_xla's
  ``PT_XLA_DEBUG_LEVEL=2`` analysis, the text torch_xla wrote into the trace directory
  (``xla-debug/<host>-<pid>.log``, the pid from each rank file's first line), read here with a
  regex of our own, not the trace's parser.
* :func:`untraced`: the same script without the trace, under ``PT_XLA_DEBUG_LEVEL=2`` on stderr:
  what tracing must not change (graph hashes, output).
"""

import dataclasses
import glob
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPTS = os.path.join(HERE, "scripts")
ORACLE = os.path.join(HERE, "oracle_run.py")
TIMEOUT = 600

_COMPILE_HASH = re.compile(r"^Compilation Analysis:\s+Graph Hash: ([0-9a-f]+)\s*$", re.M)
_COMPILE_CAUSE = re.compile(r"^Compilation Analysis: Compilation Cause\s*$", re.M)
_EXECUTE_HASH = re.compile(r"^Execution Analysis:\s+Graph Hash: ([0-9a-f]+)\s*$", re.M)
_RECOMPILE = re.compile(r"Recompiling function (\S+)")


def script(name):
    return os.path.join(SCRIPTS, name)


def line_of(name, text, last=False):
    """The first (or last) line of scripts/NAME holding ``text`` (not a docstring or comment line)."""
    with open(script(name)) as f:
        found = [n for n, line in enumerate(f, 1) if text in line and not line.lstrip().startswith(('"', "#"))]
    assert found, f"{text!r} not in {name}"
    return found[-1] if last else found[0]


def site(name, text, last=False):
    return f"{script(name)}:{line_of(name, text, last)}"


def env(**extra):
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in e.get("PYTHONPATH", "").split(os.pathsep) if p])
    e["PJRT_DEVICE"] = "CPU"
    for v in ("PT_XLA_DEBUG", "PT_XLA_DEBUG_LEVEL", "PT_XLA_DEBUG_FILE", "TORCH_TRACE", "TORCH_LOGS",
              "TORCH_XLA_EXT_TRACE", "TORCH_XLA_EXT_TRACE_OWNS", "ORACLE_OUT", "ORACLE_EXPLAIN"):
        e.pop(v, None)
    e.update(extra)
    return e


def traced(out, command, *trace_args, timeout=TIMEOUT, cwd=ROOT, preexec_fn=None, **extra_env):
    """(returncode, stdout, stderr, report or None) of ``torch-xla-ext trace --out OUT -- COMMAND``."""
    argv = [sys.executable, "-m", "torch_xla_ext", "trace", "--out", str(out), *trace_args, "--", *command]
    proc = subprocess.run(argv, env=env(**extra_env), capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          preexec_fn=preexec_fn)
    return proc.returncode, proc.stdout, proc.stderr, load_report(out)


def load_report(out):
    path = os.path.join(str(out), "report.json")
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)


@dataclasses.dataclass
class Run:
    dir: str
    status: int
    stdout: str
    stderr: str
    report: dict
    oracle: dict  # rank -> oracle_run.py's record of that process (absent for a killed one)
    analysis: dict  # rank -> what torch_xla's analysis file of that process holds (see analysis())

    def compiles(self, rank=0):
        return [c for c in self.report["compiles"] if c["rank"] == rank]

    def rank(self, rank=0):
        return next(r for r in self.report["ranks"] if r["rank"] == rank)

    def records(self, ev, rank=0):
        """The rank file's records of kind ``ev`` (what the process streamed)."""
        with open(os.path.join(self.dir, f"rank-{rank}.jsonl")) as f:
            return [r for r in map(json.loads, f) if r["ev"] == ev]


def traced_script(tmp, name, *args, launcher=(), explain=False, trace_args=(), timeout=TIMEOUT, preexec_fn=None,
                  **extra_env):
    """scripts/NAME ARGS through oracle_run.py, traced into ``tmp/trace`` (see the module);
    ``launcher`` goes before ``oracle_run.py`` (torchrun's argv)."""
    out = os.path.join(str(tmp), "trace")
    oracle_out = os.path.join(str(tmp), "oracle-{rank}.json")
    extra = dict(TORCH_LOGS="recompiles", ORACLE_OUT=oracle_out, **extra_env)
    if explain:
        extra["ORACLE_EXPLAIN"] = "1"
    command = [*(launcher or [sys.executable]), ORACLE, script(name), *args]
    status, stdout, stderr, report = traced(out, command, *trace_args, timeout=timeout, preexec_fn=preexec_fn, **extra)
    assert report is not None, stderr[-4000:]
    oracle, debug = {}, {}
    for path in glob.glob(os.path.join(out, "rank-*.jsonl")):
        with open(path) as f:
            head = json.loads(f.readline())
        rank = head["rank"]
        o = oracle_out.replace("{rank}", str(rank))
        if os.path.isfile(o):
            with open(o) as f:
                oracle[rank] = json.load(f)
        log = os.path.join(out, "xla-debug", f"{head['host']}-{head['pid']}.log")
        debug[rank] = analysis(open(log).read() if os.path.isfile(log) else "")
    return Run(out, status, stdout, stderr, report, oracle, debug)


def untraced(tmp, name, *args, timeout=TIMEOUT, **extra_env):
    """torch_xla's analysis (stderr) and the output of an untraced run of scripts/NAME."""
    proc = subprocess.run([sys.executable, script(name), *args], env=env(PT_XLA_DEBUG_LEVEL="2", **extra_env),
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    return dict(returncode=proc.returncode, stdout=proc.stdout, stderr=proc.stderr, **analysis(proc.stderr))


def analysis(text):
    """What PT_XLA_DEBUG_LEVEL=2 wrote: the number of compile blocks, their graph hashes in order,
    execution hashes in order, and Dynamo's recompiles (TORCH_LOGS=recompiles) in the same text."""
    return {"compile_blocks": len(_COMPILE_CAUSE.findall(text)), "compile_hashes": _COMPILE_HASH.findall(text),
            "execution_hashes": _EXECUTE_HASH.findall(text), "recompiles": _RECOMPILE.findall(text)}


def recompiles(stderr):
    """Dynamo's own recompile lines (TORCH_LOGS=recompiles) in a run's stderr."""
    return _RECOMPILE.findall(stderr)


def check_compiles(run, rank=0):
    """The trace's compiles of a process against torch_xla's own records of it: one entry per
    compile (the CompileTime metric at exit, when the process exited; the analysis blocks), with
    torch_xla's graph hash, in torch_xla's order; and the executions each step lists are the ones
    torch_xla's analysis lists, in order. Returns the trace's compiles."""
    ours = run.compiles(rank)
    a = run.analysis[rank]
    assert len(ours) == a["compile_blocks"] == len(a["compile_hashes"]) > 0, (len(ours), a["compile_blocks"])
    assert [c["graph_hash"] for c in ours] == a["compile_hashes"]
    o = run.oracle.get(rank)
    if o is not None:
        assert len(ours) == o["compile_time"]
        assert run.rank(rank)["torch_xla_compile_count"] == o["compile_time"]
    executions = [h for s in run.records("step", rank) for _, _, h in s.get("executions", [])]
    assert executions == a["execution_hashes"][:len(executions)]
    return ours


# JAX's own flags for the oracle (oracle_run.py's jax_log), and JAX on the CPU.
JAX_ORACLE_ENV = {"JAX_LOG_COMPILES": "1", "JAX_EXPLAIN_CACHE_MISSES": "1", "JAX_PLATFORMS": "cpu"}


def traced_jax_script(tmp, name, *args, command=None, trace_args=(), timeout=TIMEOUT, **extra_env):
    """scripts/NAME ARGS through oracle_run.py with JAX's compile log and cache-miss explanations on,
    traced into ``tmp/trace``; ``command`` replaces the command (a shell that starts several
    processes, each through oracle_run.py with ``ORACLE_OUT``). Returns a :class:`Run` whose
    ``oracle`` maps each rank file's rank to the oracle record of its process (by pid)."""
    out = os.path.join(str(tmp), "trace")
    oracle_out = os.path.join(str(tmp), "oracle-{pid}.json")
    extra = dict(JAX_ORACLE_ENV, ORACLE_OUT=oracle_out, **extra_env)
    command = command or [sys.executable, ORACLE, script(name), *args]
    status, stdout, stderr, report = traced(out, command, *trace_args, timeout=timeout, **extra)
    assert report is not None, stderr[-4000:]
    oracle = {}
    for path in glob.glob(os.path.join(out, "rank-*.jsonl")) + glob.glob(os.path.join(out, "proc-*.jsonl")):
        with open(path) as f:
            head = json.loads(f.readline())
        o = oracle_out.replace("{pid}", str(head["pid"]))
        if os.path.isfile(o):
            with open(o) as f:
                oracle[head["rank"]] = json.load(f)
    return Run(out, status, stdout, stderr, report, oracle, {})


def env_traced_jax_script(tmp, name, *args, timeout=TIMEOUT):
    """scripts/NAME ARGS through oracle_run.py (JAX's log on) with nothing but what ``trace --env``
    prints set (``TORCH_XLA_EXT_TRACE=DIR`` and the start-up hook's path), then ``trace --report
    DIR``: the way a launcher the command cannot wrap is traced. Returns (the script's process,
    the report, the oracle record)."""
    out = os.path.join(str(tmp), "trace")
    oracle_out = os.path.join(str(tmp), "oracle.json")
    printed = subprocess.run([sys.executable, "-m", "torch_xla_ext", "trace", "--env", out], env=env(),
                             capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert printed.returncode == 0, printed.stderr
    e = env(**JAX_ORACLE_ENV, ORACLE_OUT=oracle_out)
    e.pop("PYTHONPATH")
    for line in printed.stdout.splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        e[key] = subprocess.run(["sh", "-c", f"printf %s {value}"], env=e, capture_output=True, text=True,
                                timeout=60).stdout
    proc = subprocess.run([sys.executable, ORACLE, script(name), *args], env=e, capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)
    render = subprocess.run([sys.executable, "-m", "torch_xla_ext", "trace", "--report", out], env=env(),
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert render.returncode == 0, render.stderr[-4000:]
    with open(oracle_out) as f:
        return proc, load_report(out), json.load(f)
