"""Hypothesis strategies that corrupt exported bundles, and the property every corrupted bundle
must satisfy: `export.load` either returns a bundle (which `manifest.table()` can show and `run`
can execute on inputs built from its manifest, or reject with RunInputError/BundleError), or raises
BundleError / BundleFileNotFoundError. Never another exception, never unpickling.

Shared by tests/export/bundle_fuzz_test.py (short, derandomized budget) and bench/export_fuzz.py
(long budget). A mutation is plain data (a tuple) so a failing case prints as a reproducer:
indices into the bundle's sorted file list or the JSON document's node list are taken modulo its
length, so every mutation applies to every seed.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import tempfile

import numpy as np
from hypothesis import strategies as st

from torch_xla_ext import export

# Each test/bench process plants pickles whose __reduce__ would create this file.
MARKER = os.path.join(tempfile.gettempdir(), f"txe_fuzz_unpickled_{os.getpid()}")


class Boom:
    """Unpickling this creates MARKER: it must never happen."""

    def __reduce__(self):
        return (open, (MARKER, "w"))


# --- seed bundles ------------------------------------------------------------------------------

SEEDS = ("two_all_reduces", "two_all_reduces_mlirbc_only", "one_all_reduce", "torch_xla_dir", "mixed",
         "torchax_four_reduces")


def make_seeds(root: str) -> dict[str, str]:
    """Small valid bundles under `root`: our format for the two-all-reduce model (collective
    token, scale 0.5, parameters, a buffer, a lifted constant, an unused input), the same with only
    the portable artifact, the one-all-reduce model, torch_xla's own save_as_stablehlo
    directory of the two-all-reduce model, the mixed model (named user inputs and outputs, an
    int64 and a complex64 buffer, a Python constant), and torchax's export of four c10d
    all-reduces for 2 replicas (frontend, num_replicas, pmean's division). Needs torch/torch_xla
    and torchax (the loader does not)."""
    import torch
    from torch_xla import stablehlo as txla_stablehlo

    from tests.export import models, torchax_models

    dirs = {name: os.path.join(root, name) for name in SEEDS}
    model, args = models.two_all_reduces()
    export.export(model, args).save(dirs["two_all_reduces"])
    shutil.copytree(dirs["two_all_reduces"], dirs["two_all_reduces_mlirbc_only"])
    os.remove(os.path.join(dirs["two_all_reduces_mlirbc_only"], export.MODULE_FILE))
    model1, args1 = models.one_all_reduce()
    export.export(model1, args1).save(dirs["one_all_reduce"])
    txla_stablehlo.save_as_stablehlo(torch.export.export(model, args), dirs["torch_xla_dir"])
    model2, args2 = models.mixed()
    export.export(model2, args2).save(dirs["mixed"])
    model3, args3 = torchax_models.four_reduces()
    export.export(model3, args3, frontend="torchax",
                  options=export.ExportOptions(num_replicas=2)).save(dirs["torchax_four_reduces"])
    for d in dirs.values():  # each seed must load: the property starts from valid bundles
        export.load(d)
    return dirs


def json_file(d: str) -> str:
    if os.path.exists(os.path.join(d, export.MANIFEST_FILE)):
        return os.path.join(d, export.MANIFEST_FILE)
    return os.path.join(d, "functions", "forward.meta")


def _files(d: str) -> list[str]:
    out = []
    for base, dirs, files in os.walk(d):
        dirs.sort()
        out += [os.path.join(base, f) for f in sorted(files)]
    return out


def _dirs(d: str) -> list[str]:
    return sorted(os.path.join(b, x) for b, ds, _ in os.walk(d) for x in ds)


# --- strategies --------------------------------------------------------------------------------

_NUMBERS = st.sampled_from([0, 1, -1, 2, 7, 2**31, 2**63, -(2**63) - 1, 10**400, 0.5, -0.0, 1e308,
                            float("inf"), float("-inf"), float("nan")])
_STRINGS = st.sampled_from(
    list(export.INPUT_KINDS) + ["weights", "", "f32", "float32", "bfloat16", "float16", "int64", "bool",
                                "complex64", "object", "torch.float32", "input_arg", "parameter",
                                "constant", "all_reduce", "sum", "lin.weight", "../manifest.json",
                                "/etc/hostname", "weights", "constants/0.npy", "weights/lin.weight.npy",
                                "module.mlir", "\udcff", "\x00", "é" * 3, "python:float", "python:int",
                                "python:list", "python:", "complex128", "output['logits']", "output", "torchax", "torch_xla",
                                "buffer", "user_input", "bn.running_mean"]) | st.text(max_size=8)
_SCALARS = st.none() | st.booleans() | _NUMBERS | st.integers(-3, 10) | _STRINGS
JSON_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_STRINGS, inner, max_size=3),
    max_leaves=8)
SHAPES = st.lists(st.integers(-2, 6) | _NUMBERS, max_size=4)

_node = st.integers(0, 10**6)
_file = st.integers(0, 10**6)
_frac = st.floats(0, 1)

# The manifest fields of format 2, set directly (json_set reaches them only by chance).
NEW_FIELDS = ("outputs.name", "inputs.name", "unused_inputs.name", "unused_inputs.value", "unused_inputs.dtype",
              "format_version", "frontend", "num_replicas", "dropped_mutations")

JSON_MUTATIONS = st.one_of(
    st.tuples(st.just("json_field"), st.sampled_from(NEW_FIELDS), _node, JSON_VALUES),
    st.tuples(st.just("json_set"), _node, JSON_VALUES),
    st.tuples(st.just("json_set"), _node, SHAPES),
    st.tuples(st.just("json_drop"), _node),
    st.tuples(st.just("json_dup"), _node),
    st.tuples(st.just("json_deep"), _node, st.sampled_from([50, 5000, 200000])),
    st.tuples(st.just("json_bytes"), _frac, st.sampled_from([b"\xff", b"\xc3(", b"\x00", b"\xed\xa0\x80", b""]),
              st.integers(0, 4)),
)
NPY_HEADERS = st.tuples(
    st.sampled_from(["<f4", "<f8", ">f4", "|b1", "<i8", "|O", "<U4", "|V2", "<c8", "'<f4'", "[('a', '<f4')]",
                     "'garbage'", "<M8[s]", "|S3"]),
    st.booleans(),
    st.lists(st.integers(-1, 5) | st.sampled_from([2**40, 2**62, 10**30]), max_size=3),
    st.sampled_from([b"\x01\x00", b"\x02\x00", b"\x03\x00", b"\x09\x09"]),
)
FILE_MUTATIONS = st.one_of(
    st.tuples(st.just("truncate"), _file, _frac),
    st.tuples(st.just("flip"), _file, st.lists(st.tuples(_frac, st.integers(0, 255)), min_size=1, max_size=4)),
    st.tuples(st.just("delete"), _file),
    st.tuples(st.just("delete_dir"), _file),
    st.tuples(st.just("pickle"), _file),
    st.tuples(st.just("npy_header"), _file, NPY_HEADERS),
    st.tuples(st.just("symlink_loop"), _file),
    st.tuples(st.just("to_dir"), _file),
    st.tuples(st.just("stray"), _file, st.sampled_from(["x", "7", "00", "x.npy", "forward.meta"])),
)
_TYPES = st.sampled_from(["tensor<f32>", "tensor<2x4xf32>", "tensor<4xf32>", "tensor<2x4xf16>", "tensor<2x4xbf16>",
                          "tensor<*xf32>", "tensor<?x4xf32>", "!stablehlo.token", "tensor<2x4xcomplex<f32>>",
                          "tensor<2x4xi1>", "tensor<0xf32>", "tensor<2x4xf8E4M3FN>", "tensor<4xi32>",
                          "tuple<tensor<f32>>", "tensor<2x4xui8>"])
_SNIPPETS = st.sampled_from(["}", "{", "%arg0", "%0", "func.func @main() {\n  return\n}\n",
                             "func.func private @main() {\n  return\n}\n", "stablehlo.all_reduce", "@main",
                             "@forward", "\"stablehlo.custom_call\"() {call_target_name = \"x\"} : () -> ()\n",
                             "module {}", "\x00", "\u2603", "tuple<" * 60000, "[" * 60000 + "]" * 60000,
                             "{" * 3000]) | st.text(max_size=6)
MODULE_MUTATIONS = st.one_of(
    st.tuples(st.just("text_retype"), _node, _TYPES),
    st.tuples(st.just("text_edit"), _frac, st.integers(0, 40), _SNIPPETS),
)
MUTATIONS = st.one_of(JSON_MUTATIONS, FILE_MUTATIONS, MODULE_MUTATIONS)
CASES = st.tuples(st.sampled_from(SEEDS), st.lists(MUTATIONS, min_size=1, max_size=3))


# --- applying a mutation -----------------------------------------------------------------------


def _nodes(doc) -> list[tuple]:
    """Paths of every node of a JSON document, root first."""
    out = [()]
    stack = [((), doc)]
    while stack:
        path, v = stack.pop()
        items = list(v.items()) if isinstance(v, dict) else list(enumerate(v)) if isinstance(v, list) else []
        for k, child in items:
            out.append(path + (k,))
            stack.append((path + (k,), child))
    return out


def _get(doc, path):
    for k in path:
        doc = doc[k]
    return doc


def _mutate_json(path: str, mutation: tuple) -> None:
    op = mutation[0]
    with open(path, "rb") as f:
        raw = f.read()
    if op == "json_bytes":
        _, frac, junk, cut = mutation
        pos = int(frac * len(raw))
        with open(path, "wb") as f:
            f.write(raw[:pos] + junk + raw[pos + cut:])
        return
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        return  # an earlier mutation broke the JSON: nothing to walk
    if op == "json_field":
        _, field, index, value = mutation
        if "." not in field:
            where = (field,)
        else:
            key, attr = field.split(".")
            items = doc.get(key) if isinstance(doc, dict) else None
            if not isinstance(items, list) or not items or not isinstance(items[index % len(items)], dict):
                return
            where = (key, index % len(items), attr)
        doc = _set(doc, where, value) if isinstance(doc, dict) else doc
        with open(path, "w", encoding="utf-8", errors="surrogatepass") as f:
            f.write(json.dumps(doc))
        return
    nodes = _nodes(doc)
    where = nodes[mutation[1] % len(nodes)]
    if op == "json_deep":
        text_value = "[" * mutation[2] + "]" * mutation[2]
        placeholder = "__txe_fuzz_deep__"
        doc = _set(doc, where, placeholder)
        text = json.dumps(doc).replace(json.dumps(placeholder), text_value)
    else:
        if op == "json_set":
            doc = _set(doc, where, mutation[2])
        elif op == "json_drop" and where:
            parent = _get(doc, where[:-1])
            del parent[where[-1]]
        elif op == "json_dup" and where:
            parent = _get(doc, where[:-1])
            value = parent[where[-1]]
            if isinstance(parent, list):
                parent.insert(where[-1], json.loads(json.dumps(value)))
            else:  # JSON text with the key twice: the last one wins in json.load
                text = json.dumps(doc)
                key = json.dumps(where[-1])
                text = text.replace(key + ":", f"{key}: {json.dumps(value)}, {key}:", 1)
                with open(path, "w") as f:
                    f.write(text)
                return
        text = json.dumps(doc)
    with open(path, "w", encoding="utf-8", errors="surrogatepass") as f:
        f.write(text)


def _set(doc, where, value):
    if not where:
        return value
    _get(doc, where[:-1])[where[-1]] = value
    return doc


def _npy_with_header(path: str, header: tuple) -> None:
    descr, fortran, shape, version = header
    try:
        with open(path, "rb") as f:
            data = np.load(f, allow_pickle=False).tobytes()
    except Exception:  # noqa: BLE001 - any junk will do as a payload
        with open(path, "rb") as f:
            data = f.read()
    d = descr if descr.startswith(("'", "[")) else repr(descr)
    text = "{'descr': %s, 'fortran_order': %s, 'shape': %s, }" % (d, fortran, tuple(shape))
    text += " " * (63 - len(text) % 64) + "\n"
    enc = text.encode("latin1")
    size = len(enc).to_bytes(2 if version == b"\x01\x00" else 4, "little")
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY" + version + size + enc + data)


def _mutate_module(d: str, mutation: tuple) -> None:
    targets = [p for p in _files(d) if p.endswith(".mlir") and not os.path.islink(p)]
    if not targets:
        return
    path = targets[mutation[1] % len(targets) if mutation[0] == "text_retype" else 0]
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        text = f.read()
    if mutation[0] == "text_retype":
        found = list(re.finditer(r"tensor<[^<>]*>", text))
        if not found:
            return
        m = found[mutation[1] % len(found)]
        text = text[:m.start()] + mutation[2] + text[m.end():]
    else:
        _, frac, cut, snippet = mutation
        pos = int(frac * len(text))
        text = text[:pos] + snippet + text[pos + cut:]
    with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write(text)


def apply(d: str, mutation: tuple) -> None:
    """Applies one mutation to the bundle directory `d` in place."""
    op = mutation[0]
    if op.startswith("json_"):
        jf = json_file(d)
        if os.path.isfile(jf) and not os.path.islink(jf):
            _mutate_json(jf, mutation)
        return
    if op.startswith("text_"):
        _mutate_module(d, mutation)
        return
    if op == "delete_dir":
        dirs = _dirs(d)
        if dirs:
            victim = dirs[mutation[1] % len(dirs)]
            if os.path.islink(victim):
                os.remove(victim)
            else:
                shutil.rmtree(victim)
        return
    files = [p for p in _files(d) if not os.path.islink(p)]
    if not files:
        return
    path = files[mutation[1] % len(files)]
    if op == "truncate":
        size = os.path.getsize(path)
        os.truncate(path, int(mutation[2] * size))
    elif op == "flip":
        with open(path, "rb") as f:
            data = bytearray(f.read())
        for frac, byte in mutation[2]:
            if data:
                data[min(int(frac * len(data)), len(data) - 1)] = byte
        with open(path, "wb") as f:
            f.write(bytes(data))
    elif op == "delete":
        os.remove(path)
    elif op == "pickle":
        with open(path, "wb") as f:
            np.save(f, np.array([Boom(), 1.0], dtype=object), allow_pickle=True)
    elif op == "npy_header":
        _npy_with_header(path, mutation[2])
    elif op == "symlink_loop":
        os.remove(path)
        os.symlink(os.path.basename(path), path)
    elif op == "to_dir":
        os.remove(path)
        os.mkdir(path)
    elif op == "stray":
        stray = os.path.join(os.path.dirname(path), mutation[2])
        if os.path.lexists(stray):
            shutil.rmtree(stray) if os.path.isdir(stray) and not os.path.islink(stray) else os.remove(stray)
        with open(stray, "wb") as f:
            f.write(b"\x93NUMPY" if mutation[2] != "x" else pickle.dumps(Boom()))


# --- the property ------------------------------------------------------------------------------

LOAD_ERRORS = (export.BundleError, export.BundleFileNotFoundError)
RUN_ERRORS = (export.RunInputError, export.BundleError)


def user_inputs(manifest: export.Manifest) -> list:
    """Inputs `run` should accept according to the manifest (zeros of the declared shape/dtype;
    a Python constant's recorded value)."""
    spec: dict[int, tuple[list[int], str]] = {}
    constants: dict[int, object] = {}
    for u in manifest.unused_inputs:
        if export.manifest.is_python_constant(u["dtype"]):
            constants[u["position"]] = u.get("value")
        else:
            spec[u["position"]] = (u["shape"], u["dtype"])
    for i in manifest.inputs:
        if i.kind == "user_input":
            spec[i.position] = (i.shape, i.dtype)
    out = []
    # A manifest may declare any count; beyond the declared positions (+ a few undeclared
    # non-tensor leaves) pass only those, which `run` must reject with RunInputError.
    count = manifest.num_user_inputs
    if count > len(manifest.inputs) + len(manifest.unused_inputs) + 8:
        count = len(spec) + len(constants)
    for p in range(count):
        if p in constants:
            out.append(constants[p])
            continue
        shape, dtype = spec.get(p, ([], "float32"))
        out.append(np.zeros(shape, export.manifest.np_dtype(dtype)))
    return out


def outcome(d: str) -> str:
    """Loads (and, if that succeeds, runs) the bundle at `d`; returns the outcome's name. Any
    exception other than our typed ones propagates: that is a loader bug."""
    try:
        bundle = export.load(d)
    except LOAD_ERRORS as e:
        return "load:" + type(e).__name__
    bundle.manifest.table()
    try:
        export.run(bundle, *user_inputs(bundle.manifest))
    except RUN_ERRORS as e:
        return "run:" + type(e).__name__
    return "loaded_and_ran"


def check_case(seeds: dict[str, str], seed: str, mutations: list[tuple], workdir: str) -> str:
    """Copies seed `seed`, applies `mutations`, and checks the property; returns the outcome."""
    d = os.path.join(workdir, "case")
    if os.path.lexists(d):
        shutil.rmtree(d)
    shutil.copytree(seeds[seed], d, symlinks=True)
    for m in mutations:
        apply(d, m)
    result = outcome(d)
    assert not os.path.exists(MARKER), f"the loader unpickled a planted object: {seed} {mutations}"
    return result
