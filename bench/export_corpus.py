"""torch_xla's own StableHLO export tests as a corpus for export: every program those tests hand to
torch_xla's exporter is captured, then run end to end two ways and compared with torch_xla's
execution of the same export:

- ours:   export.export(program.module(), example inputs) -> save -> load -> run
- theirs: torch_xla's own export, saved with save_as_stablehlo -> export.load -> run

Usage (torch_xla's tests are read from a checkout of pytorch/xla at the installed version; none of
their code is part of this project):

    PJRT_DEVICE=CPU python bench/export_corpus.py /path/to/pytorch-xla [--json out.json]

Prints one line per captured program (the test that made it, then each pipeline's outcome: "ok"
with the mismatch count against torch_xla, a typed error of ours (its class and message), or an
untyped failure) and the totals. Tests needing TensorFlow skip themselves when it is missing.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import importlib
import json
import os
import sys
import tempfile
import time
import unittest

import numpy as np

MODULES = [
    "test_composite", "test_export_fx_passes", "test_export_llama", "test_exports", "test_implicit_broadcasting",
    "test_mlir_debuginfo", "test_pt2e_qdq", "test_saved_model", "test_stablehlo_compile",
    "test_stablehlo_custom_call", "test_stablehlo_inference", "test_stablehlo_save_load",
    "test_unbounded_dynamism", "test_xla_export_interpreter",
]


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _capture(records: list, current: list):
    """Wraps torch_xla's exporter so every program a test exports is kept (with the test's id)."""
    import torch_xla.stablehlo as shlo

    original = shlo._exported_program_to_stablehlo_bundle

    def wrapper(exported_model, options):
        bundle = original(exported_model, options)
        records.append({"test": current[0], "ep": exported_model, "bundle": bundle, "options": options})
        return bundle

    shlo._exported_program_to_stablehlo_bundle = wrapper

    def restore() -> None:
        shlo._exported_program_to_stablehlo_bundle = original

    return restore


def _leaves(ep):
    import torch.utils._pytree as pytree

    args, kwargs = ep.example_inputs
    return pytree.tree_leaves((args, kwargs))


def _torch_xla_outputs(gm, leaves) -> list[np.ndarray]:
    import torch
    import torch_xla

    dev = torch_xla.device()
    res = gm(*[x.to(dev) if isinstance(x, torch.Tensor) else x for x in leaves])
    return [r.cpu().numpy() for r in torch.utils._pytree.tree_leaves(res)]


def _mismatch(ours: list, theirs: list) -> str:
    if len(ours) != len(theirs):
        return f"{len(ours)} outputs vs torch_xla's {len(theirs)}"
    bad = 0
    for o, t in zip(ours, theirs):
        o, t = np.asarray(o), np.asarray(t)
        if o.shape != t.shape or o.dtype != t.dtype:
            return f"output {o.dtype}{list(o.shape)} vs torch_xla's {t.dtype}{list(t.shape)}"
        same = (o == t) | ((o != o) & (t != t)) if o.dtype.kind in "fc" else (o == t)
        bad += int(np.size(same) - np.count_nonzero(same))
    return "bit-equal" if bad == 0 else f"{bad} elements differ"


def _outcome(fn) -> str:
    from torch_xla_ext.errors import TorchXlaExtError

    try:
        return "ok: " + fn()
    except TorchXlaExtError as e:
        return f"typed {type(e).__name__}: {str(e).splitlines()[0][:160]}"
    except Exception as e:  # noqa: BLE001 - every other failure is what this script counts
        return f"FAILED {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"


def _ours(rec, tmp: str) -> str:
    import torch

    from torch_xla_ext import export

    ep = rec["ep"]
    args, kwargs = ep.example_inputs
    fields = {"custom_ops_allowed_in_graph": tuple(rec["options"].custom_ops_allowed_in_graph or ()),
              "export_node_metadata": bool(rec["options"].export_node_metadata)}
    known = {f.name for f in dataclasses.fields(export.ExportOptions)}  # older versions have fewer
    opts = export.ExportOptions(**{k: v for k, v in fields.items() if k in known})
    bundle = export.export(ep.module(), tuple(args), dict(kwargs), options=opts)
    bundle.save(tmp)
    loaded = export.load(tmp)
    leaves = _leaves(ep)
    got = export.run(loaded, *[x.numpy() if isinstance(x, torch.Tensor) else x for x in leaves])
    return _mismatch(got, _torch_xla_outputs(bundle.torch_xla_export.graph_module, leaves))


def _theirs(rec, tmp: str) -> str:
    import torch
    from torch_xla import stablehlo as shlo

    from torch_xla_ext import export

    gm = shlo.StableHLOGraphModule(rec["bundle"])
    gm.save(tmp, rec["options"])
    loaded = export.load(tmp)
    leaves = _leaves(rec["ep"])
    got = export.run(loaded, *[x.numpy() if isinstance(x, torch.Tensor) else x for x in leaves])
    return _mismatch(got, _torch_xla_outputs(gm, leaves))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("xla_src", help="a pytorch/xla checkout (its test/stablehlo is read)")
    ap.add_argument("--json", help="write the per-program outcomes here")
    a = ap.parse_args()
    sys.path.insert(0, os.path.abspath(a.xla_src))  # its `test` package, ahead of the stdlib's
    for name in list(sys.modules):
        if name == "test" or name.startswith("test."):
            del sys.modules[name]

    records: list = []
    current = ["?"]
    restore = _capture(records, current)

    class Tracking(unittest.TextTestResult):
        def startTest(self, test):  # noqa: N802 - unittest's name
            current[0] = test.id().replace("test.stablehlo.", "")
            super().startTest(test)

    t0 = time.perf_counter()
    for mod in MODULES:
        try:
            suite = unittest.defaultTestLoader.loadTestsFromModule(importlib.import_module(f"test.stablehlo.{mod}"))
        except Exception as e:  # noqa: BLE001 - a module that cannot import here (e.g. needs tensorflow)
            _progress(f"{mod}: not imported ({type(e).__name__}: {e})")
            continue
        before = len(records)
        with open(os.devnull, "w") as sink:
            res = unittest.TextTestRunner(stream=sink, resultclass=Tracking, verbosity=0).run(suite)
        _progress(f"{mod}: {res.testsRun} tests ({len(res.failures)} failed, {len(res.errors)} errors, "
                  f"{len(res.skipped)} skipped), {len(records) - before} programs exported")

    restore()  # the pipelines below export too; only the tests' programs are the corpus
    rows = []
    for k, rec in enumerate(records):
        with tempfile.TemporaryDirectory() as d1, tempfile.TemporaryDirectory() as d2:
            row = {"test": rec["test"], "ours": _outcome(lambda: _ours(rec, d1)),
                   "theirs": _outcome(lambda: _theirs(rec, d2))}
        rows.append(row)
        print(f"{k:3d} {row['test']}\n      ours:   {row['ours']}\n      theirs: {row['theirs']}", flush=True)
    for key in ("ours", "theirs"):
        c = collections.Counter(r[key].split(":")[0].split(" ")[0] for r in rows)
        print(f"{key}: {len(rows)} programs; " + ", ".join(f"{v} {k}" for k, v in sorted(c.items())))
    print(f"({time.perf_counter() - t0:.0f} s)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
