#!/usr/bin/env bash
# make bench: the HTTP layer's cost (clients/rust/examples/http_bench.rs) on a throwaway server with the
# module: sequential latency with and without the layer, and requests per second (without, with,
# and with 90% of the requests denied from the deny cache).
set -euo pipefail
cd "$(dirname "$0")/.."
MODULE=$(pwd)/target/release/libredis_throttle.so
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
DIR=$(mktemp -d)
trap 'redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$DIR"' EXIT
${THROTTLE_SERVER:-redis-server} --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$DIR" \
  --loadmodule "$MODULE" --daemonize yes --logfile "$DIR/server.log"
for _ in $(seq 100); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
printf '\nThe HTTP layer (axum, hyper client on the same machine)\n'
REDIS_URL="redis://127.0.0.1:$PORT/" cargo run --quiet --release -p redis-throttle-client --example http_bench
