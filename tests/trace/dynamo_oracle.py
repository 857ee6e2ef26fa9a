"""Dynamo's own record of one call of ``scripts/dynamo_train.py``'s training step, in a process of
its own (run as a script by the tests, not collected): ``torch._dynamo.explain`` of the step (its
graph count and break reasons) and Dynamo's counters over that call (graphs and counted breaks do
not depend on the backend). Prints one JSON object.

    python dynamo_oracle.py MODEL [--jump]
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts"))

import torch  # noqa: E402
import torch._dynamo  # noqa: E402
import torch_xla  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402

import dynamo_train  # noqa: E402


def main():
    name, jump = sys.argv[1], "--jump" in sys.argv
    step, x = dynamo_train.build(name, jump)
    counters.clear()
    explained = torch._dynamo.explain(step)(x)
    torch_xla.sync()
    print(json.dumps({"graph_count": explained.graph_count,
                      "break_reasons": [str(r.reason).splitlines()[0] for r in explained.break_reasons],
                      "unique_graphs": counters["stats"]["unique_graphs"],
                      "graph_breaks": sum(counters["graph_break"].values())}))


if __name__ == "__main__":
    main()
