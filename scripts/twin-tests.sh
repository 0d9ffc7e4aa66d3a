#!/usr/bin/env bash
# The behavioural tests against the Functions twin instead of the module: every tests/*.rs with
# THROTTLE_BACKEND=twin (FCALL, the library functions/throttle.lua) or twin-eval (EVALSHA, its
# EVAL form), on module-less servers (see tests/harness/twin.rs), except what needs the module
# itself: the files and tests marked `skip twin: why` (scripts/skips.sh twin).
#
#   scripts/twin-tests.sh [twin|twin-eval] [cargo test arguments...]
#
# Env: THROTTLE_SERVER / THROTTLE_CLI (the server, as for the module's tests), CARGO.
# Log: target/twin-tests-<backend>.log.
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "twin-tests: $*" >&2; exit 1; }
backend=${1:-twin}; shift || true
case "$backend" in twin|twin-eval) ;; *) die "usage: scripts/twin-tests.sh [twin|twin-eval]" ;; esac
excluded=" $(scripts/skips.sh twin | tr '\n' ' ') "

targets=(); skips=()
for f in tests/*.rs; do
  name=$(basename "$f" .rs)
  case "$excluded" in *" $name "*) continue ;; esac
  targets+=(--test "$name")
done
for entry in $excluded; do
  case "$entry" in *::*) skips+=(--skip "${entry#*::}") ;; esac
done
[ ${#targets[@]} -gt 0 ] || die "no test files left to run"
mkdir -p target
log="target/twin-tests-$backend.log"
echo "twin-tests: THROTTLE_BACKEND=$backend ${targets[*]} (skipping ${skips[*]:-nothing})" >&2
set +e
THROTTLE_BACKEND="$backend" timeout 1800 "${CARGO:-cargo}" test --no-fail-fast "${targets[@]}" "$@" -- --exact "${skips[@]}" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
passed=$(grep -E '^test result:' "$log" | sed -E 's/.* ([0-9]+) passed.*/\1/' | awk '{s+=$1} END {print s+0}')
echo "twin-tests ($backend): $passed passed" >&2
[ "$rc" = 0 ] || die "the behavioural tests failed against the twin (exit $rc; log: $log)"
[ "$passed" -gt 0 ] || die "no test ran (log: $log)"
