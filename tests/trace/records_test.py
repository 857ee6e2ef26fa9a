"""The rank files' records as their writers write them and their reader reads them:

* a script that runs lazy tensors, torchax (a compiled function, a concretization) and
  ``torch.compile(backend="openxla")`` (a break, a CPU fallback, a recompile) traced through the CLI: every line every writer wrote is exactly the
  fields of the model its ``ev`` names (a field the writer renames, or the model renames, fails
  here), and it validates back into that model; run.json too;
* a renamed field fails: a required one fails validation, any one fails the field check;
* versions: a version 1 file, written by the previous torch_xla_ext (``fixtures/v1``: its rank file
  of ``scripts/compiled_step.py`` and the report that torch_xla_ext wrote from it), reads back with
  the same compiles, sites and Dynamo figures (under their new names); a newer major is refused
  naming the file, both versions and what to do; a newer minor's unknown record is skipped and
  said, an unknown record of our own version is damage;
* a hook that raises while a module imports leaves a ``problem`` record the report shows, and a
  process whose recorder did not start (``startup-error-<pid>.txt``) is in the report.
"""

import dataclasses
import json
import os
import shutil
import sys
import types

import pytest

from torch_xla_ext import _json, _validation
from torch_xla_ext._dynamo_events import DYNAMO_FIGURES
from torch_xla_ext.trace import report as trace_report
from torch_xla_ext.trace import schema, startup
from torch_xla_ext.trace.recorder import Recorder
from torch_xla_ext.trace.report import load
from tests.trace import runs

HERE = os.path.dirname(os.path.abspath(__file__))
V1 = os.path.join(HERE, "fixtures", "v1")
# v1's names of the Dynamo figures -> the ledger's, which the trace now uses
V1_FIGURES = {"frame_compiles": "dynamo_compiles", "graphs": "fx_graphs", "breaks_logged": "logged_breaks",
              "breaks_counted": "counted_breaks"}


def _fields(model):
    return {f.name for f in dataclasses.fields(model)}


def _check_line(obj, where):
    """The line holds exactly its model's fields, and validates into the model."""
    model = schema.RECORDS[obj["ev"]]
    keys = set(obj) - {"ev"}
    assert keys == _fields(model), (where, obj["ev"], keys ^ _fields(model))
    return _validation.validate(model, obj, schema.TraceError, where)


# A lazy loop whose sync compiles in the first capture window (a captured graph), a torchax
# compiled function and one that reads a traced value (JAX's records), then the compiled step
# script (Dynamo, AOTAutograd and the bridge).
SCRIPT = """
import runpy, sys
import torch, torch_xla
x = torch.ones(4, 8, device=torch_xla.device())
for i in range(2):
    y = (x * (i + 2)).sum()
    torch_xla.sync()
import torchax
class Item(torch.nn.Module):
    def forward(self, x):
        return x * x.sum().item()
with torchax.default_env():
    torchax.compile(torch.nn.Linear(2, 2).to("jax"))(torch.ones(1, 2, device="jax"))
    try:
        torchax.compile(Item())(torch.ones(2, device="jax"))
    except Exception as e:  # the concretization, expected
        print("raised", type(e).__name__)
sys.argv = [sys.argv[1]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    d = tmp_path_factory.mktemp("records")
    (d / "both.py").write_text(SCRIPT)
    status, _, stderr, report = runs.traced(d / "trace", [sys.executable, str(d / "both.py"),
                                                          runs.script("compiled_step.py")])
    out = d / "trace"
    assert status == 0 and report is not None, stderr[-3000:]
    return str(out), report


def test_every_record_every_writer_wrote_is_its_model(traced):
    out, _ = traced
    seen = {}
    for path in load.rank_files(out):
        with open(path) as f:
            for n, line in enumerate(f, 1):
                obj = json.loads(line)
                rec = _check_line(obj, f"{os.path.basename(path)} line {n}")
                seen.setdefault(obj["ev"], rec)
    # Every writer of a run without a problem: header, runtime, sites, steps, compiles, a captured
    # graph, each Dynamo and bridge event, JAX's compiles and torchax's functions, the end.
    assert set(seen) == set(schema.RECORDS) - {"problem"}, sorted(set(schema.RECORDS) - set(seen))
    with open(os.path.join(out, "run.json")) as f:
        run = json.load(f)
    assert set(run) == _fields(schema.RunManifest)
    assert _validation.validate(schema.RunManifest, run, schema.TraceError, "run.json").exit_code == 0


def test_the_reader_keeps_typed_records(traced):
    out, report = traced
    (t,) = load.load_dir(out)
    assert isinstance(t.header, schema.Header) and t.header.schema_version == schema.SCHEMA_VERSION
    assert all(isinstance(c, schema.Compile) and isinstance(c.trigger, schema.Trigger) for c in t.compiles)
    lazy = [c for c in report["compiles"] if c["kind"] != "jax"]  # torch_xla's; JAX's are jit_compile records
    assert len(t.compiles) == len(lazy) == report["ranks"][0]["torch_xla_compile_count"] > 0
    assert len(t.of(schema.JitCompile)) == len(report["compiles"]) - len(lazy) > 0
    assert all(isinstance(s.executions, list) and all(isinstance(e, tuple) for e in s.executions) for s in t.steps)


def test_a_renamed_field_fails(traced):
    out, _ = traced
    with open(load.rank_files(out)[0]) as f:
        lines = [json.loads(line) for line in f]
    step = next(o for o in lines if o["ev"] == "step")
    renamed = {("kind_of" if k == "kind" else k): v for k, v in step.items()}  # required: validation fails
    with pytest.raises(schema.TraceError, match="missing field 'kind'"):
        _validation.validate(schema.Step, renamed, schema.TraceError, "step")
    with pytest.raises(AssertionError, match="kind_of"):
        _check_line(renamed, "step")
    compile_ = next(o for o in lines if o["ev"] == "compile")
    renamed = {("graph" if k == "graph_hash" else k): v for k, v in compile_.items()}
    with pytest.raises(schema.TraceError, match="missing field 'graph_hash'"):
        _validation.validate(schema.Compile, renamed, schema.TraceError, "compile")
    brk = next(o for o in lines if o["ev"] == "graph_break")
    renamed = {("hint" if k == "hints" else k): v for k, v in brk.items()}  # has a default: the field check fails
    with pytest.raises(AssertionError, match="hint"):
        _check_line(renamed, "graph_break")


def test_a_version_1_trace_reads_as_the_previous_release_read_it(tmp_path):
    shutil.copy(os.path.join(V1, "rank-0.jsonl"), tmp_path / "rank-0.jsonl")
    new = _json.encode(trace_report.build_dir(str(tmp_path)))
    with open(os.path.join(V1, "report-main.json")) as f:
        old = json.load(f)  # what the previous release's reader made of the same file
    assert old["version"] == 1 and new["version"] == schema.SCHEMA_VERSION
    keep = ("rank", "k", "step", "kind", "graph_hash", "trigger", "ms", "inputs", "compile_id", "previous_step",
            "advice", "bridge_hash")
    for c in new["compiles"]:
        c["trigger"].pop("frames")  # version 2 keeps the trigger's frames in report.json
    assert [{k: c[k] for k in keep} for c in new["compiles"]] == [{k: c[k] for k in keep} for c in old["compiles"]]
    assert [[{k: v for k, v in x.items() if k != "actionable"} for x in c["changed"]] for c in new["compiles"]] == \
        [c["changed"] for c in old["compiles"]]
    assert [{k: v for k, v in s.items() if k not in ("function", "most_steps")} for s in new["sites"]] == old["sites"]
    (dyn,), (dyn_old,) = new["dynamo"], old["dynamo"]
    assert dyn["figures"] == {V1_FIGURES.get(k, k): v for k, v in dyn_old["figures"].items()}
    assert set(dyn["figures"]) == {k for k, _, _ in DYNAMO_FIGURES}
    assert dyn["breaks"] == dyn_old["breaks"] and len(dyn["compile_ids"]) == len(dyn_old["compile_ids"])


def _header(path, **fields):
    with open(path) as f:
        lines = f.read().splitlines()
    head = dict(json.loads(lines[0]), **fields)
    return [json.dumps(head)] + lines[1:]


def test_a_newer_major_is_refused_by_name(tmp_path):
    path = tmp_path / "rank-0.jsonl"
    path.write_text("\n".join(_header(os.path.join(V1, "rank-0.jsonl"), schema_version=3, schema_minor=1)) + "\n")
    with pytest.raises(schema.TraceError) as e:
        load.load_file(str(path))
    text = str(e.value)
    assert str(path) in text and "schema version 3.1" in text and f"up to {schema.SCHEMA_VERSION}.{schema.SCHEMA_MINOR}" in text
    assert "pip install -U torch-xla-ext" in text


def test_a_newer_minor_is_read_and_its_new_records_skipped(tmp_path, traced):
    out, _ = traced
    lines = _header(load.rank_files(out)[0], schema_minor=schema.SCHEMA_MINOR + 1)
    lines.insert(3, json.dumps({"ev": "jax_compile", "t": 1.0, "function": "f"}))
    (tmp_path / "rank-0.jsonl").write_text("\n".join(lines) + "\n")
    t = load.load_file(str(tmp_path / "rank-0.jsonl"))
    assert t.damage is None and dict(t.skipped) == {"jax_compile": 1} and t.end is not None
    rep = trace_report.build_dir(str(tmp_path))
    assert any("1 jax_compile" in n for n in rep.ranks[0].notes)
    (tmp_path / "rank-0.jsonl").write_text("\n".join(_header(str(tmp_path / "rank-0.jsonl"),
                                                             schema_minor=schema.SCHEMA_MINOR)) + "\n")
    t = load.load_file(str(tmp_path / "rank-0.jsonl"))
    assert t.damage == "line 4 has an unknown record kind ev='jax_compile'" and t.records == 3


def test_a_failing_import_hook_and_a_failed_start_are_in_the_report(tmp_path, monkeypatch):
    d = tmp_path / "trace"
    rec = Recorder(str(d), capture="off", debug_path=None, analysis="file")
    module = types.ModuleType("txe_hooked")

    def hook(m):
        raise ValueError(f"cannot hook {m.__name__}")

    hooks = startup.PostImport({"txe_hooked": hook}, on_error=rec.problem)
    hooks.run("txe_hooked", module)  # what the loader does once the module finished importing
    rec.at_exit()
    monkeypatch.setenv(startup.TRACE_ENV, str(d))
    startup.note_startup_error(ImportError("torch_xla_ext not importable here"))
    rep = trace_report.build_dir(str(d))
    (r,) = rep.ranks
    assert r.problems == ["the recorder's hook on importing txe_hooked: ValueError: cannot hook txe_hooked"]
    (e,) = rep.startup_errors
    assert e.pid == os.getpid() and e.text == "ImportError: torch_xla_ext not importable here"
    assert any("did not start in 1 process" in line for line in rep.summary)
    md = trace_report.render.to_markdown(rep)
    assert "Processes whose recorder did not start" in md and "cannot hook txe_hooked" in md
    assert "## Ranks" not in md  # one process: nothing to compare
