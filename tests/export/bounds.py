"""The one bound for "the same StableHLO, compiled by two XLA builds" (JAX's jaxlib vs torch_xla,
or one program and its rewrite), shared by the export tests.

Both compile the same float32 operations, rounded at the same points. What may differ is the
order in which each build's Eigen kernels sum a contraction (dot, convolution, reduction): the
blocking depends on the build and on the CPU (docs/export.md, "Bit-equality"), so bit patterns are
not part of the contract. Reordering a float32 sum of K terms moves it by at most about
K*eps*sum|terms| and typically by sqrt(K)*eps*|sum|; through a network of normalised layers that
stays a small multiple of eps relative to the output's scale (its greatest magnitude). So every
element must lie within ORDER_TOLERANCE * eps * scale of the other's: 2**8 eps leaves room for
sqrt(K) <= 64 and the zoo's depth, and is still ~3e-5 of the scale, where any change of math
(another weight, a dropped op) moves outputs by O(1) of it. Measured on the first machine: 0 ULP
everywhere; on another EPYC, mobilenet_v3 moved by 72 ULP = 1.2e-16 on logits of scale ~1e-10
(~1e-6 of the scale). Integer and bool outputs have no summation order: equal.

Bit-equality is a figure, not an assert: ``assert_same_program`` returns it, prints it and, under
Bazel, appends it to FIGURES in the test's undeclared outputs.
"""

from __future__ import annotations

import json
import os

import numpy as np

from torch_xla_ext import numerics

ORDER_TOLERANCE = 2**8
FIGURES = "export_bit_equality.jsonl"


def assert_same_program(got, want, what: str, label: str = "") -> dict:
    """Asserts the bound above on every output (lists of arrays, torch_xla's or the reference's
    second); returns the figures: elements, bit-equal elements, max ULP, max |diff| / scale."""
    got, want = list(got), list(want)
    assert len(got) == len(want), f"{what}: {len(got)} outputs, the reference has {len(want)}"
    figures = {"label": label, "what": what, "elements": 0, "bit_equal": 0, "max_ulp": 0, "max_diff_to_scale": 0.0}
    for k, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape, (
            f"{what}: output {k} is {g.dtype}{g.shape}, the reference's {w.dtype}{w.shape}")
        if g.dtype.kind in "fc" or g.dtype.name == "bfloat16":
            report = numerics.compare(g.real if g.dtype.kind == "c" else g, w.real if w.dtype.kind == "c" else w,
                                      rtol=0, atol=0) if g.dtype.kind != "c" else None
            g64, w64 = g.astype(np.complex128 if g.dtype.kind == "c" else np.float64), w.astype(
                np.complex128 if w.dtype.kind == "c" else np.float64)
            assert (np.isfinite(g64) == np.isfinite(w64)).all(), f"{what}: output {k}: non-finite elements differ"
            finite = np.isfinite(w64)
            scale = float(np.abs(w64[finite]).max(initial=0.0))
            diff = float(np.abs(g64[finite] - w64[finite]).max(initial=0.0))
            tol = ORDER_TOLERANCE * float(np.finfo(g.real.dtype if g.dtype.kind == "c" else g.dtype).eps) * scale
            assert diff <= tol, (f"{what}: output {k} differs by {diff:.3g} > {ORDER_TOLERANCE} eps x scale "
                                 f"{scale:.3g} = {tol:.3g}" + (f"\n{report}" if report else ""))
            figures["bit_equal"] += int((g.view(f"u{g.dtype.itemsize}") == w.view(f"u{w.dtype.itemsize}")).sum()) \
                if g.dtype.itemsize <= 8 else int((g == w).sum())
            figures["max_ulp"] = max(figures["max_ulp"], report.max_ulp if report else 0)
            figures["max_diff_to_scale"] = max(figures["max_diff_to_scale"], diff / scale if scale else 0.0)
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"{what}: output {k}")
            figures["bit_equal"] += g.size
        figures["elements"] += g.size
    line = json.dumps(figures)
    print(line)
    out = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR")
    if out:
        with open(os.path.join(out, FIGURES), "a") as f:
            f.write(line + "\n")
    return figures
