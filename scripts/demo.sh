#!/usr/bin/env bash
# make demo: a throwaway redis-server with the module (as `make run` serves it), the example
# service of the HTTP layer (clients/rust/examples/http), a burst of requests, and each response's
# status and rate-limit fields.
set -euo pipefail
cd "$(dirname "$0")/.."
MODULE=${MODULE:-$(pwd)/target/release/libredis_throttle.so}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
REDIS_PORT=$(free_port); HTTP_PORT=$(free_port)
DIR=$(mktemp -d)
SERVICE_PID=""
cleanup() {
  [ -n "$SERVICE_PID" ] && kill "$SERVICE_PID" 2>/dev/null || true
  redis-cli -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || true
  rm -rf "$DIR"
}
trap cleanup EXIT

redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$DIR" \
  --loadmodule "$MODULE" --daemonize yes --logfile "$DIR/server.log"
for _ in $(seq 100); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done

cargo build --quiet -p redis-throttle-client --example http
REDIS_URL="redis://127.0.0.1:$REDIS_PORT/" ADDR="127.0.0.1:$HTTP_PORT" "${CARGO_TARGET_DIR:-target}/debug/examples/http" >"$DIR/service.log" 2>&1 &
SERVICE_PID=$!
for _ in $(seq 100); do grep -q listening "$DIR/service.log" 2>/dev/null && break; sleep 0.1; done

show() { # $1 path, $2 tenant: the status line, then the rate-limit fields, one a line (indented)
  curl -s -D - -o "$DIR/body" -H "X-Tenant: $2" "http://127.0.0.1:$HTTP_PORT$1" | tr -d '\r' |
    grep -iE '^(HTTP/|ratelimit|x-ratelimit|retry-after|content-type: application/problem)' | sed '1!s/^/      /'
}
echo "== a burst of 12 requests to /search (per-ip 10/s, per-tenant 10000/h window, one CL.ALL)"
for i in $(seq 12); do printf '%2d  %s\n' "$i" "$(show /search acme)"; done
echo "== the last refusal's body (RFC 9457)"
python3 -m json.tool "$DIR/body" 2>/dev/null || cat "$DIR/body"; echo
sleep 1.1
echo "== a second later, /export (exports: 2 in flight per tenant)"
printf '    %s\n' "$(show /export acme)"
