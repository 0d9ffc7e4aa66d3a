#!/usr/bin/env bash
# The compatibility matrix: the whole integration suite (every tests/*.rs, native backend)
# against each server of scripts/servers.sh, then the behavioural tests against the Functions
# twin on the same server (scripts/twin-tests.sh; MATRIX_TWIN=0 leaves them out), then a table
# server × result.
#
#   scripts/matrix.sh MODULE [NAME...]     (default: every server; logs in target/matrix/NAME.log)
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "matrix: $*" >&2; exit 1; }
[ $# -ge 1 ] || die "usage: scripts/matrix.sh MODULE [NAME...]"
module=$(realpath "$1"); shift
[ -f "$module" ] || die "no module at $module"
names=("$@")
[ ${#names[@]} -gt 0 ] || read -r -a names <<< "$(scripts/servers.sh --list)"
CARGO="${CARGO:-cargo}"
mkdir -p target/matrix

# Compile the test binaries once, so no server's time includes the build.
"$CARGO" test --test '*' --no-run -q 2>&1 | tail -n 20 >&2 || die "building the integration tests failed"

rows=(); failed=0
# Adds the row of a run (NAME VERSION LOG RC T0) to the table; a failure prints its first lines.
record() {
  local run_log=$3 passed nfailed result=PASS
  sum() { grep -E '^test result:' "$run_log" | sed -nE "s/.* ([0-9]+) $1.*/\1/p" | awk '{s+=$1} END {print s+0}'; }
  passed=$(sum passed); nfailed=$(sum failed)
  if [ "$4" != 0 ] || [ "$passed" = 0 ]; then result=FAIL; failed=1; fi
  rows+=("$1|$2|$result|$passed|$nfailed|$((SECONDS - $5))")
  if [ "$result" = FAIL ]; then grep -E '^test .* FAILED$|panicked at' "$run_log" | head -n 20 >&2 || true; fi
}
for name in "${names[@]}"; do
  log="target/matrix/$name.log"; t0=$SECONDS
  if ! server=$(scripts/servers.sh "$name" 2>"$log") || ! cli=$(scripts/servers.sh --cli "$name" 2>>"$log"); then
    rows+=("$name|?|UNAVAILABLE|0|0|$((SECONDS - t0))"); failed=1; continue
  fi
  # shellcheck disable=SC2086
  version=$($server --version 2>/dev/null | sed -nE 's/.* v=([^ ]+).*/\1/p')
  echo "matrix: $name ($version): cargo test --test '*' (log: $log)" >&2
  set +e
  THROTTLE_SERVER="$server" THROTTLE_CLI="$cli" THROTTLE_MODULE="$module" THROTTLE_BACKEND=native \
    timeout 1200 "$CARGO" test --no-fail-fast --test '*' >>"$log" 2>&1
  rc=$?
  set -e
  record "$name" "$version" "$log" "$rc" "$t0"
  # ---- The Functions twin on the same server (issue 10).
  if [ "${MATRIX_TWIN:-1}" != 0 ]; then
    log="target/matrix/$name-twin.log"; t0=$SECONDS
    echo "matrix: $name ($version): the behavioural tests against the Functions twin (log: $log)" >&2
    set +e
    THROTTLE_SERVER="$server" THROTTLE_CLI="$cli" scripts/twin-tests.sh twin >"$log" 2>&1
    rc=$?
    set -e
    record "$name+twin" "$version" "$log" "$rc" "$t0"
  fi
done

# The table, printed and kept in target/matrix/table.txt: `make docs-matrix` copies it into
# docs/src/servers.md, so the manual's figures are the ones this command printed.
{
  printf '%-17s %-9s %-12s %7s %7s %6s\n' server version result passed failed time
  for row in "${rows[@]}"; do
    IFS='|' read -r n v r p f s <<< "$row"
    printf '%-17s %-9s %-12s %7s %7s %5ss\n' "$n" "$v" "$r" "$p" "$f" "$s"
  done
} > target/matrix/table.txt
echo >&2
cat target/matrix/table.txt
exit "$failed"
