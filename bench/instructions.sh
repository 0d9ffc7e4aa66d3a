#!/usr/bin/env bash
# make bench, part 2: CPU per call as INSTRUCTIONS, counted by callgrind, so the figures do not
# depend on the machine's speed (the timing table of bench/run.sh moves with the load); on a
# loaded machine runs of one build still differed by up to ~2% (170 instructions a call), so
# compare builds over several runs. Each scenario runs in its own redis-server under
# `valgrind --tool=callgrind --toggle-collect=call`: only the server's `call()` (one command's
# execution, as INFO commandstats times it, networking excluded) is counted, then divided by
# the number of commands executed.
#
#   bench/instructions.sh [N]      N calls per scenario (default 20000)
# Env: THROTTLE_SERVER (a redis-server), THROTTLE_MODULE (the module; default: the release
# build), BENCH_SCENARIOS (a file of extra `name|command[|setup]` lines), BENCH_ONLY (a regular
# expression: only the scenarios whose name matches, plus the SET and floor baselines),
# BENCH_RESULTS (a file: the table also as `name<TAB>instructions` lines; scripts/plots-perf.sh).
# The Functions twin's cl_throttle against the plain Lua GCRA script, counted whole:
#   BENCH_SCENARIOS=bench/twin-instructions.txt BENCH_ONLY='cl_throttle|Lua GCRA .*whole' bench/instructions.sh
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20000}
MODULE=${THROTTLE_MODULE:-$(pwd)/target/release/libredis_throttle.so}
FLOOR=$(pwd)/target/bench/floor.so
command -v valgrind >/dev/null || { echo "instructions: valgrind is missing (apt-get install -y valgrind)" >&2; exit 1; }
[ -f "$FLOOR" ] || { echo "instructions: $FLOOR is missing: bench/run.sh builds it" >&2; exit 1; }
DIR=$(mktemp -d)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cleanup() { redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$DIR"; }
trap cleanup EXIT

LUA_GCRA=$(cat bench/gcra.lua)

# One setup step (words joined by `+`): `populate:N` N other keys (DEBUG POPULATE: strings
# the limiters never touch); `limiters:N` N limiter keys bench:000000000000… written by the
# module (`CL.THROTTLE key 99 1 3600` from a script, so they live an hour);
# `reload` (DEBUG RELOAD: every value compact again); else redis-cli words.
setup() {
  case $1 in
    populate:*) redis-cli -p "$PORT" DEBUG POPULATE "${1#populate:}" other: 19 >/dev/null ;;
    limiters:*) redis-cli -p "$PORT" EVAL "for i = 0, tonumber(ARGV[1]) - 1 do redis.call('CL.THROTTLE', string.format('bench:%012d', i), 99, 1, 3600) end" 0 "${1#limiters:}" >/dev/null ;;
    reload) redis-cli -p "$PORT" DEBUG RELOAD >/dev/null ;;
    # shellcheck disable=SC2046
    *) redis-cli -p "$PORT" $(tr '+' ' ' <<<"$1") >/dev/null ;;
  esac
}

# Instructions per command of `cmd` on a hot key (every call admitted and written, unless the
# scenario says otherwise); a scenario whose words start with `-r N` runs on random keys instead
# (redis-benchmark's __rand_int__); `setup` (redis-cli words, e.g. a CONFIG SET) runs first.
count() { # $1 command words, $2 setup, $3 the scenario's name
  rm -f "$DIR"/callgrind.out.*
  # shellcheck disable=SC2086
  # `call()` is entered again by a nested command (RM_Call: the GET that reads a compact value),
  # which toggles collection off inside it; the scenarios marked "(whole)" count from
  # `processCommand` instead (never nested: the command's lookup and checks included, for the
  # floor as for the module), and divide by the benchmarked command's own calls.
  local toggle=call
  [[ ${3:-} == *"(whole)"* ]] && toggle=processCommand
  # (One file per process: the child forked for the replica's sync writes its own.)
  # Instrumentation starts after the setup (`callgrind_control -i on`): a setup of a million keys
  # costs no simulation.
  valgrind --tool=callgrind --instr-atstart=no --toggle-collect=$toggle --callgrind-out-file="$DIR/callgrind.out.%p" \
    ${THROTTLE_SERVER:-redis-server} --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$DIR" \
    --enable-debug-command yes --loadmodule "$MODULE" --loadmodule "$FLOOR" >"$DIR/valgrind.log" 2>&1 &
  local pid=$!
  local out="$DIR/callgrind.out.$pid"
  for _ in $(seq 600); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
  # A replica (without the module) first, so that the module builds its replicated commands,
  # as the floor does (and as on any server with a replica or an AOF; both then also pay the
  # feeding of the replica). A "(cache)" scenario has none: on a server run as a cache the
  # module builds no replicated command (src/store/replication.rs).
  local replica=""
  if [[ ${3:-} != *"(cache)"* ]]; then
    replica=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    mkdir -p "$DIR/replica"
    ${THROTTLE_SERVER:-redis-server} --port "$replica" --bind 127.0.0.1 --save "" --appendonly no --dir "$DIR/replica" \
      --replicaof 127.0.0.1 "$PORT" --daemonize yes --logfile "$DIR/replica/server.log"
    for _ in $(seq 600); do redis-cli -p "$replica" INFO replication 2>/dev/null | grep -q 'master_link_status:up' && break; sleep 0.1; done
  fi
  local cmd=$1
  # A scenario calling the Functions twin loads it (TWIN: another version of the library).
  if [[ $cmd == FCALL* ]]; then redis-cli -p "$PORT" -x FUNCTION LOAD REPLACE < "${TWIN:-functions/throttle.lua}" >/dev/null; fi
  if [[ $cmd == *EVALSHA* ]]; then
    local sha; sha=$(redis-cli -p "$PORT" SCRIPT LOAD "$LUA_GCRA")
    cmd=${cmd//__SHA__/$sha}
  fi
  local step
  for step in ${2:-}; do setup "$step"; done
  # Only the benchmark counts: the setup's own commands are forgotten.
  redis-cli -p "$PORT" CONFIG RESETSTAT >/dev/null
  callgrind_control -z "$pid" >/dev/null 2>&1
  callgrind_control -i on "$pid" >/dev/null 2>&1
  # shellcheck disable=SC2086
  redis-benchmark -p "$PORT" -n "$N" -c 4 -P 16 -q $cmd >/dev/null 2>&1
  local calls
  # A script's own redis.call()s are counted in INFO commandstats too (GET, TIME, SET): divide
  # by the EVALSHA calls alone, not by every command executed; so for a "(whole)" scenario,
  # by the benchmarked command's calls (not its nested GETs).
  local stat='[^:]*'
  if [[ $cmd == EVALSHA* ]]; then stat=evalsha; fi
  if [ $toggle = processCommand ]; then stat=$(sed 's/^-r [0-9]* //' <<<"$cmd" | awk '{print tolower($1)}'); fi
  calls=$(redis-cli -p "$PORT" INFO commandstats | tr -d '\r' | sed -n "s/^cmdstat_$stat:calls=\([0-9]*\),.*/\1/p" | awk '{s+=$1} END {print s}')
  redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true
  if [ -n "$replica" ]; then redis-cli -p "$replica" shutdown nosave >/dev/null 2>&1 || true; fi
  wait "$pid" || true
  local total
  total=$(sed -n 's/^totals: \([0-9]*\).*/\1/p' "$out")
  python3 -c "print(round($total / $calls))"
}

SCENARIOS=(
  "SET PX (baseline)|SET bench:hot 1795354456188603542 PX 600000"
  "module floor (floor.c)|FLOOR.TOUCH bench:hot"
  "CL.THROTTLE|CL.THROTTLE bench:hot 99 100000000 1"
  "CL.WINDOW limit 100|CL.WINDOW bench:hot 100 1 MS"
  "CL.BUCKET|CL.BUCKET bench:hot 1000 1000 1 MS"
  "CL.COUNTER|CL.COUNTER bench:hot 1000000000 60"
  "CL.QUOTA|CL.QUOTA bench:hot 1000000000 PER MONTH"
  # On a server run as a cache (nothing to replicate to; see count).
  "CL.THROTTLE (cache)|CL.THROTTLE bench:hot 99 100000000 1"
  "CL.WINDOW limit 100 (cache)|CL.WINDOW bench:hot 100 1 MS"
  "CL.COUNTER (cache)|CL.COUNTER bench:hot 1000000000 60"
  "CL.QUOTA zone + anchor|CL.QUOTA bench:hot 1000000000 PER MONTH TZ Europe/Berlin ANCHOR 2026-01-31T09:00:00Z"
  "CL.ALL 1 limiter|CL.ALL 1 b:{u}:1 THROTTLE 99 100000000 1"
  "CL.ALL 3 limiters|CL.ALL 3 b:{u}:1 b:{u}:2 b:{u}:3 THROTTLE 99 100000000 1 THROTTLE 99 100000000 1 THROTTLE 99 100000000 1"
  "CL.ALL 8 limiters|CL.ALL 8 b:{u}:1 b:{u}:2 b:{u}:3 b:{u}:4 b:{u}:5 b:{u}:6 b:{u}:7 b:{u}:8 THROTTLE 99 100000000 1 THROTTLE 99 100000000 1 THROTTLE 99 100000000 1 THROTTLE 99 100000000 1 THROTTLE 99 100000000 1 THROTTLE 99 100000000 1 THROTTLE 99 100000000 1 THROTTLE 99 100000000 1"
  # CL.EACH: the same limiters, each decided on its own (one command per slot for a gateway's
  # independent descriptors).
  "CL.EACH 3 limiters|CL.EACH 3 b:{u}:1 b:{u}:2 b:{u}:3 THROTTLE 99 100000000 1 THROTTLE 99 100000000 1 THROTTLE 99 100000000 1"
  "CL.EACH 8 limiters|CL.EACH 8 b:{u}:1 b:{u}:2 b:{u}:3 b:{u}:4 b:{u}:5 b:{u}:6 b:{u}:7 b:{u}:8 THROTTLE 99 100000000 1 THROTTLE 99 100000000 1 THROTTLE 99 100000000 1 THROTTLE 99 100000000 1 THROTTLE 99 100000000 1 THROTTLE 99 100000000 1 THROTTLE 99 100000000 1 THROTTLE 99 100000000 1"
  "Lua GCRA (EVALSHA)|EVALSHA __SHA__ 1 bench:hot 1000000 1 1000000000"
  "CL.PACE|CL.PACE bench:hot 100000000 1"
  "ZADD (lease baseline)|ZADD bench:hot 1795354456188 job-1"
  "CL.ACQUIRE (renewal)|CL.ACQUIRE bench:hot 20 300 job-1"
  "ZADD (a new key)|-r 1000000 ZADD bench:__rand_int__ 1795354456188 job-1"
  "CL.ACQUIRE (a new key)|-r 1000000 CL.ACQUIRE bench:__rand_int__ 20 300 job-1"
  "CL.RELEASE (no lease)|CL.RELEASE bench:hot job-1"
  # Denials (one unit per 10^9 s: every call after the first is denied): events off, then on.
  "CL.THROTTLE denied|CL.THROTTLE bench:hot 0 1 1000000000"
  "CL.THROTTLE denied, events|CL.THROTTLE bench:hot 0 1 1000000000|CONFIG+SET+notify-keyspace-events+Ed"
  "CL.THROTTLE admitted, events|CL.THROTTLE bench:hot 99 100000000 1|CONFIG+SET+notify-keyspace-events+Ed"
  # At scale, counted from processCommand ("(whole)": nested GETs included): the floor and a
  # hot key for reference, a hot key among 1,000,000 other keys; random keys among 100,000 and
  # 1,000,000 limiters the module wrote; the same after DEBUG RELOAD (every value compact).
  # bench/scale.sh measures these against the floor on as many keys.
  "module floor (whole)|FLOOR.TOUCH bench:hot"
  "CL.THROTTLE (whole)|CL.THROTTLE bench:hot 99 100000000 1"
  "CL.THROTTLE, 1M other keys (whole)|CL.THROTTLE bench:hot 99 100000000 1|populate:1000000"
  "CL.THROTTLE, 100k limiters (whole)|-r 100000 CL.THROTTLE bench:__rand_int__ 99 1 3600|limiters:100000"
  "CL.THROTTLE, 100k reloaded (whole)|-r 100000 CL.THROTTLE bench:__rand_int__ 99 1 3600|limiters:100000 reload"
  "CL.THROTTLE, 1M limiters (whole)|-r 1000000 CL.THROTTLE bench:__rand_int__ 99 1 3600|limiters:1000000"
  "CL.THROTTLE, 1M reloaded (whole)|-r 1000000 CL.THROTTLE bench:__rand_int__ 99 1 3600|limiters:1000000 reload"
)
if [ -f "${BENCH_SCENARIOS:-}" ]; then while IFS= read -r line; do [ -n "$line" ] && SCENARIOS+=("$line"); done < "$BENCH_SCENARIOS"; fi

printf '\nInstructions per call (callgrind, server call() only, hot key, %s calls each)\n' "$N"
printf '%-26s %12s %8s %8s\n' command instructions xSET xfloor
declare -A IR
set_ir=""; floor_ir=""
if [ -n "${BENCH_RESULTS:-}" ]; then : > "$BENCH_RESULTS"; fi
for s in "${SCENARIOS[@]}"; do
  IFS='|' read -r name cmd setup <<<"$s"
  if [ -n "${BENCH_ONLY:-}" ] && ! [[ $name =~ $BENCH_ONLY || $name == SET* || $name == "module floor (floor.c)" ]]; then continue; fi
  ir=$(count "$cmd" "${setup:-}" "$name")
  IR[$name]=$ir
  [ -z "$set_ir" ] && set_ir=$ir
  [[ $name == "module floor"* ]] && floor_ir=$ir
  if [ -n "${BENCH_RESULTS:-}" ]; then printf '%s\t%s\n' "$name" "$ir" >> "$BENCH_RESULTS"; fi
  printf '%-26s %12s %8s %8s\n' "$name" "$ir" "$([[ $name == *"(whole)"* ]] && echo - || python3 -c "print(f'{$ir/$set_ir:.2f}x')")" "$(python3 -c "print(f'{$ir/${floor_ir:-$ir}:.2f}x')")"
done
if [ -n "${BENCH_ONLY:-}" ]; then exit 0; fi
single=${IR[CL.THROTTLE]}
printf '\nCL.ALL and CL.EACH with N limiters against N single CL.THROTTLE calls + one floor (target: <= 1.00x)\n'
for n in 1 3 8; do
  key="CL.ALL $n limiter"; [ "$n" -gt 1 ] && key="${key}s"
  ir=${IR[$key]}
  printf '%-26s %12s %8s\n' "$key" "$ir" "$(python3 -c "print(f'{$ir/($n*$single+$floor_ir):.2f}x')")"
done
for n in 3 8; do
  key="CL.EACH $n limiters"
  ir=${IR[$key]}
  printf '%-26s %12s %8s\n' "$key" "$ir" "$(python3 -c "print(f'{$ir/($n*$single+$floor_ir):.2f}x')")"
done
