"""XLA's schema in third_party/xla is the pinned jaxlib's, and the C++ reader built on it reads
torch_xla's and jaxlib's real modules in one process with both loaded.

- The vendored .proto files are what python/extract_xla_protos.py prints from the descriptors
  embedded in the installed jaxlib (stale files fail here).
- protoc compiles them back into exactly those descriptors (the printer is faithful).
- `_ext` links its own protobuf runtime next to torch_xla's and jaxlib's; it parses an
  HloModuleProto from each and agrees with their own signatures."""

import importlib.util
import pathlib
import re
import shutil
import subprocess

import jax
import jax.numpy as jnp
import pytest
import torch
import torch_xla

import torch_xla_ext
from torch_xla_ext._ext import jax_call as _core

HERE = pathlib.Path(__file__).resolve().parent
ROOTS = [HERE.parent.parent, pathlib.Path(torch_xla_ext.__file__).resolve().parent.parent]
XLA_DIR = next(r / "third_party" / "xla" for r in ROOTS if (r / "third_party" / "xla" / "xla").is_dir())
FILES = ["xla/xla_data.proto", "xla/service/hlo.proto", "xla/service/metrics.proto"]


def _extractor():
    path = next(r / "python" / "extract_xla_protos.py" for r in ROOTS if (r / "python" / "extract_xla_protos.py").is_file())
    spec = importlib.util.spec_from_file_location("extract_xla_protos", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def jaxlib_descriptors():
    x = _extractor()
    return x, x.extract(x.jaxlib_library())


def test_vendored_protos_are_the_pinned_jaxlibs(jaxlib_descriptors):
    x, descriptors = jaxlib_descriptors
    assert sorted(descriptors) == sorted(FILES)
    from importlib.metadata import version

    for name in FILES:
        source = f"Extracted from jaxlib {version('jaxlib')} (libjax_common.so) by python/extract_xla_protos.py."
        assert (XLA_DIR / name).read_text() == x.to_proto(descriptors[name], source), \
            f"third_party/xla/{name} is stale: rerun python/extract_xla_protos.py"


def _normalize(x, msg: bytes, kind: str):
    """A descriptor as nested lists, json_name dropped (protoc fills it; embedded copies omit it)."""
    sub = {"file": {4: "message", 5: "raw"}, "message": {2: "field", 3: "message"}, "field": {}}[kind]
    out = []
    for f, v in x.fields(msg):
        if kind == "field" and f == 10:
            continue
        out.append((f, _normalize(x, v, sub[f]) if f in sub and sub[f] != "raw" else v))
    return out


def test_protoc_compiles_the_vendored_files_into_jaxlibs_descriptors(jaxlib_descriptors, tmp_path):
    x, descriptors = jaxlib_descriptors
    protoc = shutil.which("protoc") or "/usr/bin/protoc"
    out = tmp_path / "set.binpb"
    subprocess.run([protoc, f"-I{XLA_DIR}", f"--descriptor_set_out={out}", *FILES], check=True, timeout=300)
    compiled = {x.text(x.one(x.fields(f), 1)): f for f in x.many(x.fields(out.read_bytes()), 1)}
    for name in FILES:
        assert _normalize(x, compiled[name], "file") == _normalize(x, descriptors[name], "file"), name
    # The comparison sees a change: a renumbered enum value differs.
    broken = (XLA_DIR / "xla/xla_data.proto").read_text().replace("F8E8M0FNU = 33;", "F8E8M0FNU = 35;")
    (tmp_path / "xla").mkdir()
    (tmp_path / "xla/xla_data.proto").write_text(broken)
    subprocess.run([protoc, f"-I{tmp_path}", f"--descriptor_set_out={tmp_path / 'b.binpb'}", "xla/xla_data.proto"],
                   check=True, timeout=300)
    changed = x.many(x.fields((tmp_path / "b.binpb").read_bytes()), 1)[0]
    assert _normalize(x, changed, "file") != _normalize(x, descriptors["xla/xla_data.proto"], "file")


def _strip(s) -> str:
    return re.sub(r"/\*index=\d+\*/", "", re.sub(r"\{[^{}]*\}", "", str(s)))


def test_reads_torch_xla_and_jaxlib_modules_in_one_process():
    # torch_xla (_XLAC links its own protobuf) and jaxlib (its own) are loaded; _ext has a third.
    dev = torch_xla.device()
    t = torch.randn(3, 5).to(dev).to(torch.bfloat16).sum(0) + torch.arange(5).to(dev)
    proto = torch_xla._XLAC._get_xla_tensors_hlo_proto([t])
    sig = _core.read_hlo_signature(proto)
    entry = next(line for line in torch_xla._XLAC._get_xla_tensors_hlo([t]).splitlines() if line.startswith("ENTRY"))
    params = [_strip(p.split(": ", 1)[1]) for p in re.split(r", (?=[\w.]+: )", entry[entry.index("(") + 1:entry.index(") ->")])]
    assert [str(p) for p in sig.parameters] == params
    hlo = jax.jit(lambda a, b: (a @ b, a.sum())).lower(jax.ShapeDtypeStruct((2, 3), jnp.bfloat16),
                                                       jax.ShapeDtypeStruct((3, 4), jnp.bfloat16)).compiler_ir("hlo")
    jsig = _core.read_hlo_signature(hlo.as_serialized_hlo_module_proto())
    ps = hlo.program_shape()
    assert [str(p) for p in jsig.parameters] == [_strip(s) for s in ps.parameter_shapes()]
    assert [str(r) for r in jsig.results] == [_strip(s) for s in ps.result_shape().tuple_shapes()]
    # Both runtimes still work after ours parsed their messages.
    assert float(t.cpu().float().sum()) == pytest.approx(float(t.cpu().float().sum()))
    assert float(jnp.ones(3).sum()) == 3.0
