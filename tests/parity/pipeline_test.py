"""The runner's contract with its stages: each stage declares what it reads and writes of the run
record, and the runner checks it (a stage list that reads a field no earlier stage writes is
refused before anything runs; a stage that writes a field it does not declare fails the run); the
runner alone times every stage and releases memory after it; every entry point's stage list passes
the check. Nothing here runs XLA: the stages are the test's own, over the real record."""

import dataclasses
import threading

import pytest
import torch

from torch_xla_ext.errors import InternalError
from torch_xla_ext.parity import api, memory, pipeline
from torch_xla_ext.parity.record import Request, RunRecord, ScanRecord
from torch_xla_ext.parity.stages import per_layer
from torch_xla_ext.parity.stages.capture import HOOKED_RUN
from torch_xla_ext.parity.user_code import UserFailure


def _request(**options):
    return api.request(torch.nn.Linear(2, 2), (torch.ones(1, 2),), **options)


def _write(field, value=1):
    def run(record):
        setattr(record, field, value)
    return run


def _read(field):
    def run(record):
        assert getattr(record, field) is not None
    return run


@pytest.mark.parametrize("options", [{}, {"localize": True}, {"emulate": False}, {"emulate": False, "localize": True},
                                     {"explorer_dir": "x"}, {"localize": True, "explorer_dir": "x"}])
def test_every_verify_stage_list_reads_only_what_an_earlier_stage_writes(options):
    pipeline.check(api.verify_stages(_request(**options)))


def test_the_other_entry_points_stage_lists_pass_the_check():
    from torch_xla_ext.parity.captures import Capture

    cap = Capture([], {}, "float32", "xla:0")
    for r in (_request(localize=True), _request(localize=True, emulate=False)):
        pipeline.check(api.compare_stages(r, cap))
    pipeline.check([HOOKED_RUN])
    layers = [torch.nn.Linear(2, 2)]
    pipeline.check(api.verify_stages(_request()) + [per_layer.stage(layers, layers, torch.ones(1, 2))], ScanRecord)


def test_a_stage_reading_a_field_no_earlier_stage_writes_is_refused_before_anything_runs():
    ran = []
    stages = [pipeline.Stage("first", lambda record: ran.append("first"), writes=("cpu",)),
              pipeline.Stage("compare", lambda record: ran.append("compare"), reads=("cpu", "golden"))]
    with pytest.raises(InternalError, match="stage 'compare' reads 'golden', which no earlier stage writes"):
        pipeline.run(_request(), stages, uses_xla=False)
    assert ran == []
    # The entry points' own lists, reordered: the replays before the XLA run.
    stages = api.verify_stages(_request())
    names = [s.name for s in stages]
    broken = list(stages)
    broken.insert(names.index("XLA"), broken.pop(names.index("replays")))
    with pytest.raises(InternalError, match="stage 'replays' reads 'xla'"):
        pipeline.check(broken)
    with pytest.raises(InternalError, match="stage 'x' reads 'per_layer'"):
        pipeline.check([pipeline.Stage("x", lambda r: None, reads=("per_layer",))], ScanRecord)
    with pytest.raises(InternalError, match="names 'per_layer', which RunRecord does not have"):  # scan's only
        pipeline.check([pipeline.Stage("x", lambda r: None, writes=("per_layer",))], RunRecord)


def test_a_dropped_field_cannot_be_read_after_and_the_runners_fields_cannot_be_written():
    stages = [pipeline.Stage("a", _write("cpu"), writes=("cpu",)),
              pipeline.Stage("b", _write("cpu", None), drops=("cpu",)),
              pipeline.Stage("c", _read("cpu"), reads=("cpu",))]
    with pytest.raises(InternalError, match="stage 'c' reads 'cpu'"):
        pipeline.check(stages)
    with pytest.raises(InternalError, match="writes 'seconds', which only the runner writes"):
        pipeline.check([pipeline.Stage("a", lambda r: None, writes=("seconds",))])


def test_a_stage_that_writes_a_field_it_does_not_declare_fails_the_run():
    stages = [pipeline.Stage("sneaky", _write("golden", [("", torch.ones(1))]), writes=("cpu",))]
    with pytest.raises(InternalError, match="stage 'sneaky' wrote 'golden', which it does not declare"):
        pipeline.run(_request(), stages, uses_xla=False)
    stages = [pipeline.Stage("a", _write("cpu"), writes=("cpu",)), pipeline.Stage("b", lambda r: None, drops=("cpu",))]
    with pytest.raises(InternalError, match="declares it drops 'cpu' but left it set"):
        pipeline.run(_request(), stages, uses_xla=False)


def test_the_runner_times_every_stage_releases_its_memory_and_ends_or_skips_as_told(monkeypatch):
    released = []
    monkeypatch.setattr(memory, "release", lambda level="collect": released.append(level))
    stages = [pipeline.Stage("one", _write("cpu"), writes=("cpu",), seconds="one", release="trim"),
              pipeline.Stage("skipped", lambda r: pipeline.SKIPPED, seconds="skipped", release="collect"),
              pipeline.Stage("untimed", lambda r: None),
              pipeline.Stage("end", lambda r: pipeline.END, seconds="end"),
              pipeline.Stage("never", _write("golden"), writes=("golden",), seconds="never")]
    record = pipeline.run(_request(), stages, uses_xla=False)
    assert list(record.seconds) == ["one", "end", "total"]  # a skipped stage is not timed; "never" did not run
    assert record.golden is None and record.cpu == 1
    assert released == ["trim", "none", "none"]  # nothing after the skipped stage
    assert record.seconds["total"] >= record.seconds["one"] + record.seconds["end"]


def test_work_started_to_settle_is_done_when_its_stage_ends_and_other_early_work_is_not_waited_for():
    gate = threading.Event()
    seen = {}

    def start(settle):
        def run(record):
            record.early.start(lambda: gate.wait(30) and "made", settle=settle)
            if settle:  # the runner waits for it: let it finish
                threading.Timer(0.2, gate.set).start()
        return run

    def after(record):
        seen["done"] = record.early._future.done()  # the next stage's view of the early work
        gate.set()  # (the runner's close waits for the work)

    for settle in (True, False):
        gate.clear()
        record = pipeline.run(_request(), [pipeline.Stage("a", start(settle)), pipeline.Stage("b", after)],
                              uses_xla=False)
        assert seen["done"] is settle
        assert record.early.take() is None  # the runner closed it: the work's result was not taken


def test_the_users_exception_ends_the_run_as_its_failure_and_anything_else_raises():
    def user(record):
        raise UserFailure("XLA", ZeroDivisionError("division by zero"))

    record = pipeline.run(_request(), [pipeline.Stage("XLA", user), pipeline.Stage("b", _write("cpu"),
                                                                                    writes=("cpu",))], uses_xla=False)
    assert record.failure.stage == "XLA" and record.cpu is None and "total" in record.seconds

    def ours(record):
        raise KeyError("a bug of ours")

    with pytest.raises(KeyError):
        pipeline.run(_request(), [pipeline.Stage("b", ours)], uses_xla=False)


def test_no_stage_writes_the_records_seconds_or_releases_memory_at_its_end():
    """The runner owns both: a stage's function neither writes ``record.seconds`` nor calls
    ``memory.release`` (the releases left are inside one stage's work: between two replays, and
    after a large module call inside the golden run's hook)."""
    import ast
    import pathlib

    import torch_xla_ext.parity as parity_package

    root = pathlib.Path(parity_package.__file__).parent
    writes, releases = [], []
    for path in sorted((root / "stages").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "seconds" and isinstance(node.value, ast.Attribute) \
                    and node.value.attr == "record":
                writes.append(f"{path.name}:{node.lineno}")
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and \
                    node.value.attr == "seconds" and isinstance(node.value.value, ast.Name) and \
                    node.value.value.id == "record" and isinstance(node.ctx, ast.Store):
                writes.append(f"{path.name}:{node.lineno}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "release" \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "memory":
                releases.append(path.name)
    assert writes == []
    assert sorted(releases) == ["localization.py", "localization.py", "replays.py"]


def test_the_record_types_what_it_holds():
    hints = {f.name: str(f.type) for f in dataclasses.fields(RunRecord)}
    assert not [name for name, t in hints.items() if "Any" in t]
    assert "per_layer" not in hints and "per_layer" in {f.name for f in dataclasses.fields(ScanRecord)}
    assert not [name for name, t in {f.name: str(f.type) for f in dataclasses.fields(Request)}.items()
                if t in ("Any", "'Any'")]
