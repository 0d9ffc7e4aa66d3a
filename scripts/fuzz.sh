#!/usr/bin/env bash
# Runs every cargo-fuzz target for SECONDS each: fuzz.sh SECONDS TARGET...
# Installs cargo-fuzz when missing. The toolchain is stable: RUSTC_BOOTSTRAP=1 lets cargo-fuzz
# pass its -Z flags (sanitizer, coverage) to it. Each target starts from its kept seeds
# (fuzz/seeds/<target>, replayed by `cargo test` too) and its local corpus (fuzz/corpus,
# not committed); a crashing input is left in fuzz/artifacts/<target>/ and fails the run:
# keep it in fuzz/seeds/<target>/ once fixed, so it stays a regression test.
set -euo pipefail
seconds=$1; shift
cd "$(dirname "$0")/../fuzz"

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz" >&2
  time cargo install --locked cargo-fuzz
fi
export RUSTC_BOOTSTRAP=1
# Sanitizer builds use other flags than the module's: keep them apart from its target dir.
if [ -n "${CARGO_TARGET_DIR:-}" ]; then export CARGO_TARGET_DIR="$CARGO_TARGET_DIR/fuzz"; fi

start=$(date +%s)
cargo fuzz build
echo "fuzz build: $(( $(date +%s) - start )) s" >&2

status=0
for target in "$@"; do
  mkdir -p "corpus/$target"
  log=$(mktemp)
  if cargo fuzz run "$target" "corpus/$target" "seeds/$target" -- -max_total_time="$seconds" -max_len=512 >"$log" 2>&1; then
    echo "fuzz $target: $(grep -o 'Done [0-9]* runs in [0-9]* second(s)' "$log" | tail -1)"
  else
    status=1
    echo "fuzz $target: FAILED" >&2
    tail -40 "$log" >&2
  fi
  rm -f "$log"
done
exit $status
