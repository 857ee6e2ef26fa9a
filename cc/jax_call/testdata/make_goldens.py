"""Writes the golden HloModuleProtos the C++ reader is tested on (cc/jax_call/hlo_signature_test),
each with the entry signature as its producer prints it (the oracle), so the test's expectations
come from jaxlib and torch_xla, not from the reader's own field numbers.

    PJRT_DEVICE=CPU .venv/bin/python cc/jax_call/testdata/make_goldens.py

<name>.hlo.pb        the serialized module (jaxlib: `Lowered.compiler_ir("hlo")`; torch_xla:
                     `_XLAC._get_xla_tensors_hlo_proto`)
<name>.signature     one line per parameter then `-> result`, in HLO text with layouts removed, as
                     the producer's own ProgramShape prints it
"""

from __future__ import annotations

import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def _strip_layout(s: str) -> str:
    return re.sub(r"/\*index=\d+\*/", "", re.sub(r"\{[^{}]*\}", "", str(s)))


def _write(name: str, proto: bytes, params: list[str], result: str) -> None:
    with open(os.path.join(HERE, f"{name}.hlo.pb"), "wb") as f:
        f.write(proto)
    with open(os.path.join(HERE, f"{name}.signature"), "w") as f:
        f.write("".join(p + "\n" for p in params) + f"-> {result}\n")
    print(f"make_goldens: {name}: {len(proto)} bytes", file=sys.stderr)


def jax_goldens() -> None:
    import jax
    import jax.numpy as jnp
    import ml_dtypes

    def lowered(fn, *specs):
        hlo = jax.jit(fn, keep_unused=True).lower(*specs).compiler_ir("hlo")
        ps = hlo.program_shape()
        params = [_strip_layout(s) for s in ps.parameter_shapes()]
        return hlo.as_serialized_hlo_module_proto(), params, _strip_layout(ps.result_shape())

    S = jax.ShapeDtypeStruct
    # Everyday types, a tuple result, a scalar and an empty dimension.
    _write("jax_mixed", *lowered(lambda a, b, c, d: (a + 1, b, c.sum(), d),
                                 S((2, 3), jnp.bfloat16), S((), jnp.bool_), S((7,), jnp.int8), S((0, 4), jnp.uint32)))
    # The newer ml_dtypes types XLA names after F8E4M3FNUZ (XLA's PrimitiveType 26..33).
    newer = [ml_dtypes.int2, ml_dtypes.uint2, ml_dtypes.float8_e4m3, ml_dtypes.float8_e3m4,
             ml_dtypes.float4_e2m1fn, ml_dtypes.float8_e8m0fnu, ml_dtypes.int4, ml_dtypes.float8_e4m3b11fnuz]
    _write("jax_new_dtypes", *lowered(lambda *xs: xs[::-1], *(S((2, i + 1), d) for i, d in enumerate(newer))))


def torch_xla_goldens() -> None:
    import torch
    import torch_xla

    dev = torch_xla.device()
    x = torch.randn(4, 8).to(dev)
    w = torch.randn(8, 3, dtype=torch.bfloat16).to(dev)
    ids = torch.arange(4).to(dev)
    out = (x.to(torch.bfloat16) @ w).float().sum(1) + ids
    proto = torch_xla._XLAC._get_xla_tensors_hlo_proto([out])
    text = torch_xla._XLAC._get_xla_tensors_hlo([out])
    # torch_xla's HLO text: "ENTRY %IrToHlo.N (p0.1: f32[4,8], ...) -> (f32[4]) {"
    entry = next(line for line in text.splitlines() if line.startswith("ENTRY"))
    m = re.match(r"ENTRY %\S+ \((?P<params>.*)\) -> (?P<result>.*) \{$", entry)
    params = [_strip_layout(p.split(": ", 1)[1]) for p in re.split(r", (?=[\w.]+: )", m.group("params")) if p]
    _write("torch_xla_linear", proto, params, _strip_layout(m.group("result")))


if __name__ == "__main__":
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    torch_xla_goldens()
    jax_goldens()
