#!/usr/bin/env bash
# make bench: the client crate's own costs (clients/rust/examples/overhead.rs) against a throwaway
# redis-server with the module: a check through the client vs the same CL.THROTTLE through a
# raw `redis` connection (one at a time, and from 64 tasks), a deny-cache hit, a local decision.
set -euo pipefail
cd "$(dirname "$0")/.."

MODULE=$(pwd)/target/release/libredis_throttle.so
PORT=${BENCH_PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')}
DIR=$(mktemp -d)
trap 'redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$DIR"' EXIT

cargo build --release -q -p redis-throttle-client --example overhead
${THROTTLE_SERVER:-redis-server} --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$DIR" \
  --loadmodule "$MODULE" --daemonize yes --logfile "$DIR/server.log"
for _ in $(seq 100); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done

printf '\nThe client crate (clients/rust/examples/overhead.rs, release)\n'
REDIS_URL="redis://127.0.0.1:$PORT/" "${CARGO_TARGET_DIR:-target}/release/examples/overhead"
