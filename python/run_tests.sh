#!/usr/bin/env bash
# `make test`: every C++ and Python test through `bazel test //...`, then one summary line of
# test cases counted from this invocation's results (never stale logs of earlier runs).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bep=$(mktemp -t txe-bep.XXXXXX.json)
trap 'rm -f "$bep"' EXIT
flags=(--build_event_json_file="$bep")
[ -n "${CI:-}" ] && flags+=(--config=ci)
bazel test "${flags[@]}" //... "$@"
rc=$?
.venv/bin/python python/test_summary.py "$bep" || rc=${rc:-1}
exit $rc
