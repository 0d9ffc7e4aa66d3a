#!/usr/bin/env bash
# `make run-rls`: a throwaway redis-server with the module on REDIS_PORT, and the gateway service
# in the foreground on upstream's ports (HTTP 8080, gRPC 8081, debug 6070), serving
# gateway/example's configuration. Ctrl-C stops both.
set -euo pipefail
module=$1 rls=$2 port=$3
here=$(cd "$(dirname "$0")" && pwd)
data=$(mktemp -d)
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$data" \
  --loadmodule "$module" --daemonize yes --pidfile "$data/redis.pid" --logfile "$data/redis.log"
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$data"' EXIT
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
cat <<MSG
redis-throttle-rls on upstream's ports, deciding on redis-server :$port (module loaded).
Try:  curl -s localhost:8080/json -d '{"domain":"example","descriptors":[{"entries":[{"key":"user","value":"alice"}]}]}'
      (the fourth within a minute answers 429), curl localhost:6070/rlconfig, curl localhost:8080/healthcheck
MSG
env RUNTIME_ROOT="$here/example" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
  REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$port" USE_STATSD=false LOG_LEVEL="${LOG_LEVEL:-info}" \
  "$rls"
