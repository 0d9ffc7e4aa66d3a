#!/usr/bin/env bash
# Redis CPU per request (INFO commandstats), instructions per request (the servers under
# callgrind, in a second pass) and requests per second of Express, rate-limiter-flexible, NestJS
# and Fastify apps, with the Redis store each replaces and with redis-throttle's (module;
# Functions twin alone), beside the floors, in one run, for two workloads (1,000 users at 100 a
# minute; one hot key at 100,000 a minute): clients/node/bench/run.mjs.
# Usage: bench/node.sh [requests per case] (default 4000). Needs `make build`, node/npm and
# valgrind (scripts/deps.sh bench; BENCH_INSTRUCTIONS=0: the timing alone).
set -euo pipefail
cd "$(dirname "$0")/.."
MODULE=${THROTTLE_MODULE:-$(pwd)/${CARGO_TARGET_DIR:-target}/release/libredis_throttle.so}
cd clients/node
[ node_modules/.package-lock.json -nt package-lock.json ] || npm ci --no-audit --no-fund
npm run build >/dev/null # (always: a dist older than src would measure old code)
if [ "${BENCH_INSTRUCTIONS:-1}" != 0 ] && ! command -v valgrind >/dev/null; then
  echo "bench/node.sh: valgrind is missing (scripts/deps.sh bench; BENCH_INSTRUCTIONS=0 to time only)" >&2
  exit 1
fi
THROTTLE_MODULE=$MODULE node bench/run.mjs "${1:-4000}"
