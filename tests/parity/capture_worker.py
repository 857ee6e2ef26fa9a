"""One side of the cross-process capture test, run as its own process.

    capture_worker.py capture FILE   # on "the XLA host": perturbed Llama on XLA, per-module capture
    capture_worker.py compare FILE OUT.json   # on a CPU-only process: compare with the reference
"""

import copy
import json
import sys

import torch

from tests import zoo  # noqa: E402

PLANTED = "model.layers.1.mlp.down_proj"


def main() -> int:
    from torch_xla_ext import parity

    mode, path = sys.argv[1], sys.argv[2]
    model, args, kwargs = zoo.build("llama")
    if mode == "capture":
        perturbed = copy.deepcopy(model)
        with torch.no_grad():
            dict(perturbed.named_modules())[PLANTED].weight.mul_(1.25)
        parity.capture(perturbed, args, kwargs, dtype="bf16").save(path)
        return 0
    report = parity.compare_capture(path, model, args, kwargs)
    result = report.to_dict()
    result["torch_xla_imported"] = "torch_xla" in sys.modules
    with open(sys.argv[3], "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
