"""``python -m torch_xla_ext.graph_breaks --worker ...``: one mode of compare() (internal)."""

import sys

from torch_xla_ext.graph_breaks import worker

if __name__ == "__main__":
    if "--worker" not in sys.argv[1:]:
        sys.exit("usage: python -m torch_xla_ext.graph_breaks --worker ... (internal; see compare())")
    sys.exit(worker.main(sys.argv[1:]))
