"""Bad input to every public function and CLI command: each raises our class (a
``TorchXlaExtError`` subclass) that is also the builtin a caller catches, with a message naming the
bad argument, field, path or file; the CLI exits 2 for it and prints no traceback.

One row per call, so a changed API changes one row. Rows marked ``xfail`` (strict: once the
component raises as it should, the row must lose its mark) are known not to meet the contract yet.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np
import pytest
import torch

from torch_xla_ext import errors
from torch_xla_ext.errors import (ArgumentTypeError, FailedPreconditionError, InvalidArgumentError,
                                  NotFoundError, TorchXlaExtError)


@dataclasses.dataclass
class Row:
    name: str
    call: Callable[[], Any]
    ours: type[TorchXlaExtError]     # the class (or a base of it) the call must raise
    builtin: type[Exception]         # what a caller that does not know ours catches
    text: str                        # must appear in the message: names the bad thing
    pending: str | None = None       # why the row does not hold yet (xfail, strict)


# Components whose errors are not yet subclasses of errors.py's code classes (their owners
# convert them: `class XError(InvalidArgumentError)`), so `.code` is "UNKNOWN".


def _lazy(module: str):
    import importlib

    return importlib.import_module(f"torch_xla_ext.{module}")


def _mod(name):
    return lambda: _lazy(name)


numerics, jax_call, export, collectives, parity, graph_breaks, doctor, factory = (
    _mod("numerics"), _mod("jax_call"), _mod("export"), _mod("collectives"), _mod("parity"), _mod("graph_breaks"),
    _mod("doctor"), _mod("_factory"))


def _xla(*shape):
    import torch_xla

    return torch.ones(*shape).to(torch_xla.device())


ROWS = [
    # ---- errors (the table itself) ----
    Row("errors.from_status", lambda: (_ for _ in ()).throw(errors.from_status("NOT_FOUND", "manifest.json: missing")),
        NotFoundError, FileNotFoundError, "manifest.json"),
    # ---- the C++ Status path (through the extension module) ----
    Row("_ext.jax_call.read_hlo_signature", lambda: __import__("torch_xla_ext._ext", fromlist=["x"]).jax_call
        .read_hlo_signature(b"\x22\x64abc"), InvalidArgumentError, ValueError, "cannot parse as xla.HloModuleProto"),
    Row("_ext.numerics.compare (C++ check)", lambda: numerics().compare(np.zeros(2), np.zeros(2), rtol=-1.0, atol=0.0),
        InvalidArgumentError, ValueError, "rtol and atol must be finite"),
    # ---- numerics ----
    Row("numerics.compare actual type", lambda: numerics().compare([1.0], np.zeros(1)), ArgumentTypeError, TypeError,
        "actual: expected a torch.Tensor or a numpy.ndarray"),
    Row("numerics.compare expected dtype", lambda: numerics().compare(np.zeros(2), np.arange(2)), ArgumentTypeError,
        TypeError, "expected has dtype numpy.int64"),
    Row("numerics.compare shape", lambda: numerics().compare(np.zeros(2), np.zeros(3)), InvalidArgumentError,
        ValueError, "actual has shape (2,), expected has shape (3,)"),
    Row("numerics.compare rtol alone", lambda: numerics().compare(np.zeros(2), np.zeros(2), rtol=1e-3),
        InvalidArgumentError, ValueError, "'atol'"),
    Row("numerics.compare rtol type", lambda: numerics().compare(np.zeros(2), np.zeros(2), rtol="1", atol=0.0),
        ArgumentTypeError, TypeError, "rtol: expected a number"),
    Row("numerics.assert_close", lambda: numerics().assert_close(np.zeros(2), torch.zeros(2, dtype=torch.int8)),
        ArgumentTypeError, TypeError, "expected has dtype torch.int8"),
    Row("numerics.default_tolerances", lambda: numerics().default_tolerances("float8"), InvalidArgumentError,
        ValueError, "'float8'"),
    # ---- jax_call ----
    Row("jax_call.call_jax jax_fn", lambda: jax_call().call_jax(3, (_xla(2),)), ArgumentTypeError, TypeError,
        "jax_fn: expected a callable"),
    Row("jax_call.call_jax args", lambda: jax_call().call_jax(lambda a: a, _xla(2)), ArgumentTypeError, TypeError,
        "args: expected a tuple"),
    Row("jax_call.call_jax kwargs", lambda: jax_call().call_jax(lambda a: a, (_xla(2),), [1]), ArgumentTypeError,
        TypeError, "kwargs: expected a dict"),
    Row("jax_call.call_jax cpu leaf", lambda: jax_call().call_jax(lambda a, b: a, (_xla(2), {"w": torch.ones(2)})),
        ArgumentTypeError, TypeError, "args[1]['w']: expected an XLA tensor"),
    Row("jax_call.call_jax trace", lambda: jax_call().call_jax(lambda a, b: a @ b, (_xla(3), _xla(4))),
        InvalidArgumentError, ValueError, "while being traced"),
    Row("jax_call.call_jax output", lambda: jax_call().call_jax(lambda a: (a, "x"), (_xla(2),)), ArgumentTypeError,
        TypeError, "output[1]"),
    Row("jax_call.call_jax int64 without x64", lambda: jax_call().call_jax(lambda d: d["ids"] + 1,
        ({"ids": torch.arange(4).to("xla")},)), InvalidArgumentError, ValueError, "args[0]['ids']: HLO parameter 0"),
    Row("jax_call.explain unhashable static", lambda: jax_call().explain(lambda a, o: a, (torch.ones(2), {"o": {1}})),
        ArgumentTypeError, TypeError, "args[1]['o']: static argument of type set is not hashable"),
    # ---- _factory (the --model contract) ----
    Row("_factory.load_model spec", lambda: factory().load_model("no_colon"), InvalidArgumentError, ValueError,
        "--model: expected module:factory, got 'no_colon'"),
    Row("_factory.load_model module", lambda: factory().load_model("no_such_module_txe:f"), InvalidArgumentError,
        ValueError, "cannot import 'no_such_module_txe'"),
    Row("_factory.check_made", lambda: factory().check_made((torch.nn.Linear(2, 2), 3), "f"), InvalidArgumentError,
        ValueError, "f()[1] (args) must be a tuple"),
    # ---- doctor ----
    Row("doctor.run --model", lambda: doctor().run("unused-dir", model="no_such_module_txe:f"), InvalidArgumentError,
        ValueError, "no_such_module_txe"),
    Row("doctor.run frontend", lambda: doctor().run("unused-dir", frontend="jax2torch"), InvalidArgumentError,
        ValueError, "frontend: 'jax2torch' is not a frontend; known are 'torch_xla' (the default), 'torchax'"),
    # ---- export (owned by export; rows follow its API on main) ----
    Row("export.load missing", lambda: export().load("/nonexistent/bundle"), NotFoundError, FileNotFoundError,
        "/nonexistent/bundle"),
    Row("export.export args", lambda: export().export(torch.nn.Linear(2, 2), torch.ones(2)), ArgumentTypeError,
        TypeError, "args: expected a tuple"),
    Row("export.run bundle", lambda: export().run(42), ArgumentTypeError, TypeError, "bundle_or_dir: expected"),
    Row("export.to_jax bundle", lambda: export().to_jax("/nonexistent/bundle"), NotFoundError, FileNotFoundError,
        "/nonexistent/bundle"),
    Row("export.strip_tokens bundle", lambda: export().strip_tokens(None), ArgumentTypeError, TypeError,
        "bundle: expected an export.Bundle"),
    Row("export.load_jax missing", lambda: export().load_jax("/nonexistent/bundle"), NotFoundError, FileNotFoundError,
        "/nonexistent/bundle: missing"),
    Row("export.load_jax path", lambda: export().load_jax(3), ArgumentTypeError, TypeError,
        "path: expected a directory written by JaxExport.save"),
    # ---- collectives ----
    Row("collectives.all_reduce reduce_type", lambda: collectives().all_reduce("median", _xla(2)),
        InvalidArgumentError, ValueError, "reduce_type: 'median'"),
    Row("collectives.all_reduce tensor", lambda: collectives().all_reduce("sum", [1.0]), ArgumentTypeError, TypeError,
        "tensor: expected a torch.Tensor"),
    # ---- parity ----
    Row("parity.verify dtype", lambda: parity().verify(torch.nn.Linear(2, 2), (torch.ones(2),), dtype="int3"),
        InvalidArgumentError, ValueError, "dtype: expected one of"),
    Row("parity.verify fn", lambda: parity().verify(3, (torch.ones(2),)), InvalidArgumentError, ValueError,
        "fn: expected a callable"),
    Row("parity.scan_layers x", lambda: parity().scan_layers([torch.nn.Linear(2, 2)], [1.0]), InvalidArgumentError,
        ValueError, "x[0]: the carry's leaves must be torch.Tensors"),
    Row("parity.compare_capture path", lambda: parity().compare_capture("/nonexistent/cap", torch.nn.Linear(2, 2)),
        NotFoundError, FileNotFoundError, "/nonexistent/cap"),
    Row("parity.plot_modules report", lambda: parity().plot_modules(3, "modules.png"), ArgumentTypeError, TypeError,
        "report: expected a ParityReport"),
    Row("parity.replay program", lambda: parity().replay(3, ()), ArgumentTypeError, TypeError, "program"),
    # ---- graph_breaks ----
    Row("graph_breaks.account", lambda: graph_breaks().account(ring_capacity=0), InvalidArgumentError, ValueError,
        "ring_capacity"),
    Row("graph_breaks.compare modes", lambda: graph_breaks().compare("a:b", modes=("eager",)),
        InvalidArgumentError, ValueError, "modes"),
    Row("graph_breaks.compare steps", lambda: graph_breaks().compare("a:b", steps=0), InvalidArgumentError,
        ValueError, "steps"),
    Row("graph_breaks.compare model", lambda: graph_breaks().compare("no_colon"), InvalidArgumentError,
        ValueError, "model: expected module:factory, got 'no_colon'"),
    Row("graph_breaks.merge_reports", lambda: graph_breaks().merge(["/nonexistent/rank0.json"]),
        NotFoundError, FileNotFoundError, "/nonexistent/rank0.json"),
    Row("graph_breaks.GraphBreakReport.from_dict nested field", lambda: graph_breaks().GraphBreakReport.from_dict(
        {"fx_breaks": [{"gb_type": "x"}, "not a record"]}, where="r.json"), InvalidArgumentError, ValueError,
        "r.json: field 'fx_breaks[1]' must be dict, got str"),
    Row("graph_breaks.GraphBreakReport.from_dict bool count", lambda: graph_breaks().GraphBreakReport.from_dict(
        {"aot_graphs": {"forward": True}}, where="r.json"), InvalidArgumentError, ValueError,
        "r.json: field 'aot_graphs.forward' must be int, got bool"),
]


@pytest.mark.parametrize("row", [pytest.param(r, id=r.name, marks=[pytest.mark.xfail(reason=r.pending, strict=True)]
                                              if r.pending else []) for r in ROWS])
def test_function_raises_ours_naming_the_bad_input(row: Row):
    with pytest.raises(Exception) as info:
        row.call()
    e = info.value
    assert isinstance(e, row.ours), f"{type(e).__module__}.{type(e).__qualname__}: {e}"
    assert isinstance(e, row.builtin), type(e).__mro__
    assert e.code == row.ours.code
    assert row.text in str(e), str(e)


@dataclasses.dataclass
class CliRow:
    name: str
    argv: list[str]
    text: str
    pending: str | None = None


CLI_ROWS = [
    CliRow("numerics missing file", ["numerics", "--actual", "{tmp}/a.npy", "--expected", "{tmp}/none.npy"],
           "--expected: no such file"),
    CliRow("numerics half pair", ["numerics", "--actual", "{tmp}/a.npy"], "--actual and --expected go together"),
    CliRow("numerics pickled npy", ["numerics", "--actual", "{tmp}/obj.npy", "--expected", "{tmp}/a.npy"],
           "--actual: {tmp}/obj.npy is not a plain numeric .npy"),
    CliRow("numerics int npy", ["numerics", "--actual", "{tmp}/int.npy", "--expected", "{tmp}/int.npy"],
           "actual has dtype numpy.int64"),
    CliRow("doctor steps", ["doctor", "--steps", "0", "--out", "{tmp}/r"], "--steps: expected >= 1"),
    CliRow("doctor model", ["doctor", "--model", "no_such_module_txe:f", "--out", "{tmp}/r"], "no_such_module_txe"),
    CliRow("doctor frontend", ["doctor", "--frontend", "jax2torch", "--out", "{tmp}/r"],
           "--frontend: 'jax2torch' is not a frontend"),
    CliRow("export model", ["export", "--model", "no_colon", "--out", "{tmp}/b"], "no_colon"),
    CliRow("inspect missing dir", ["inspect", "{tmp}/no_bundle"], "no_bundle"),
    CliRow("parity model", ["parity", "--model", "no_colon"], "no_colon"),
    CliRow("graph-breaks modes", ["graph-breaks", "--modes", "eager"], "modes"),
    CliRow("graph-breaks model", ["graph-breaks", "--model", "no_colon"], "no_colon"),
    CliRow("graph-breaks merge missing", ["graph-breaks", "merge", "{tmp}/none.json"], "{tmp}/none.json"),
]


@pytest.fixture
def files(tmp_path):
    np.save(tmp_path / "a.npy", np.float32([1, 2]))
    np.save(tmp_path / "int.npy", np.arange(2))
    np.save(tmp_path / "obj.npy", np.array([{"x": 1}], dtype=object), allow_pickle=True)
    return tmp_path


@pytest.mark.parametrize("row", [pytest.param(r, id=r.name, marks=[pytest.mark.xfail(reason=r.pending, strict=True)]
                                              if r.pending else []) for r in CLI_ROWS])
def test_cli_exits_2_naming_the_bad_input(row: CliRow, files, capsys):
    from torch_xla_ext.cli import main

    rc = main([a.replace("{tmp}", str(files)) for a in row.argv])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert row.text.replace("{tmp}", str(files)) in err, err
    assert "Traceback" not in err


def test_cli_shows_a_traceback_and_exits_1_for_a_bug(monkeypatch, files, capsys):
    # Anything that is not our error is a bug: the CLI does not dress it up as bad input.
    from torch_xla_ext import numerics as mod
    from torch_xla_ext.cli import main

    def broken(*a, **k):
        raise ValueError("a bug, not bad input")

    monkeypatch.setattr(mod, "compare", broken)
    with pytest.raises(ValueError, match="a bug, not bad input"):
        main(["numerics", "--actual", str(files / "a.npy"), "--expected", str(files / "a.npy")])


def test_every_status_code_has_a_class_that_is_its_builtin():
    builtins = {"INVALID_ARGUMENT": ValueError, "NOT_FOUND": FileNotFoundError, "FAILED_PRECONDITION": RuntimeError,
                "OUT_OF_RANGE": IndexError, "UNIMPLEMENTED": NotImplementedError, "INTERNAL": RuntimeError}
    assert set(errors.BY_CODE) == set(builtins)
    for code, builtin in builtins.items():
        e = errors.from_status(code, "x")
        assert isinstance(e, TorchXlaExtError) and isinstance(e, builtin) and e.code == code
    unknown = errors.from_status("DATA_LOSS", "y")
    assert isinstance(unknown, errors.InternalError) and unknown.code == "DATA_LOSS"
    assert isinstance(errors.from_status("FAILED_PRECONDITION", "z"), FailedPreconditionError)
