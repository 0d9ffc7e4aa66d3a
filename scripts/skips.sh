#!/usr/bin/env bash
# What a backend skips of tests/*.rs, as the tests themselves say it: a file whose header says
# `//! skip BACKEND: why` is skipped whole (printed as FILE), a test whose doc comment says
# `/// skip BACKEND: why` alone (printed as FILE::TEST). BACKEND is `twin` (scripts/twin-tests.sh)
# or `containers` (scripts/container-tests.sh). A marker that no test follows is an error.
#
#   scripts/skips.sh BACKEND
set -euo pipefail
cd "$(dirname "$0")/.."
backend=${1:?usage: scripts/skips.sh twin|containers}
case "$backend" in twin|containers) ;; *) echo "skips: unknown backend $backend" >&2; exit 2 ;; esac
for f in tests/*.rs; do
  awk -v backend="$backend" -v name="$(basename "$f" .rs)" '
    $0 ~ "^//! skip " backend ": " { print name; exit }
    $0 ~ "^[ \t]*/// skip " backend ": " { pending = FNR; next }
    pending && /^[ \t]*\/\/\// { next }
    pending && /^[ \t]*#\[/ { next }
    pending && match($0, /fn [A-Za-z0-9_]+/) { print name "::" substr($0, RSTART + 3, RLENGTH - 3); pending = 0; next }
    pending { printf "skips: %s:%d: a skip marker not followed by a test\n", FILENAME, pending > "/dev/stderr"; bad = 1; exit }
    END { if (pending && !bad) { printf "skips: %s:%d: a skip marker not followed by a test\n", FILENAME, pending > "/dev/stderr"; bad = 1 } exit bad }
  ' "$f"
done
