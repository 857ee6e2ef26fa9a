"""Fuzzing export.load: random corruptions of valid bundles (our format with a collective token
and a scale, the same with only the portable artifact, and torch_xla's save_as_stablehlo
directory) either load (and then run, or fail to run with our typed errors) or fail with
BundleError / BundleFileNotFoundError. Never another exception, a crash, a hang or an unpickle.

The long budget is bench/export_fuzz.py; the strategies are in bundle_fuzz_strategies.py. The
plain tests at the end are minimal reproducers of what the fuzzer found.
"""

import collections
import faulthandler
import json
import os
import shutil
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings

from tests.export import bundle_fuzz_strategies as S

from torch_xla_ext import export  # noqa: E402

# ~25-45 cases/s on a 2-core machine: about 40 s of fuzzing, seeds and imports included.
MAX_EXAMPLES = 1000
CASE_TIMEOUT_S = 60  # a hang dumps every thread's stack and fails the test process


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    if os.path.exists(S.MARKER):
        os.remove(S.MARKER)
    return S.make_seeds(str(tmp_path_factory.mktemp("seeds")))


def test_fuzz_load(seeds, tmp_path):
    counts = collections.Counter()

    @settings(max_examples=MAX_EXAMPLES, derandomize=True, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(S.CASES)
    # Reproducers of what the fuzzer found (each was an untyped exception before the fix).
    @example(("torch_xla_dir", [("json_set", 0, None)]))                       # meta is `null`
    @example(("two_all_reduces", [("json_deep", 3, 200000)]))                  # RecursionError
    @example(("torch_xla_dir", [("json_deep", 1, 200000)]))
    @example(("two_all_reduces", [("json_bytes", 0.0, b"\xff", 0)]))            # UnicodeDecodeError
    @example(("two_all_reduces", [("json_set", 0, [])]))                        # manifest is a list
    @example(("two_all_reduces", [("pickle", 0)]))
    @example(("torch_xla_dir", [("pickle", 0), ("pickle", 1), ("pickle", 2)]))
    @example(("two_all_reduces_mlirbc_only", [("flip", 0, [(0.5, 0)])]))
    @example(("one_all_reduce", [("text_retype", 0, "tensor<*xf32>")]))        # unranked argument
    @example(("one_all_reduce", [("text_edit", 0.5, 0, "tuple<" * 60000)]))    # parser stack overflow
    @example(("two_all_reduces_mlirbc_only", [("flip", 121, [(0.983697203330548, 121), (1.0, 121)])]))  # SIGSEGV
    @example(("two_all_reduces", [("json_set", 5, 2**63)]))                     # absurd counts/indices
    # torch_xla dir whose .npy disagrees with input_signature (shape; big-endian data JAX rejects)
    @example(("torch_xla_dir", [("npy_header", 0, ("<f4", False, [0], b"\x01\x00"))]))
    @example(("torch_xla_dir", [("npy_header", 1, ("<f4", False, [0], b"\x01\x00"))]))
    @example(("torch_xla_dir", [("npy_header", 1, ("<f4", False, [0], b"\x01\x00")),
                                ("npy_header", 1, (">f4", False, [0], b"\x01\x00"))]))
    def prop(case):
        seed, mutations = case
        faulthandler.dump_traceback_later(CASE_TIMEOUT_S, exit=True)
        try:
            counts[S.check_case(seeds, seed, mutations, str(tmp_path))] += 1
        finally:
            faulthandler.cancel_dump_traceback_later()

    prop()
    print(dict(counts))
    assert not os.path.exists(S.MARKER)
    # The fuzzer reaches every outcome: corruptions that load and run, and both error types.
    assert counts["loaded_and_ran"] > 0
    assert counts["load:BundleError"] > 0 and counts["load:BundleFileNotFoundError"] > 0


# --- minimal reproducers (each raised something other than our typed errors before) --------------


@pytest.fixture
def ours(seeds, tmp_path):
    d = tmp_path / "b"
    shutil.copytree(seeds["two_all_reduces"], d)
    return d


@pytest.fixture
def theirs(seeds, tmp_path):
    d = tmp_path / "t"
    shutil.copytree(seeds["torch_xla_dir"], d)
    return d


def _edit_manifest(d, edit):
    m = json.loads((d / "manifest.json").read_text())
    edit(m)
    (d / "manifest.json").write_text(json.dumps(m))


def _user(m):
    return next(i for i in m["inputs"] if i["kind"] == "user_input")


def _weight(m):
    return next(i for i in m["inputs"] if i["kind"] == "parameter")


@pytest.mark.parametrize("edit,match", [
    (lambda m: _user(m).update(shape=[[2], 4]), r"'inputs\[\d\]\.shape\[0\]' must be int, got list"),
    (lambda m: _user(m).update(shape=[2, -4]), r"'inputs\[\d\]\.shape\[1\]' is -4, expected a non-negative int"),
    (lambda m: _user(m).update(position=99), r"'inputs\[\d\]\.position' is 99, expected an int in \[0, num_user_inputs=3\)"),
    (lambda m: _user(m).update(position=True), r"'inputs\[\d\]\.position' must be int, got bool"),
    (lambda m: m["unused_inputs"].__setitem__(0, None), r"'unused_inputs\[0\]' must be dict, got NoneType"),
    (lambda m: m["unused_inputs"][0].update(position=_user(m)["position"]), r"'unused_inputs\[0\]\.position' is \d, already the position of inputs\["),
    (lambda m: m.update(transforms=7), r"'transforms' must be list, got int"),
    (lambda m: m["collectives"][0].update(scale=10**400), r"'collectives\[0\]\.scale'"),
    (lambda m: m["collectives"][0].update(operand_inputs=[-1]), r"'collectives\[0\]\.operand_inputs\[0\]' is -1, expected a non-negative int"),
    (lambda m: m["collectives"][0].update(operand_inputs=[70]), r"'collectives\[0\]\.operand_inputs' is \[70\], but there are 7 inputs"),
    (lambda m: m["collectives"][0].update(replica_groups=[[0, "a"]]), r"'collectives\[0\]\.replica_groups\[0\]\[1\]' must be int, got str"),
    (lambda m: m["outputs"].append({"shape": [1]}), r"missing field 'outputs\[1\]\.dtype'"),
    (lambda m: _weight(m).update(file="../../outside.npy"), r"'inputs\[\d\]\.file' is '\.\./\.\./outside\.npy', expected a relative path inside the bundle"),
    (lambda m: _weight(m).update(file="/etc/hostname"), r"'inputs\[\d\]\.file' is '/etc/hostname'"),
    (lambda m: m.update(num_user_inputs=-1), r"'num_user_inputs' is -1"),
])
def test_manifest_field_types_are_checked(ours, edit, match):
    _edit_manifest(ours, edit)
    with pytest.raises(export.BundleError, match=match):
        export.load(ours)


def test_manifest_not_utf8_or_too_deep_or_a_directory(ours):
    (ours / "manifest.json").write_bytes(b'{"format_version": 1, "x": "\xff"}')
    with pytest.raises(export.BundleError, match="manifest.json: not UTF-8 text"):
        export.load(ours)
    (ours / "manifest.json").write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(export.BundleError, match="manifest.json: not JSON we accept"):
        export.load(ours)
    os.remove(ours / "manifest.json")
    os.mkdir(ours / "manifest.json")
    with pytest.raises(export.BundleError, match="manifest.json: a directory"):
        export.load(ours)


def test_module_file_is_a_directory(ours):
    os.remove(ours / "module.mlir")
    os.mkdir(ours / "module.mlir")
    with pytest.raises(export.BundleError, match="module.mlir: a directory"):
        export.load(ours)


def test_unranked_main_argument(ours):
    (ours / "module.mlir").write_text(
        "func.func @main(%arg0: tensor<f32>, %arg1: tensor<*xf32>) -> tensor<*xf32> {\n"
        "  return %arg1 : tensor<*xf32>\n}\n")
    with pytest.raises(export.BundleError, match=r"module.mlir: main's argument 1 \(buffer 'offset'\): type tensor<\*xf32> is not a ranked tensor"):
        export.load(ours)


@pytest.mark.parametrize("header,match", [
    (b"{'descr': '<f4', 'fortran_order': False, 'shape': (4,", "not a plain numeric .npy"),  # tokenize error
    (b"{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,), }", "header says 4398046511104 bytes"),
    (b"{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", "negative dimension"),
    (b"{'descr': '<U4', 'fortran_order': False, 'shape': (4,), }", "dtype <U4 is not a plain numeric dtype"),
])
def test_npy_header_checked_before_reading_data(ours, header, match):
    m = json.loads((ours / "manifest.json").read_text())
    path = ours / _weight(m)["file"]
    header += b" " * (63 - len(header) % 64) + b"\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + b"\0" * 16)
    with pytest.raises(export.BundleError, match=match) as e:
        export.load(ours)
    assert str(path) in str(e.value)


def _edit_meta(d, edit):
    p = d / "functions" / "forward.meta"
    meta = json.loads(p.read_text())
    meta = edit(meta)
    p.write_text(json.dumps(meta))


@pytest.mark.parametrize("edit,match", [
    (lambda m: None, "expected a JSON object, got NoneType"),
    (lambda m: (m["input_locations"][0].pop("type_"), m)[1], r"missing field 'input_locations\[0\]\.type_'"),
    (lambda m: (m.update(input_signature=None), m)[1], "field 'input_signature' must be list, got NoneType"),
    (lambda m: (m["input_signature"][0].update(shape=["4"]), m)[1], r"'input_signature\[0\]\.shape\[0\]' must be int, got str"),
    (lambda m: (m.update(unused_inputs=[[{"position": 1}]]), m)[1], r"missing field 'unused_inputs\[0\]\[1\]'"),
])
def test_torch_xla_meta_fields_are_checked(theirs, edit, match):
    _edit_meta(theirs, edit)
    with pytest.raises(export.BundleError, match=match) as e:
        export.load(theirs)
    assert "forward.meta" in str(e.value)


def test_torch_xla_meta_symlink_loop(theirs):
    p = theirs / "functions" / "forward.meta"
    os.remove(p)
    os.symlink("forward.meta", p)
    with pytest.raises(export.BundleError, match="forward.meta: unreadable"):
        export.load(theirs)


def test_uncompilable_module_is_a_bundle_error_at_run(tmp_path):
    """Parses and verifies, so load accepts it; XLA then rejects the unknown custom call."""
    text = ("func.func @main(%arg0: tensor<f32>) -> tensor<f32> {\n"
            "  %0 = stablehlo.custom_call @txe_no_such_target(%arg0) {has_side_effect = true} "
            ": (tensor<f32>) -> tensor<f32>\n"
            "  return %0 : tensor<f32>\n}\n")
    manifest = export.Manifest(inputs=[export.Input(0, "user_input", [], "float32", position=0)], collectives=[],
                               outputs=[{"shape": [], "dtype": "float32"}], unused_inputs=[], num_user_inputs=1)
    export.Bundle(text, manifest, {}).save(tmp_path)
    b = export.load(tmp_path)
    with pytest.raises(export.BundleError, match="module.mlir: XLA cannot compile main .*txe_no_such_target"):
        export.run(b, np.float32(1.0))


def test_big_endian_npy_loads_and_runs(ours):
    """A valid .npy in big-endian byte order is data, not corruption: it loads in native order."""
    m = json.loads((ours / "manifest.json").read_text())
    path = ours / _weight(m)["file"]
    w = np.load(path)
    np.save(path, w.astype(">f4"))
    b = export.load(ours)
    assert b.arrays[_weight(m)["file"]].dtype == np.dtype("float32")
    np.testing.assert_array_equal(b.arrays[_weight(m)["file"]], w)
    assert len(export.run(b, *S.user_inputs(b.manifest))) == len(m["outputs"])


def test_torch_xla_weight_disagrees_with_signature(theirs):
    np.save(theirs / "data" / "lin.weight", np.zeros((0,), np.float32))
    os.replace(theirs / "data" / "lin.weight.npy", theirs / "data" / "lin.weight")
    with pytest.raises(export.BundleError, match=r"data/lin.weight: float32\[0\] but meta field 'input_signature\[\d\]' is float32\[4, 4\]"):
        export.load(theirs)


def _nested_module(depth):
    t = "tuple<" * depth + "tensor<f32>" + ">" * depth
    return f"func.func @main(%arg0: {t}) -> {t} {{\n  return %arg0 : {t}\n}}\n"


def test_deeply_nested_module_text_is_refused_not_a_crash(ours):
    """MLIR's parser recursed per nesting level and overflowed the stack (SIGSEGV) at ~50k levels."""
    (ours / "module.mlir").write_text(_nested_module(100000))
    with pytest.raises(export.BundleError, match=r"module.mlir: nested 100002 levels deep \(more than 1000\)"):
        export.load(ours)


def _nested_artifact(depth):
    from jax._src.interpreters import mlir as jmlir
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import hlo

    with jmlir.make_ir_context():
        module = ir.Module.parse(_nested_module(depth))
        return hlo.serialize_portable_artifact(module, hlo.get_current_version())


def test_deeply_nested_portable_artifact_is_refused_not_a_crash(ours, monkeypatch):
    """The bytecode reader overflowed the main thread's stack at 10k levels (a 50 KB file): it now
    runs on a big-stack thread of the reader process, and what still overflows that stack crashes
    the reader process only (here with a stack too small for 10k levels): a BundleError."""
    from torch_xla_ext.export import artifact_reader as compat

    os.remove(ours / "module.mlir")
    (ours / "module.mlirbc").write_bytes(_nested_artifact(10000))
    with pytest.raises(export.BundleError, match=r"module.mlirbc: nested 1000[0-9] levels deep"):
        export.load(ours)
    monkeypatch.setattr(compat, "_READER_STACK_BYTES", 1 << 20)
    with pytest.raises(export.BundleError, match=r"module.mlirbc: not a StableHLO portable artifact "
                                                 r"\(the bytecode reader crashed with SIGSEGV\)"):
        export.load(ours)
    monkeypatch.undo()  # a new reader process, with the big stack again
    with pytest.raises(export.BundleError, match=r"module.mlirbc: nested 1000[0-9] levels deep"):
        export.load(ours)


def test_reader_process_is_restarted_and_bounded_by_its_timeout(ours):
    """A reader that does not answer in time (here: stopped with SIGSTOP, so it cannot) is ended,
    not waited for, and the next artifact gets a new one; the reader is this Python's subprocess,
    not a fork of the loading process."""
    import signal
    import subprocess

    from torch_xla_ext.export import artifact_reader as compat

    data = (ours / "module.mlirbc").read_bytes()
    assert "func.func" in compat.portable_artifact_to_text(data, "first")
    first = compat.reader_process()
    assert isinstance(first, subprocess.Popen) and first.args[0] == sys.executable
    os.kill(first.pid, signal.SIGSTOP)
    with pytest.raises(ValueError, match=r"where: not a StableHLO portable artifact \(the bytecode reader did not "
                                         r"finish in 1 s\)"):
        compat.portable_artifact_to_text(data, "where", timeout=1)
    assert first.poll() == -signal.SIGKILL  # ended, not left stopped
    assert "func.func" in compat.portable_artifact_to_text(data, "again")
    assert compat.reader_process() is not first


def test_portable_artifact_that_crashes_the_reader_is_a_bundle_error(ours):
    """Two bytes flipped near the end of module.mlirbc made MLIR's bytecode reader segfault in
    the loading process; it now runs in a reader process and the crash is a BundleError."""
    os.remove(ours / "module.mlir")
    data = bytearray((ours / "module.mlirbc").read_bytes())
    data[int(0.983697203330548 * len(data))] = 121
    data[-1] = 121
    (ours / "module.mlirbc").write_bytes(bytes(data))
    with pytest.raises(export.BundleError, match=r"module.mlirbc: not a StableHLO portable artifact \(the bytecode reader crashed with SIGSEGV\)"):
        export.load(ours)


def test_bfloat16_weights_round_trip(tmp_path):
    """np.save writes bfloat16 as an opaque '<V2' the loader refuses; save stores the bits as
    uint16 and load views them back through the manifest's dtype."""
    import ml_dtypes

    text = ("func.func @main(%arg0: tensor<3xbf16>, %arg1: tensor<3xbf16>) -> tensor<3xbf16> {\n"
            "  %0 = stablehlo.add %arg0, %arg1 : tensor<3xbf16>\n  return %0 : tensor<3xbf16>\n}\n")
    w = np.array([1.5, -2.0, 3.25], ml_dtypes.bfloat16)
    manifest = export.Manifest(
        inputs=[export.Input(0, "parameter", [3], "bfloat16", name="w", file="weights/w.npy"),
                export.Input(1, "user_input", [3], "bfloat16", position=0)],
        collectives=[], outputs=[{"shape": [3], "dtype": "bfloat16"}], unused_inputs=[], num_user_inputs=1)
    export.Bundle(text, manifest, {"weights/w.npy": w}).save(tmp_path)
    b = export.load(tmp_path)
    assert b.arrays["weights/w.npy"].dtype == w.dtype
    x = np.array([0.5, 0.5, 0.5], ml_dtypes.bfloat16)
    np.testing.assert_array_equal(export.run(b, x)[0], w + x)
