"""The trace command as a shell user meets it, and every Python process it starts:

* the command's stdout, stderr and exit status pass through; a command that does not exist exits
  127 with a message, as a shell's; a command that cannot run, 126;
* an unusable --out is refused before the command starts, an old trace is kept unless --overwrite;
* every Python process gets the recorder: ``python -m pkg`` whose ``torch_xla.launch`` starts its
  worker process, with a sitecustomize of the user's on PYTHONPATH that still runs in both;
* launchers the command cannot wrap: a process started with only the environment ``--env`` prints,
  and one of a virtual environment with the wheel's ``.pth`` hook and nothing but
  ``TORCH_XLA_EXT_TRACE`` set (torch-only Dynamo scripts: their records against Dynamo's counters,
  and no torch_xla imported);
* a script killed with SIGKILL mid-run (how the OOM killer ends it), or stopped by the SIGTERM a
  scheduler sends the trace command (passed on to the script), leaves a trace that reads up to its
  last step, says where and how it stopped, and still has the compile torch_xla reported after
  that step (torch_xla's own analysis of the process, read from the trace directory);
* importing the trace package, its start-up and its launcher imports no torch.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

from tests.trace import runs

PY = sys.executable


def test_stdout_stderr_and_exit_status_pass_through(tmp_path):
    code = "import sys; print('out line'); print('err line', file=sys.stderr); sys.exit(3)"
    status, out, err, report = runs.traced(tmp_path / "trace", [PY, "-c", code])
    assert status == 3 and out == "out line\n"
    assert err.startswith("err line\n")  # ours only after the command's own
    assert report is None and "no rank files" in err  # no torch: no process recorded anything


def test_a_command_that_does_not_exist_exits_127(tmp_path):
    status, out, err, _ = runs.traced(tmp_path / "t1", ["no-such-command-txe", "--x"])
    assert status == 127 and out == "" and "no-such-command-txe: command not found" in err
    script = tmp_path / "not_executable.sh"
    script.write_text("echo hi\n")
    status, _, err, _ = runs.traced(tmp_path / "t2", [str(script)])
    assert status == 126 and "Permission denied" in err


def test_an_unusable_out_is_refused_before_the_command_starts(tmp_path):
    marker = tmp_path / "ran"
    command = [PY, "-c", f"open({str(marker)!r}, 'w').write('x')"]
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    for out in (blocker / "trace", blocker, "/proc/txe-trace"):
        status, _, err, _ = runs.traced(out, command)
        assert status == 2 and f"--out {out}" in err, err
        assert not marker.exists()


def test_an_old_trace_is_kept_unless_overwrite(tmp_path):
    out = tmp_path / "t"
    out.mkdir()
    (out / "rank-0.jsonl").write_text("{}\n")
    (out / "notes.txt").write_text("mine")
    status, _, err, _ = runs.traced(out, [PY, "-c", "pass"])
    assert status == 2 and "already holds a trace" in err and (out / "rank-0.jsonl").read_text() == "{}\n"
    status, _, _, _ = runs.traced(out, [PY, "-c", "pass"], "--overwrite")
    assert status == 0 and not (out / "rank-0.jsonl").exists() and (out / "notes.txt").read_text() == "mine"


def _lazy_step(tag):
    return textwrap.dedent(f"""
        import os
        import torch, torch_xla
        x = torch.ones(3, device=torch_xla.device()) * {tag}
        torch_xla.sync()
        print("{tag}", float(x.sum()), "pid", os.getpid(), flush=True)
    """)


def test_python_m_and_the_worker_torch_xla_launch_starts_are_recorded(tmp_path):
    pkg = tmp_path / "work" / "mypkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "worker.py").write_text("def run(index):\n    assert __import__('os').environ.get('USER_SITE_RAN') == '1'\n"
                                   + textwrap.indent(_lazy_step(2), "    "))
    (pkg / "__main__.py").write_text(textwrap.dedent("""
        import os
        import torch_xla
        from mypkg import worker
        if __name__ == "__main__":
            assert os.environ.get("USER_SITE_RAN") == "1"
            print("launcher pid", os.getpid(), flush=True)
            torch_xla.launch(worker.run)
    """))
    user_site = tmp_path / "usersite"
    user_site.mkdir()
    (user_site / "sitecustomize.py").write_text("import os\nos.environ['USER_SITE_RAN'] = '1'\n")
    path = os.pathsep.join([str(user_site), str(tmp_path / "work"), runs.ROOT])
    status, out, err, report = runs.traced(tmp_path / "trace", [PY, "-m", "mypkg"], cwd=str(tmp_path / "work"),
                                           PYTHONPATH=path)
    assert status == 0, err[-3000:]
    launcher = int(out.split("launcher pid ")[1].split()[0])
    worker = int(out.split("2 6.0 pid ")[1].split()[0])
    assert launcher != worker  # torch_xla.launch ran the function in a process of its own
    files = [f for f in os.listdir(tmp_path / "trace") if f.endswith(".jsonl")]
    assert files == ["rank-0.jsonl"]  # the launcher runs no XLA work: only the worker has a file
    with open(tmp_path / "trace" / files[0]) as f:
        head = json.loads(f.readline())
    assert head["pid"] == worker and head["source"] == "torch_xla ordinal"
    sync_line = next(n for n, line in enumerate((pkg / "worker.py").read_text().splitlines(), 1) if "sync()" in line)
    syncs = [c for c in report["compiles"] if c["trigger"]["kind"] == "sync"]
    assert len(syncs) == 1 and syncs[0]["trigger"]["site"] == f"{pkg / 'worker.py'}:{sync_line}"


_TORCH_ONLY = textwrap.dedent("""
    import sys
    import torch
    from torch._dynamo.utils import counters
    f = torch.compile(lambda x: torch.sin(x).sum().item() + 1, backend="aot_eager")
    f(torch.ones(3))
    assert "torch_xla" not in sys.modules, "something imported torch_xla"
    print("graphs", counters["stats"]["unique_graphs"], "breaks", sum(counters["graph_break"].values()))
""")


def test_the_environment_alone_traces_a_torch_only_process(tmp_path):
    out = tmp_path / "trace"
    proc = subprocess.run([PY, "-m", "torch_xla_ext", "trace", "--env", str(out)], env=runs.env(),
                          capture_output=True, text=True, timeout=120, cwd=runs.ROOT)
    assert proc.returncode == 0 and not out.exists()  # prints what to set; starts nothing
    env = runs.env()
    env.pop("PYTHONPATH")
    for line in proc.stdout.splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        env[key] = subprocess.run(["sh", "-c", f"printf %s {value}"], env=env, capture_output=True, text=True,
                                  timeout=60).stdout
    script = tmp_path / "job.py"
    script.write_text(_TORCH_ONLY)
    run = subprocess.run([PY, str(script)], env=env, capture_output=True, text=True, timeout=600, cwd=str(tmp_path))
    assert run.returncode == 0, run.stderr[-2000:]
    graphs, breaks = (int(v) for v in run.stdout.split()[1::2])
    render = subprocess.run([PY, "-m", "torch_xla_ext", "trace", "--report", str(out)], env=runs.env(),
                            capture_output=True, text=True, timeout=120, cwd=runs.ROOT)
    assert render.returncode == 0, render.stderr
    report = runs.load_report(out)
    (dyn,) = report["dynamo"]
    assert dyn["figures"]["fx_graphs"] == graphs > 0 and dyn["figures"]["counted_breaks"] == breaks > 0
    assert report["compiles"] == [] and report["ranks"][0]["ended"]


def test_a_venv_with_the_wheel_hook_traces_with_only_the_variable_set(tmp_path):
    from torch_xla_ext.trace import startup

    venv = tmp_path / "venv"
    subprocess.run([PY, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site_dir = next((venv / "lib").glob("python3.*")) / "site-packages"
    import site

    # The pinned stack through a .pth (as tests/packaging does), this checkout as an installed
    # package would be, and the wheel's start-up hook: the file the wheel ships, as build_wheel writes it.
    (site_dir / "0_stack.pth").write_text("\n".join(site.getsitepackages() + [runs.ROOT]) + "\n")
    (site_dir / startup.PTH_FILE).write_text(startup.PTH_LINE)
    script = tmp_path / "job.py"
    script.write_text(_TORCH_ONLY)
    env = runs.env(TORCH_XLA_EXT_TRACE=str(tmp_path / "trace"))
    env.pop("PYTHONPATH")
    plain = subprocess.run([str(venv / "bin" / "python"), "-c", "import sys; print(sorted(sys.modules))"],
                           env={k: v for k, v in env.items() if k != "TORCH_XLA_EXT_TRACE"}, capture_output=True,
                           text=True, timeout=120)
    assert plain.returncode == 0 and "torch_xla_ext" not in plain.stdout  # unset: the hook imports nothing
    run = subprocess.run([str(venv / "bin" / "python"), str(script)], env=env, capture_output=True, text=True,
                         timeout=600, cwd=str(tmp_path))
    assert run.returncode == 0, run.stderr[-2000:]
    graphs, _ = (int(v) for v in run.stdout.split()[1::2])
    render = subprocess.run([PY, "-m", "torch_xla_ext", "trace", "--report", str(tmp_path / "trace")],
                            env=runs.env(), capture_output=True, text=True, timeout=120, cwd=runs.ROOT)
    assert render.returncode == 0, render.stderr
    report = runs.load_report(tmp_path / "trace")
    (dyn,) = report["dynamo"]
    assert dyn["figures"]["fx_graphs"] == graphs > 0 and report["ranks"][0]["ended"]
    assert "1 process, 0 XLA compiles" in render.stderr


def test_a_script_killed_with_sigkill_leaves_a_readable_trace(tmp_path):
    r = runs.traced_script(tmp_path, "crash_at.py", "--how", "kill", "--step", "3")
    assert r.status == 128 + signal.SIGKILL and 0 not in r.oracle  # no exit handler ran
    assert r.stdout.splitlines()[-1].startswith("step 3 loss")
    rank = r.rank()
    assert not rank["ended"] and rank["steps"] == 2 and "SIGKILL" in rank["stopped"]
    # Every compile torch_xla reported, the last one (the killed step's, after step 2's marker)
    # read back from its analysis file after the kill.
    ours = runs.check_compiles(r)
    assert ours[-1]["step"] == 3 and ours[-1]["recovered"] and not ours[0]["recovered"]


def test_a_script_stopped_by_sigterm_to_the_trace_command(tmp_path):
    out = tmp_path / "trace"
    argv = [PY, "-m", "torch_xla_ext", "trace", "--out", str(out), "--", PY, runs.script("crash_at.py"), "--how",
            "wait", "--step", "3"]
    proc = subprocess.Popen(argv, env=runs.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=runs.ROOT)
    try:
        lines = []
        deadline = time.monotonic() + 600
        while not (lines and lines[-1].startswith("step 3")) and time.monotonic() < deadline:
            lines.append(proc.stdout.readline())
            assert lines[-1], proc.stderr.read()[-3000:]
        proc.send_signal(signal.SIGTERM)  # a scheduler stopping the job
        rest, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    report = runs.load_report(out)
    rank = report["ranks"][0]
    assert not rank["ended"] and rank["steps"] == 2 and "SIGTERM" in rank["stopped"]
    assert report["exit"] == {"code": None, "signal": "SIGTERM"}
    assert [c["step"] for c in report["compiles"]][-1] == 3  # the blocked step's compile, from torch_xla's analysis


def test_the_trace_package_its_start_up_and_its_launcher_import_no_torch():
    code = ("import sys; import torch_xla_ext.trace, torch_xla_ext.trace.startup, torch_xla_ext.trace.launch, "
            "torch_xla_ext.trace.report, torch_xla_ext.cli.trace; "
            "assert not {'torch', 'torch_xla', 'jax'} & set(sys.modules), sorted(sys.modules)")
    proc = subprocess.run([PY, "-c", code], env=runs.env(), capture_output=True, text=True, timeout=120,
                          cwd=runs.ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
