"""`torch-xla-ext numerics` on files: reports, exit codes, and errors that name the bad input."""

import json
import subprocess
import sys

import numpy as np
import pytest

from torch_xla_ext.cli import main


def test_files_that_match_exit_0_and_write_json(tmp_path, capsys):
    a = np.linspace(0, 1, 50, dtype=np.float64)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", a + 1e-9)
    out_json = tmp_path / "r.json"
    rc = main(["numerics", "--actual", str(tmp_path / "a.npy"), "--expected", str(tmp_path / "b.npy"),
               "--json", str(out_json)])
    assert rc == 0
    assert "Tensor-likes are close!" in capsys.readouterr().out
    d = json.loads(out_json.read_text())
    assert d["passed"] is True and d["total"] == 50 and d["rtol"] == 1e-7


def test_mismatch_exits_1_with_explicit_tolerances(tmp_path, capsys):
    np.save(tmp_path / "a.npy", np.float32([1, 2, 3]))
    np.save(tmp_path / "b.npy", np.float32([1, 2.5, 3]))
    args = ["numerics", "--actual", str(tmp_path / "a.npy"), "--expected", str(tmp_path / "b.npy")]
    assert main(args) == 1
    assert "Mismatched elements: 1 / 3 (33.3%)" in capsys.readouterr().out
    assert main(args + ["--rtol", "0.5", "--atol", "0"]) == 0


def test_missing_file_names_the_flag(tmp_path, capsys):
    np.save(tmp_path / "a.npy", np.float32([1]))
    rc = main(["numerics", "--actual", str(tmp_path / "a.npy"), "--expected", str(tmp_path / "nope.npy")])
    assert rc == 2
    err = capsys.readouterr().err
    assert "--expected: no such file" in err and "nope.npy" in err


def test_pickled_npy_is_refused_not_loaded(tmp_path, capsys):
    # An object array can only be stored with pickle; loading it would run arbitrary code.
    np.save(tmp_path / "evil.npy", np.array([{"x": 1}], dtype=object), allow_pickle=True)
    np.save(tmp_path / "b.npy", np.float32([1]))
    rc = main(["numerics", "--actual", str(tmp_path / "evil.npy"), "--expected", str(tmp_path / "b.npy")])
    assert rc == 2
    err = capsys.readouterr().err
    assert "--actual" in err and "evil.npy" in err and "not a plain numeric .npy" in err


def test_integer_file_is_a_type_error(tmp_path, capsys):
    np.save(tmp_path / "a.npy", np.arange(3))
    np.save(tmp_path / "b.npy", np.arange(3))
    rc = main(["numerics", "--actual", str(tmp_path / "a.npy"), "--expected", str(tmp_path / "b.npy")])
    assert rc == 2
    assert "actual has dtype numpy.int64 (integer)" in capsys.readouterr().err


def test_half_a_pair_of_files_is_refused(tmp_path, capsys):
    assert main(["numerics", "--actual", "x.npy"]) == 2
    assert "--actual and --expected go together" in capsys.readouterr().err


def test_python_dash_m_entry_point():
    out = subprocess.run([sys.executable, "-m", "torch_xla_ext", "--help"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "numerics" in out.stdout
    with pytest.raises(SystemExit):
        main(["no-such-command"])
