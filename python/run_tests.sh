#!/usr/bin/env bash
# `make test`: the first tier, every component's C++ and Python tests, through
# `bazel test //... --test_tag_filters=-tier2`; `make test-all` (`--all`): both tiers, //... and
# every target tagged tier2, manual ones included (the other stacks' and CPythons' venvs, the
# fresh-venv installs, each with the wheels it installs as data); `--ci` (.ci/run): as `--all`
# but the targets tagged breadth (more models of what a CI target checks; bazel/txe.bzl). Then
# one summary line of test cases counted from this invocation's results (never stale logs of
# earlier runs). Other arguments go to `bazel test`.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bep=$(mktemp -t txe-bep.XXXXXX.json)
trap 'rm -f "$bep"' EXIT
flags=(--build_event_json_file="$bep")
[ -n "${CI:-}" ] && flags+=(--config=ci)
targets=(//...)
if [ "${1:-}" = "--all" ] || [ "${1:-}" = "--ci" ]; then
  query='attr(tags, "\btier2\b", //...)'
  if [ "$1" = "--ci" ]; then
    query="$query except attr(tags, \"\\bbreadth\\b\", //...)"
    flags+=(--test_tag_filters=-breadth)
  fi
  shift
  mapfile -t tier2 < <(bazel query --output=label "$query") || exit 1
  targets+=("${tier2[@]}")
else
  flags+=(--test_tag_filters=-tier2)
fi
t0=$SECONDS
bazel test "${flags[@]}" "${targets[@]}" "$@"
rc=$?
echo "bazel test: $(( SECONDS - t0 )) s (the C++ build included where it was not cached)"
.venv/bin/python python/test_summary.py "$bep" || rc=${rc:-1}
exit $rc
