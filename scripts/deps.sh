#!/usr/bin/env bash
# Installs what building and testing need, when missing: a C toolchain and libclang (bindgen
# runs when the redis-module crate builds), redis-server and redis-tools. Uses apt-get as
# root; otherwise says exactly what to install.
set -euo pipefail

missing=()
command -v cc >/dev/null 2>&1 || missing+=(build-essential)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 && command -v redis-benchmark >/dev/null 2>&1 || missing+=(redis-tools)
# bindgen loads libclang.so or libclang-<N>.so (clang-sys); libclang-cpp.so.<N>, which some
# images carry, is another library and does not count.
have_libclang() {
  [ -n "${LIBCLANG_PATH:-}" ] && { compgen -G "$LIBCLANG_PATH/libclang.so*" || compgen -G "$LIBCLANG_PATH/libclang-[0-9]*.so*"; } >/dev/null && return 0
  local f
  for f in /usr/lib/llvm-*/lib/libclang.so* /usr/lib/llvm-*/lib/libclang-[0-9]*.so* \
           /usr/lib/*-linux-gnu/libclang.so* /usr/lib/*-linux-gnu/libclang-[0-9]*.so* /usr/local/lib/libclang.so*; do
    [ -e "$f" ] && return 0
  done
  return 1
}
have_libclang || missing+=(libclang-dev)
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
# clients/python's tests (make test-python) run in a venv: python3 with venv and ensurepip.
command -v python3 >/dev/null 2>&1 && python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3 python3-venv)
command -v cargo >/dev/null 2>&1 || { echo "cargo is missing: install Rust (https://rustup.rs) first" >&2; exit 1; }

[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing: ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  # Debian's package starts a system redis on 6379; `make run` wants that port.
  if command -v systemctl >/dev/null 2>&1; then systemctl disable --now redis-server >/dev/null 2>&1 || true; fi
  service redis-server stop >/dev/null 2>&1 || true
else
  echo "missing: ${missing[*]}. Install them with: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
