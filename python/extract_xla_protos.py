"""Writes third_party/xla/*.proto: XLA's schema as the pinned jaxlib was built with it.

jaxlib links XLA's generated C++ protobuf code, which embeds each .proto file's
FileDescriptorProto (the compiled schema: messages, fields, numbers, enums, options; no comments).
This script finds those descriptors in jaxlib's shared library, follows their imports, and prints
them back as .proto files, so the vendored schema is exactly the one of the jaxlib in
python/requirements.txt rather than a copy of some other XLA commit. Run it after a jaxlib bump:

    .venv/bin/python python/extract_xla_protos.py            # rewrites third_party/xla/xla/...

google/protobuf/*.proto imports come with protoc and are not written. Nothing here needs the
protobuf Python package: the wire format is decoded by hand (descriptor.proto's field numbers).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import sys

ROOTS = ("xla/xla_data.proto", "xla/service/hlo.proto")
LICENSE = """/* Copyright 2017 The OpenXLA Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
==============================================================================*/
"""

# ---- protobuf wire format ----------------------------------------------------------------------


def _varint(b: bytes, i: int) -> tuple[int, int]:
    v = s = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << s
        s += 7
        if not c & 0x80:
            return v, i


def fields(b: bytes) -> list[tuple[int, int | bytes]]:
    """[(field number, int or bytes)] of one message, in wire order."""
    out, i = [], 0
    while i < len(b):
        tag, i = _varint(b, i)
        f, wt = tag >> 3, tag & 7
        if wt == 0:
            v, i = _varint(b, i)
        elif wt == 2:
            n, i = _varint(b, i)
            v, i = b[i:i + n], i + n
        elif wt == 1:
            v, i = int.from_bytes(b[i:i + 8], "little"), i + 8
        elif wt == 5:
            v, i = int.from_bytes(b[i:i + 4], "little"), i + 4
        else:
            raise ValueError(f"wire type {wt} in a descriptor")
        out.append((f, v))
    return out


def one(fs, n, default=None):
    vals = [v for f, v in fs if f == n]
    return vals[-1] if vals else default


def many(fs, n):
    return [v for f, v in fs if f == n]


def text(v) -> str:
    return v.decode() if isinstance(v, bytes) else v


# ---- finding descriptors in a binary ----------------------------------------------------------

# FileDescriptorProto's fields and wire types: the walk stops at the first byte that is not one.
_FILE_FIELDS = {1: 2, 2: 2, 3: 2, 4: 2, 5: 2, 6: 2, 7: 2, 8: 2, 9: 2, 10: 0, 11: 0, 12: 2, 14: 0}


def find_descriptor(data: bytes, name: str) -> bytes:
    nb = name.encode()
    m = re.search(re.escape(b"\n" + bytes([len(nb)]) + nb + b"\x12"), data)
    if not m:
        raise SystemExit(f"extract_xla_protos: no descriptor of {name} in the library")
    i, seen_other = m.start(), False
    while i < len(data):
        tag, j = _varint(data, i)
        f, wt = tag >> 3, tag & 7
        if _FILE_FIELDS.get(f) != wt or (f == 1 and seen_other):
            break
        if wt == 2:
            n, j = _varint(data, j)
            j += n
        else:
            _, j = _varint(data, j)
        if j > len(data):
            break
        seen_other, i = seen_other or f != 1, j
    return data[m.start():i]


# ---- printing a FileDescriptorProto as .proto ------------------------------------------------

_TYPES = {1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64", 7: "fixed32", 8: "bool",
          9: "string", 12: "bytes", 13: "uint32", 15: "sfixed32", 16: "sfixed64", 17: "sint32", 18: "sint64"}
_FILE_OPTIONS = {1: ("java_package", "s"), 8: ("java_outer_classname", "s"), 10: ("java_multiple_files", "b"),
                 11: ("go_package", "s"), 31: ("cc_enable_arenas", "b"), 36: ("objc_class_prefix", "s"),
                 37: ("csharp_namespace", "s"), 9: ("optimize_for", "e")}
_OPTIMIZE = {1: "SPEED", 2: "CODE_SIZE", 3: "LITE_RUNTIME"}


def _opt_value(kind, v):
    if kind == "s":
        return '"' + text(v).replace("\\", "\\\\").replace('"', '\\"') + '"'
    if kind == "b":
        return "true" if v else "false"
    return _OPTIMIZE.get(v, str(v))


def _field_options(fs) -> list[str]:
    opts = fields(one(fs, 8, b""))
    out = []
    if one(opts, 2) is not None:
        out.append(f"packed = {'true' if one(opts, 2) else 'false'}")
    if one(opts, 3):
        out.append("deprecated = true")
    if one(opts, 5):
        out.append("lazy = true")
    if one(fs, 7) is not None:
        out.append(f"default = {text(one(fs, 7))}")
    return out


def _type_name(fs, pkg: str) -> str:
    t = one(fs, 5)
    if t in (11, 14):
        return text(one(fs, 6))  # fully qualified (".xla.ShapeProto"), as the descriptor has it
    return _TYPES[t]


def _print_enum(fs, ind: str) -> list[str]:
    out = [f"{ind}enum {text(one(fs, 1))} {{"]
    opts = fields(one(fs, 3, b""))
    if one(opts, 2):
        out.append(f"{ind}  option allow_alias = true;")
    for v in many(fs, 2):
        vf = fields(v)
        number = one(vf, 2, 0)
        number = number - (1 << 64) if number >= 1 << 63 else number
        vopts = fields(one(vf, 3, b""))
        suffix = " [deprecated = true]" if one(vopts, 1) else ""
        out.append(f"{ind}  {text(one(vf, 1))} = {number}{suffix};")
    out += _reserved(fs, 4, 5, ind + "  ", inclusive_end=True)
    return out + [f"{ind}}}"]


def _reserved(fs, range_field, name_field, ind, inclusive_end) -> list[str]:
    out = []
    for r in many(fs, range_field):
        rf = fields(r)
        start, end = one(rf, 1, 0), one(rf, 2, 0)
        end = end if inclusive_end else end - 1
        out.append(f"{ind}reserved {start};" if start == end else f"{ind}reserved {start} to {end};")
    out += [f'{ind}reserved "{text(n)}";' for n in many(fs, name_field)]
    return out


def _print_message(fs, ind: str, pkg: str, scope: str) -> list[str]:
    name = text(one(fs, 1))
    out = [f"{ind}message {name} {{"]
    nested = {text(one(fields(n), 1)): fields(n) for n in many(fs, 3)}
    maps = {k for k, v in nested.items() if one(fields(one(v, 7, b"")), 7)}
    for n, nf in nested.items():
        if n not in maps:
            out += _print_message(nf, ind + "  ", pkg, f"{scope}.{name}")
    for e in many(fs, 4):
        out += _print_enum(fields(e), ind + "  ")
    oneofs = [text(one(fields(o), 1)) for o in many(fs, 8)]
    field_list = [fields(f) for f in many(fs, 2)]
    synthetic = {one(f, 9) for f in field_list if one(f, 17)}  # proto3 `optional`
    printed_oneofs = set()
    for f in field_list:
        oi = one(f, 9)
        if oi is not None and oi not in synthetic:
            if oi in printed_oneofs:
                continue
            printed_oneofs.add(oi)
            out.append(f"{ind}  oneof {oneofs[oi]} {{")
            for g in field_list:
                if one(g, 9) == oi:
                    out.append(f"{ind}    {_field_line(g, pkg, f'{scope}.{name}', nested, maps)}")
            out.append(f"{ind}  }}")
            continue
        out.append(f"{ind}  {_field_line(f, pkg, f'{scope}.{name}', nested, maps)}")
    out += _reserved(fs, 9, 10, ind + "  ", inclusive_end=False)
    return out + [f"{ind}}}"]


def _field_line(f, pkg, scope, nested, maps) -> str:
    label = one(f, 4)
    type_name = text(one(f, 6, b""))
    local = type_name.rsplit(".", 1)[-1]
    if one(f, 5) == 11 and type_name == f".{pkg}{scope}.{local}" and local in maps:
        entry = nested[local]
        k, v = (fields(x) for x in many(entry, 2))
        decl = f"map<{_type_name(k, pkg)}, {_type_name(v, pkg)}>"
    else:
        decl = _type_name(f, pkg)
        if label == 3:
            decl = "repeated " + decl
        elif one(f, 17):
            decl = "optional " + decl
        elif label == 2:
            decl = "required " + decl
    opts = _field_options(f)
    suffix = f" [{', '.join(opts)}]" if opts else ""
    return f"{decl} {text(one(f, 1))} = {one(f, 3)}{suffix};"


def to_proto(descriptor: bytes, source: str) -> str:
    fs = fields(descriptor)
    pkg = text(one(fs, 2, b""))
    syntax = text(one(fs, 12, b"proto2")) or "proto2"
    out = [LICENSE, f"// {source}", "// Comments are not part of the compiled schema and are not reproduced here.", "",
           f'syntax = "{syntax}";', "", f"package {pkg};", ""]
    out += [f'import "{text(d)}";' for d in many(fs, 3)]
    if many(fs, 3):
        out.append("")
    for f, v in fields(one(fs, 8, b"")):
        if f in _FILE_OPTIONS:
            name, kind = _FILE_OPTIONS[f]
            out.append(f"option {name} = {_opt_value(kind, v)};")
    out.append("")
    for e in many(fs, 5):
        out += _print_enum(fields(e), "") + [""]
    for m in many(fs, 4):
        out += _print_message(fields(m), "", pkg, "") + [""]
    return "\n".join(out).rstrip() + "\n"


def jaxlib_library() -> str:
    spec = importlib.util.find_spec("jaxlib")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("extract_xla_protos: jaxlib is not importable here")
    path = os.path.join(list(spec.submodule_search_locations)[0], "libjax_common.so")
    if not os.path.isfile(path):
        raise SystemExit(f"extract_xla_protos: {path} not found (jaxlib's layout changed?)")
    return path


def extract(library: str) -> dict[str, bytes]:
    """{proto file name: FileDescriptorProto bytes} of ROOTS and their non-google imports."""
    data = open(library, "rb").read()
    out, todo = {}, list(ROOTS)
    while todo:
        name = todo.pop()
        if name in out or name.startswith("google/protobuf/"):
            continue
        out[name] = find_descriptor(data, name)
        todo += [text(d) for d in many(fields(out[name]), 3)]
    return out


def main() -> int:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.path.join(here, "third_party", "xla"))
    p.add_argument("--library", help="default: the importable jaxlib's libjax_common.so")
    a = p.parse_args()
    library = a.library or jaxlib_library()
    from importlib.metadata import version

    source = f"Extracted from jaxlib {version('jaxlib')} ({os.path.basename(library)}) by python/extract_xla_protos.py."
    for name, descriptor in sorted(extract(library).items()):
        path = os.path.join(a.out, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(to_proto(descriptor, source))
        print(f"extract_xla_protos: wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
