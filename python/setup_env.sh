#!/usr/bin/env bash
# One idempotent setup: Debian's Bazel and googletest sources, then the pinned venv, linked as
# ./.venv. The venv lives outside the clone, keyed by the pins and the base Python, so a fresh
# clone on the same machine reuses it; a re-run with everything present takes seconds.
#
# Environment: TXE_BASE_PYTHON (python to build the venv from, default python3),
#              TXE_VENV_ROOT (where venvs live, default ${XDG_CACHE_HOME:-~/.cache}/torch_xla_ext).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
req="$root/python/requirements.txt"
base_python=${TXE_BASE_PYTHON:-python3}
log() { printf '[setup] %s\n' "$*" >&2; }
t0=$SECONDS

# --- system packages -----------------------------------------------------------------
apt_pkgs=()
command -v bazel >/dev/null 2>&1 || apt_pkgs+=(bazel-bootstrap)
# (grep reads to the end: -q would stop early, and pipefail would count dpkg's SIGPIPE as absent)
dpkg -L googletest 2>/dev/null | grep 'gtest-all.cc$' >/dev/null || apt_pkgs+=(libgtest-dev googletest)
# XLA's schema (third_party/xla) is compiled with Debian's protoc and linked with its runtime.
command -v protoc >/dev/null 2>&1 || apt_pkgs+=(protobuf-compiler)
[ -f /usr/include/google/protobuf/message.h ] || apt_pkgs+=(libprotobuf-dev)
# Debian's Chromium: the graph-break HTML report is rendered headless in a test.
command -v chromium >/dev/null 2>&1 || apt_pkgs+=(chromium)
if ((${#apt_pkgs[@]})); then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  log "installing with apt: ${apt_pkgs[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${apt_pkgs[@]}" >/dev/null
  log "apt: $(( SECONDS - t0 )) s"
fi

# --- the venv ------------------------------------------------------------------------
command -v "$base_python" >/dev/null || { log "no $base_python on PATH (set TXE_BASE_PYTHON)"; exit 1; }
py_id=$("$base_python" -c 'import sys; print(sys.version)')
key=$( { cat "$req"; echo "$py_id"; } | sha256sum | cut -c1-12)
venv_root=${TXE_VENV_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/torch_xla_ext}
venv="$venv_root/venv-$key"
pip_install() {
  # (grep drops pip warnings about index folders that some machines configure but lack)
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req" \
    2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
}
# uv installs the same exact pins as pip, about 4 times faster on a cold machine (it neither
# byte-compiles 7.6 GB of packages up front nor unpacks them one at a time); uv itself is pinned in
# python/tool_requirements/uv.txt and kept in its own cached tool venv. TXE_INSTALLER=pip, or no
# uv to be had, installs with pip. uv does not read pip's configuration: an index pip is pointed
# at (PIP_INDEX_URL or pip.conf) is passed on.
uv_install() {
  local tool uv index
  [ "${TXE_INSTALLER:-uv}" = uv ] || return 1
  tool=$("$base_python" "$root/python/tool_venv.py" uv 2>/dev/null) || { log "uv unavailable: pip installs the venv"; return 1; }
  uv="$tool/bin/uv"
  index=${PIP_INDEX_URL:-$("$base_python" -m pip config get global.index-url 2>/dev/null || true)}
  "$uv" pip install --quiet --python "$venv/bin/python" ${index:+--default-index "$index"} -r "$req" \
    || { log "uv failed: pip installs the rest"; return 1; }
}
if [ ! -f "$venv/.txe-complete" ]; then
  log "creating $venv from $req (about 3 minutes and 7.6 GB on a fresh machine)"
  rm -rf "$venv"
  mkdir -p "$venv_root"
  "$base_python" -m venv "$venv"
  t_venv=$SECONDS
  uv_install || pip_install
  touch "$venv/.txe-complete"
  log "venv: $(( SECONDS - t_venv )) s"
fi
# torch_xla's wheel ships its own copy of torchax's files (the 0.0.6-era code) under the same
# `torchax/` folder, and pip installs the two distributions in no fixed order: whichever comes
# last owns the files. The pinned torchax must win, so its files are put back whenever they are
# not the ones its own RECORD lists (a check of one hash; no import).
if ! "$venv/bin/python" "$root/python/check_record.py" torchax; then
  log "torchax's files are torch_xla's bundled copy: reinstalling the pinned torchax over them"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --force-reinstall \
    "$(grep -i '^torchax==' "$req")" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
fi
ln -sfn "$venv" "$root/.venv"
# `torch-xla-ext` in the venv runs the package of the checkout it is called from (the venv is
# shared by checkouts; python/checkout_launcher.py says how it picks one).
"$venv/bin/python" "$root/python/checkout_launcher.py" "$venv" >/dev/null

# --- versions: the same check `import torch_xla_ext` makes -------------------------------
PYTHONPATH="$root" "$root/.venv/bin/python" - <<'PY'
from torch_xla_ext import _versions
print("[setup] " + _versions.summary())
PY
