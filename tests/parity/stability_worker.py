"""One configuration of the stability sweep, run as its own process (XLA reads XLA_FLAGS and
PJRT_NPROC when its clients start, so each configuration needs a fresh process).

    stability_worker.py OUT.json resnet18,gpt2 fp32,bf16

``held(a, b)`` is the rule the test and the bench read two records of one model and dtype by.

writes, per model and dtype, verify's verdict and each output's cause, with the figures the
causes rest on (whether XLA is within the rounded replay's bound, the distance over the bound) and
the bit-equality figure (elements of XLA equal to the replay bit for bit).
"""

import json
import sys


# Causes that say "not a bug": where every output's difference is one of them, the verdict is
# torch.testing's tolerance check on XLA's own output, which moves with the summation order.
ROUNDING = {None, "rounding placement", "reassociation", "matmul precision"}


def held(a: dict, b: dict) -> tuple[bool, str]:
    """Whether configuration ``b`` gives what ``a`` gave: the same cause for every output, and the
    same verdict, unless the verdict is a tolerance check on differences that are all rounding in
    both (then it may move with XLA's own output, and that is said)."""
    if a["causes"] != b["causes"]:
        return False, "cause changed"
    if a["verdict"] == b["verdict"]:
        return True, ""
    if set(a["causes"].values()) <= ROUNDING and {a["verdict"], b["verdict"]} == {"PASS", "FAIL"}:
        return True, (f"verdict {a['verdict']} -> {b['verdict']} ({a['mismatched']} -> {b['mismatched']} elements "
                      f"past the tolerance), every difference rounding")
    return False, "verdict changed"


def main() -> int:
    from tests import zoo
    from torch_xla_ext import parity

    out, names, dtypes = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(",")
    records = []
    for name in names:
        model, args, kwargs = zoo.build(name)
        for dtype in dtypes:
            r = parity.verify(model, args, kwargs, dtype=dtype)
            records.append({
                "model": name, "dtype": dtype, "verdict": r.verdict.value, "causes": r.causes,
                "mismatched": sum(o.xla_vs_cpu.mismatched for o in r.outputs),
                "reproduced": r.reproduced,
                "bit_equal": sum(o.emulated.total - o.emulated.mismatched for o in r.outputs if o.emulated),
                "elements": sum(o.emulated.total for o in r.outputs if o.emulated),
                "distance_over_bound": max((o.replay_distance / o.replay_bound for o in r.outputs
                                            if o.replay_bound), default=0.0),
            })
    with open(out, "w") as f:
        json.dump(records, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
