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
# Every step runs; the check fails if any failed, and names it. The tools are the packages'
# pinned ones, installed when missing by `scripts/deps.sh check` (make check runs it first).
set -uo pipefail
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-target}
node_bin=$(realpath -m "$target/node/$(tr -d ' \n' < clients/node/test/matrix/newest/.node-version)/bin")
start=$SECONDS
failed=()
step() { # NAME COMMAND...
  local name=$1 t0=$SECONDS rc=0
  shift
  "$@" || rc=$?
  printf 'check: %-16s %4ss%s\n' "$name" $((SECONDS - t0)) "$([ $rc = 0 ] || echo "  FAILED")" >&2
  [ $rc = 0 ] || failed+=("$name")
}
in_dir() { (cd "$1" && shift && "$@"); }
node() { PATH="$node_bin:$PATH" "$@"; }

step "rustfmt" cargo fmt --all -- --check
step "clippy" cargo clippy --workspace --all-targets --quiet -- -D warnings
step "core tests" cargo test -p redis-throttle-core --quiet
step "prettier" in_dir clients/node node npm run --silent format:check
step "tsc" in_dir clients/node node npm run --silent typecheck
py=$(python3 clients/python/tests/matrix.py --venv newest) || failed+=("python venv")
if [ -x "${py:-}" ]; then
  bin=$(dirname "$py")
  step "ruff format" "$bin/ruff" format --check --no-cache --quiet scripts clients/python
  step "ruff check" in_dir clients/python "$bin/ruff" check --no-cache --quiet src tests bench
  step "mypy" in_dir clients/python "$bin/mypy" --cache-dir "$(realpath "$target")/python-matrix/check-mypy-cache"
  step "python vectors" in_dir clients/python env PYTHONPATH=src "$bin/pytest" -q -p no:cacheprovider tests/test_vectors.py
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "check: FAILED: ${failed[*]} ($((SECONDS - start)) s)" >&2
  exit 1
fi
echo "check: all passed ($((SECONDS - start)) s)" >&2
