#!/usr/bin/env bash
# make bench: the gateway service (clients/rls) in one run, release builds: Redis CPU per
# ShouldRateLimit for 1, 2 and 4 descriptors against upstream's INCRBY+EXPIRE traffic replayed,
# the service's CPU per request against a floor (a tonic server answering after one Redis round
# trip), and p99 latency through a real Envoy (make envoy) with the service, the floor, and no
# rate limit (clients/rls/src/bin/rls_bench.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=${CARGO_TARGET_DIR:-target}
make --no-print-directory envoy
cargo build --release -q -p redis-throttle-rls --bin redis-throttle-rls --bin rls-bench
ENVOY=$(ls "$TARGET"/venv-envoy/lib/python3*/site-packages/envoy/_bin/envoy | head -1)
"$TARGET/release/rls-bench" run "$(pwd)/$TARGET/release/libredis_throttle.so" "$(pwd)/$TARGET/release/redis-throttle-rls" "$ENVOY"
