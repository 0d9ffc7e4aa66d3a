#!/usr/bin/env bash
# make check: what every change passes first, in seconds and without a server.
#
#   format   cargo fmt (rustfmt.toml), prettier (clients/node's pin), ruff format (clients/python's
#            pin; the scripts through ruff.toml)
#   lint     clippy on every crate and target, warnings as errors; ruff check of the Python package
#   tests    the core's unit and property tests, and the shared vectors (tests/vectors) as the core
#            and the Python package read them (no server)
#   types    tsc --noEmit (clients/node), mypy --strict (clients/python)
#
# Every step runs (the packages' at once with the core's tests); the check fails if any failed,
# names it and shows the end of its output. The tools are the packages' pinned ones, installed
# when missing by `scripts/deps.sh tools`, which runs while rustfmt and clippy do (downloads and
# unpacking, mostly: clippy's first build is the long part of a clean checkout's check).
set -uo pipefail
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-target}
node_bin=$(realpath -m "$target/node/$(tr -d ' \n' < clients/node/test/matrix/newest/.node-version)/bin")
start=$SECONDS
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
# STEP NAME COMMAND...: runs it, its output into the log NAME (shown when it fails), its line.
step() {
  local name=$1 t0=$SECONDS rc=0
  shift
  "$@" >"$logs/$name" 2>&1 || rc=$?
  if [ $rc = 0 ]; then
    printf 'check: %-16s %4ss\n' "$name" $((SECONDS - t0))
  else
    tail -n 80 "$logs/$name"
    printf 'check: %-16s %4ss  FAILED\n' "$name" $((SECONDS - t0))
    echo "$name" >>"$logs/failed"
  fi
}
in_dir() { (cd "$1" && shift && "$@"); }
node() { PATH="$node_bin:$PATH" "$@"; }

# The packages' steps, mostly one process each: at once with the core's tests, whose longest
# test leaves a core idle for most of their run, once their tools are in (`tools_rc`).
packages() {
  if [ "$tools_rc" != 0 ]; then
    cat "$logs/tools"
    echo "tools (scripts/deps.sh tools)" >>"$logs/failed"
    return
  fi
  step "prettier" in_dir clients/node node npm run --silent format:check
  step "tsc" in_dir clients/node node npm run --silent typecheck
  local py
  if ! py=$(python3 clients/python/tests/matrix.py --venv newest 2>"$logs/python venv"); then
    cat "$logs/python venv"
    echo "python venv" >>"$logs/failed"
    return
  fi
  local bin
  bin=$(dirname "$py")
  step "ruff format" "$bin/ruff" format --check --no-cache scripts clients/python
  step "ruff check" in_dir clients/python "$bin/ruff" check --no-cache src tests bench
  step "mypy" in_dir clients/python "$bin/mypy" --cache-dir "$(realpath "$target")/python-matrix/check-mypy-cache"
  step "python vectors" in_dir clients/python env PYTHONPATH=src "$bin/pytest" -q -p no:cacheprovider tests/test_vectors.py
}

scripts/deps.sh tools >"$logs/tools" 2>&1 &
tools=$!
{
  step "rustfmt" cargo fmt --all -- --check
  step "clippy" cargo clippy --workspace --all-targets -- -D warnings
  tools_rc=0
  wait "$tools" || tools_rc=$?
  packages >"$logs/packages.out" 2>&1 &
  step "core tests" cargo test -p redis-throttle-core
  wait
  cat "$logs/packages.out"
} >&2
if [ -s "$logs/failed" ]; then
  echo "check: FAILED: $(paste -sd, "$logs/failed") ($((SECONDS - start)) s)" >&2
  exit 1
fi
echo "check: all passed ($((SECONDS - start)) s)" >&2
