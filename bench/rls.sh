#!/usr/bin/env bash
# make bench: the gateway service (gateway) in one run, release builds: Redis CPU per
# ShouldRateLimit for 1, 2 and 4 descriptors, in both STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT
# modes, against upstream's traffic for the same requests replayed as its Redis clients send it
# (radix v3 with and without REDIS_PIPELINE_WINDOW, radix v4), on a server run as a cache and with
# a replica; the service's CPU per request against a floor (a tonic server answering after one
# Redis round trip); and p99 latency through a real Envoy (make envoy) with the service, the
# floor, and no rate limit (gateway/src/bin/rls_bench.rs). About 6 minutes here;
# RLS_BENCH_REQUESTS (20000) and RLS_BENCH_ROUNDS (3) change the load.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=${CARGO_TARGET_DIR:-target}
make --no-print-directory envoy
cargo build --release -q -p redis-throttle-rls --bin redis-throttle-rls --bin rls-bench
ENVOY=$(ls "$TARGET"/venv-envoy/lib/python3*/site-packages/envoy/_bin/envoy | head -1)
"$TARGET/release/rls-bench" run "$(pwd)/$TARGET/release/libredis_throttle.so" "$(pwd)/$TARGET/release/redis-throttle-rls" "$ENVOY"
