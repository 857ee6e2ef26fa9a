"""The trace command as a shell user meets it, and every Python process it starts:

* the command's stdout, stderr and exit status pass through; a command that does not exist exits
  127 with a message, as a shell's; a command that cannot run, 126;
* an unusable --out is refused before the command starts, an old trace is kept unless --overwrite;
* every Python process gets the recorder: ``python -m pkg``, a multiprocessing ``spawn`` child, a
  process whose PYTHONPATH has a sitecustomize of its own (which still runs), and one started with
  only the environment ``--env`` prints (the route for launchers the command cannot wrap);
* a script killed with SIGKILL mid-run leaves a trace that reads up to its last step, says where
  it stopped, and still has the compile torch_xla reported after that step (checked against the
  same run untraced under PT_XLA_DEBUG_LEVEL=2);
* nothing of this imports torch_xla where torch alone does (the trace package, the Dynamo half).
"""

import json
import os
import subprocess
import sys
import textwrap

from tests.trace import runs

PY = sys.executable


def trace(tmp_path, command, *args, name="trace"):
    return runs.traced(tmp_path / name, command, *args, timeout=600)


def test_stdout_stderr_and_exit_status_pass_through(tmp_path):
    code = "import sys; print('out line'); print('err line', file=sys.stderr); sys.exit(3)"
    status, out, err, report = trace(tmp_path, [PY, "-c", code])
    assert status == 3 and out == "out line\n"
    assert err.startswith("err line\n")  # ours only after the command's own
    assert report is None and "no rank files" in err  # no torch: no process recorded anything


def test_a_command_that_does_not_exist_exits_127(tmp_path):
    status, out, err, _ = trace(tmp_path, ["no-such-command-txe", "--x"])
    assert status == 127 and out == "" and "no-such-command-txe: command not found" in err
    script = tmp_path / "not_executable.sh"
    script.write_text("echo hi\n")
    status, _, err, _ = trace(tmp_path, [str(script)], name="t2")
    assert status == 126 and "Permission denied" in err


def test_an_unusable_out_is_refused_before_the_command_starts(tmp_path):
    marker = tmp_path / "ran"
    command = [PY, "-c", f"open({str(marker)!r}, 'w').write('x')"]
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    for out in (blocker / "trace", blocker, "/proc/txe-trace"):
        proc = subprocess.run([PY, "-m", "torch_xla_ext", "trace", "--out", str(out), "--", *command],
                              env=runs.env(), capture_output=True, text=True, timeout=120, cwd=runs.ROOT)
        assert proc.returncode == 2 and f"--out {out}" in proc.stderr, proc.stderr
        assert not marker.exists()


def test_an_old_trace_is_kept_unless_overwrite(tmp_path):
    out = tmp_path / "t"
    out.mkdir()
    (out / "rank-0.jsonl").write_text("{}\n")
    (out / "notes.txt").write_text("mine")
    status, _, err, _ = runs.traced(out, [PY, "-c", "pass"], timeout=120)
    assert status == 2 and "already holds a trace" in err and (out / "rank-0.jsonl").read_text() == "{}\n"
    status, _, _, _ = runs.traced(out, [PY, "-c", "pass"], "--overwrite", timeout=120)
    assert status == 0 and not (out / "rank-0.jsonl").exists() and (out / "notes.txt").read_text() == "mine"


def _lazy_step(tag):
    return textwrap.dedent(f"""
        import torch, torch_xla
        x = torch.ones(3, device=torch_xla.device()) * {tag}
        torch_xla.sync()
        print("{tag}", float(x.sum()))
    """)


def test_every_python_process_is_recorded(tmp_path):
    # python -m pkg, which starts a multiprocessing "spawn" child; a sitecustomize of the user's on
    # PYTHONPATH that must still run in both.
    pkg = tmp_path / "work" / "mypkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "child.py").write_text("def run():\n" + textwrap.indent(_lazy_step(2), "    "))
    (pkg / "__main__.py").write_text(textwrap.dedent("""
        import multiprocessing as mp
        import os
        from mypkg import child
        if __name__ == "__main__":
            assert os.environ.get("USER_SITE_RAN") == "1"
            p = mp.get_context("spawn").Process(target=child.run)
            p.start(); p.join()
            assert p.exitcode == 0
    """))
    user_site = tmp_path / "usersite"
    user_site.mkdir()
    (user_site / "sitecustomize.py").write_text("import os\nos.environ['USER_SITE_RAN'] = '1'\n")
    proc = subprocess.run([PY, "-m", "torch_xla_ext", "trace", "--out", str(tmp_path / "trace"), "--", PY, "-m",
                           "mypkg"], env=runs.env(PYTHONPATH=os.pathsep.join([str(user_site), str(tmp_path / "work"),
                                                                               runs.ROOT])),
                          capture_output=True, text=True, timeout=600, cwd=str(tmp_path / "work"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "2 6.0" in proc.stdout
    files = sorted(os.listdir(tmp_path / "trace"))
    procs = [f for f in files if f.endswith(".jsonl")]
    assert len(procs) == 1  # the parent runs no XLA work: only the spawned child has a file
    heads = [json.loads(open(tmp_path / "trace" / f).readline()) for f in procs]
    assert heads[0]["pid"] != os.getpid()
    report = json.load(open(tmp_path / "trace" / "report.json"))
    sync_line = next(n for n, line in enumerate((pkg / "child.py").read_text().splitlines(), 1) if "sync()" in line)
    syncs = [c for c in report["compiles"] if c["trigger"]["kind"] == "sync"]
    assert len(syncs) == 1 and syncs[0]["trigger"]["site"] == f"{pkg / 'child.py'}:{sync_line}"


def test_the_environment_alone_traces_a_process(tmp_path):
    out = tmp_path / "trace"
    proc = subprocess.run([PY, "-m", "torch_xla_ext", "trace", "--env", str(out)], env=runs.env(),
                          capture_output=True, text=True, timeout=120, cwd=runs.ROOT)
    assert proc.returncode == 0
    env = runs.env()
    for line in proc.stdout.splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        env[key] = subprocess.run(["sh", "-c", f"printf %s {value}"], capture_output=True, text=True).stdout
    script = tmp_path / "job.py"
    script.write_text(_lazy_step(5))
    run = subprocess.run([PY, str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and "5 15.0" in run.stdout, run.stderr[-2000:]
    render = subprocess.run([PY, "-m", "torch_xla_ext", "trace", "--report", str(out)], env=runs.env(),
                            capture_output=True, text=True, timeout=120, cwd=runs.ROOT)
    assert render.returncode == 0, render.stderr
    report = json.load(open(out / "report.json"))
    assert [c["trigger"]["kind"] for c in report["compiles"]] == ["sync", "host_read"] and report["ranks"][0]["ended"]
    assert "2 XLA compiles" in render.stderr


def test_a_script_killed_with_sigkill_leaves_a_readable_trace(tmp_path):
    args = ["--how", "kill", "--step", "3"]
    status, out, err, report = trace(tmp_path, [PY, runs.script("crash_at.py"), *args])
    oracle = runs.untraced(tmp_path, "crash_at.py", *args)
    assert status == 137 and oracle["returncode"] == -9
    assert out == oracle["stdout"]
    rank = report["ranks"][0]
    assert not rank["ended"] and rank["steps"] == 2 and "SIGKILL" in rank["stopped"]
    ours = runs.rank_compiles(report)
    # Every compile torch_xla reported, the last one (the killed step's) read back from its
    # analysis file after the kill.
    assert [c["graph_hash"] for c in ours] == oracle["compile_hashes"]
    assert ours[-1]["step"] == 3 and ours[-1]["recovered"]


def test_nothing_imports_torch_xla_where_torch_alone_does():
    code = textwrap.dedent("""
        import sys
        sys.modules["torch_xla"] = None  # importing it fails
        import torch_xla_ext.trace, torch_xla_ext.trace.startup, torch_xla_ext.trace.launch
        assert "torch" not in sys.modules, "the trace package imported torch"
        import torch_xla_ext.trace.dynamo, torch_xla_ext._compat.dynamo, torch_xla_ext.graph_breaks.watch
        import torch
        from torch_xla_ext.trace.dynamo import DynamoRecorder
        events = []
        rec = DynamoRecorder(events.append, lambda: 0.0)
        rec.install()
        f = torch.compile(lambda x: torch.sin(x) + 1, backend="eager")
        f(torch.ones(3))
        assert any(e["what"] == "graph" for e in events) and any(e["what"] == "frame" for e in events)
        print("ok")
    """)
    proc = subprocess.run([PY, "-c", code], env=runs.env(), capture_output=True, text=True, timeout=300,
                          cwd=runs.ROOT)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
