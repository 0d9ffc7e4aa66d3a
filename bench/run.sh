#!/usr/bin/env bash
# make bench: each command side by side with `SET key <int> PX ms` on one server in one run.
# redis-benchmark, 50 clients, pipeline 16, a single hot key and random keys; server CPU per
# call from INFO commandstats; memory per idle limiter from used_memory over many keys.
# Figures are ratios to the baseline measured in the same run (machines here are noisy).
# THROTTLE_SERVER (as for the tests, see scripts/servers.sh) benchmarks another server.
set -euo pipefail
cd "$(dirname "$0")/.."

MODULE=$(pwd)/target/release/libredis_throttle.so
# The floor (bench/floor.c), built here against the redis-module crate's redismodule.h.
FLOOR=$(bench/floor.sh)
REQUESTS=${REQUESTS:-400000}
KEYS=${KEYS:-100000}
PORT=${BENCH_PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')}
DIR=$(mktemp -d)
trap 'redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$DIR"' EXIT

${THROTTLE_SERVER:-redis-server} --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$DIR" \
  --loadmodule "$MODULE" --loadmodule "$FLOOR" --daemonize yes --logfile "$DIR/server.log"
for _ in $(seq 100); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
cli() { redis-cli -p "$PORT" "$@"; }
# A replica (without the module), so that the module builds its replicated commands as the
# floor does (as on any server with a replica or an AOF; both also pay feeding it). A server run
# as a cache, where the module builds none, is measured at the end.
REPLICA_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$DIR/replica"
${THROTTLE_SERVER:-redis-server} --port "$REPLICA_PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$DIR/replica" \
  --replicaof 127.0.0.1 "$PORT" --daemonize yes --logfile "$DIR/replica/server.log"
trap 'redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true; redis-cli -p "$REPLICA_PORT" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$DIR"' EXIT
for _ in $(seq 100); do redis-cli -p "$REPLICA_PORT" INFO replication 2>/dev/null | grep -q 'master_link_status:up' && break; sleep 0.1; done

# A GCRA in Lua, the usual fallback without a module (for reference only).
LUA_GCRA=$(cat bench/gcra.lua)
LUA_SHA=$(cli SCRIPT LOAD "$LUA_GCRA")

# name | command with __KEY__ (every call admitted and written: the expensive path) | stat name
SCENARIOS=(
  "SET PX (baseline)|SET __KEY__ 1795354456188603542 PX 600000|set"
  "module floor (floor.c)|FLOOR.TOUCH __KEY__|floor.touch"
  "CL.THROTTLE|CL.THROTTLE __KEY__ 99 100000000 1|cl.throttle"
  "Lua GCRA (EVALSHA)|EVALSHA $LUA_SHA 1 __KEY__ 1000000 1 1000000000|evalsha"
)
EXTRA=${BENCH_EXTRA:-bench/scenarios.txt}
if [ -f "$EXTRA" ]; then while IFS= read -r line; do [ -n "$line" ] && SCENARIOS+=("$line"); done < "$EXTRA"; fi
# ---- The Functions twin (functions/throttle.lua), loaded next to the module: FCALL, and its EVAL
# form through EVALSHA. TWIN=0 leaves it out.
if [ "${TWIN:-1}" != 0 ]; then
  cli -x FUNCTION LOAD REPLACE < functions/throttle.lua >/dev/null
  TWIN_SHA=$(scripts/twin.sh eval | cli -x SCRIPT LOAD)
  SCENARIOS+=(
    "Twin cl_throttle (FCALL)|FCALL cl_throttle 1 __KEY__ 99 100000000 1|fcall"
    "Twin cl_throttle (EVALSHA)|EVALSHA $TWIN_SHA 1 __KEY__ cl_throttle 99 100000000 1|evalsha"
    "Twin cl_window limit 100|FCALL cl_window 1 __KEY__ 100 1 MS|fcall"
    "Twin cl_bucket|FCALL cl_bucket 1 __KEY__ 1000 1000 1 MS|fcall"
    "Twin cl_counter|FCALL cl_counter 1 __KEY__ 1000000000 60|fcall"
  )
fi

usec_per_call() { cli INFO commandstats | tr -d '\r' | sed -n "s/^cmdstat_$1:.*usec_per_call=\([0-9.]*\).*/\1/p"; }

run() { # $1 stat, $2 command, $3 key pattern
  local cmd=${2//__KEY__/$3} out
  cli FLUSHALL >/dev/null; cli CONFIG RESETSTAT >/dev/null
  # shellcheck disable=SC2086
  out=$(redis-benchmark -p "$PORT" -n "$REQUESTS" -c 50 -P 16 -r "$KEYS" -q $cmd 2>&1 | tr '\r' '\n' | grep -o '[0-9.]* requests per second' | tail -1 | cut -d' ' -f1)
  echo "$(usec_per_call "$1") ${out:-0}"
}

ratio() { python3 -c "print(f'{$1/$2:.2f}x')"; }

printf '\nCPU per call (server usec, INFO commandstats) and throughput, %s requests, 50 clients, pipeline 16\n' "$REQUESTS"
printf 'ratios: to SET PX and to the module floor, measured in this run\n'
printf '%-26s %9s %6s %6s %10s %9s %6s %6s %10s\n' command "hot usec" xSET xfloor "hot req/s" "rand usec" xSET xfloor "rand req/s"
base_hot=""; base_rand=""; floor_hot=""; floor_rand=""
declare -A HOT HOT_US
for s in "${SCENARIOS[@]}"; do
  IFS='|' read -r name cmd stat <<<"$s"
  read -r hot_us hot_rps < <(run "$stat" "$cmd" "bench:hot")
  read -r rand_us rand_rps < <(run "$stat" "$cmd" "bench:__rand_int__")
  HOT_US[$name]=$hot_us # (the twin's scenarios share their stat names with others)
  [ -z "$base_hot" ] && base_hot=$hot_us && base_rand=$rand_us
  [ "$stat" = floor.touch ] && floor_hot=$hot_us && floor_rand=$rand_us
  HOT[$stat]=$hot_us
  printf '%-26s %9s %6s %6s %10s %9s %6s %6s %10s\n' "$name" "$hot_us" "$(ratio "$hot_us" "$base_hot")" "$(ratio "$hot_us" "${floor_hot:-$hot_us}")" "$hot_rps" \
    "$rand_us" "$(ratio "$rand_us" "$base_rand")" "$(ratio "$rand_us" "${floor_rand:-$rand_us}")" "$rand_rps"
done

# CL.ALL with N limiters (CL.THROTTLE specs on one user's hash-tagged keys) against N single
# CL.THROTTLE calls: the target is N x single + one floor.
printf '\nCL.ALL with N limiters vs N single calls (hot keys; usec per call; target: ratio <= 1)\n'
printf '%-12s %10s %14s %12s %7s\n' limiters "CL.ALL" "N x single" "+ floor" ratio
single=${HOT[cl.throttle]}
for n in 1 3 8; do
  keys=""; specs=""
  for i in $(seq 1 "$n"); do keys="$keys bench:{u}:$i"; specs="$specs THROTTLE 99 100000000 1"; done
  read -r all_us _ < <(run cl.all "CL.ALL $n$keys$specs" "unused")
  budget=$(python3 -c "print(f'{$n*$single:.2f}')")
  with_floor=$(python3 -c "print(f'{$n*$single+$floor_hot:.2f}')")
  printf '%-12s %10s %14s %12s %7s\n' "$n" "$all_us" "$budget" "$with_floor" "$(ratio "$all_us" "$with_floor")"
done

if [ -n "${HOT_US[Twin cl_throttle (FCALL)]:-}" ]; then
  # The SPEC's target for the twin: no slower than the plain Lua GCRA script users fall back on.
  # Measured again in alternating pairs (a shared machine's load moves between scenarios).
  ratios=()
  full=$REQUESTS; REQUESTS=$((full / 4))
  for _ in 1 2 3 4 5; do
    lua=$(run evalsha "EVALSHA $LUA_SHA 1 __KEY__ 1000000 1 1000000000" bench:hot | cut -d' ' -f1)
    twin=$(run fcall "FCALL cl_throttle 1 __KEY__ 99 100000000 1" bench:hot | cut -d' ' -f1)
    ratios+=("$(python3 -c "print($twin/$lua)")")
  done
  REQUESTS=$full
  printf '\nTwin cl_throttle (FCALL) / Lua GCRA (EVALSHA), hot key: %s in the table, median %s of 5 alternating pairs\n' \
    "$(ratio "${HOT_US[Twin cl_throttle (FCALL)]}" "${HOT_US[Lua GCRA (EVALSHA)]}")" \
    "$(python3 -c "import statistics; print(f'{statistics.median([$(IFS=,; echo "${ratios[*]}")]):.2f}x')")"
fi

# A server run as a cache (no AOF, no replica, never forked): nothing can receive a replicated
# write, so the module builds none (src/store/replication.rs). The same commands, hot key.
printf '\nOn a server run as a cache (nothing to replicate to), hot key, usec per call\n'
printf '%-26s %9s %6s %9s\n' command "usec" xSET "replicated"
CACHE_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$DIR/cache"
${THROTTLE_SERVER:-redis-server} --port "$CACHE_PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$DIR/cache" \
  --loadmodule "$MODULE" --daemonize yes --logfile "$DIR/cache/server.log"
trap 'redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true; redis-cli -p "$REPLICA_PORT" shutdown nosave >/dev/null 2>&1 || true; redis-cli -p "$CACHE_PORT" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$DIR"' EXIT
for _ in $(seq 100); do redis-cli -p "$CACHE_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
cache_base=""
for s in "SET PX (baseline)|SET __KEY__ 1795354456188603542 PX 600000|set" "CL.THROTTLE|CL.THROTTLE __KEY__ 99 100000000 1|cl.throttle" \
  "CL.COUNTER|CL.COUNTER __KEY__ 1000000000 60|cl.counter" "CL.WINDOW limit 100|CL.WINDOW __KEY__ 100 1 MS|cl.window"; do
  IFS='|' read -r name cmd stat <<<"$s"
  read -r us _ < <(PORT=$CACHE_PORT run "$stat" "$cmd" "bench:hot")
  [ -z "$cache_base" ] && cache_base=$us
  printf '%-26s %9s %6s %9s\n' "$name" "$us" "$(ratio "$us" "$cache_base")" "${HOT_US[$name]:-}"
done

# Memory: used_memory growth per key over $KEYS distinct keys, each written once ("fresh") and
# then written a second time ("reused": how a limiter that saw traffic sits idle).
mem_per_key() { # $1 command with __KEY__, $2 passes
  cli FLUSHALL >/dev/null; sleep 0.2
  local before after
  before=$(cli INFO memory | tr -d '\r' | sed -n 's/^used_memory:\([0-9]*\)/\1/p')
  python3 - "$1" "$KEYS" "$2" <<'PY' | redis-cli -p "$PORT" --pipe >/dev/null
import sys
cmd, n, passes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
out = sys.stdout.buffer
for _ in range(passes):
    for i in range(n):
        for part in cmd.split(";"):  # several commands per key: "MULTI;INCR k;PEXPIRE k 1;EXEC"
            words = [w.replace("__KEY__", f"lim:{i:08d}").encode() for w in part.split()]
            out.write(b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(w), w) for w in words))
PY
  after=$(cli INFO memory | tr -d '\r' | sed -n 's/^used_memory:\([0-9]*\)/\1/p')
  python3 -c "print(f'{($after-$before)/$KEYS:.1f}')"
}

printf '\nMemory per idle-but-unexpired limiter (bytes per key over %s keys)\n' "$KEYS"
printf '%-34s %10s %7s %10s %7s\n' command fresh ratio reused ratio
base_fresh=""
MEM_SCENARIOS=(
  "SET PX (baseline)|SET __KEY__ 1795354456188603542 PX 600000"
  "CL.THROTTLE|CL.THROTTLE __KEY__ 10 1 600"
)
MEM_EXTRA=${BENCH_MEM_EXTRA:-bench/memory.txt}
if [ -f "$MEM_EXTRA" ]; then while IFS= read -r line; do [ -n "$line" ] && MEM_SCENARIOS+=("$line"); done < "$MEM_EXTRA"; fi
if [ "${TWIN:-1}" != 0 ]; then MEM_SCENARIOS+=("Twin cl_throttle (FCALL)|FCALL cl_throttle 1 __KEY__ 10 1 600"); fi
for s in "${MEM_SCENARIOS[@]}"; do
  IFS='|' read -r name cmd <<<"$s"
  fresh=$(mem_per_key "$cmd" 1); reused=$(mem_per_key "$cmd" 2)
  [ -z "$base_fresh" ] && base_fresh=$fresh && base_reused=$reused
  printf '%-34s %10s %7s %10s %7s\n' "$name" "$fresh" "$(ratio "$fresh" "$base_fresh")" "$reused" "$(ratio "$reused" "$base_reused")"
done
echo
echo "server: $(cli INFO server | tr -d '\r' | grep -E '^redis_version:')"
