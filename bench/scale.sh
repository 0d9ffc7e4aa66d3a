#!/usr/bin/env bash
# make bench, part 3: the cost at scale. CL.THROTTLE on random keys among N live limiters, beside
# the floor (bench/floor.c's FLOOR.TOUCH) on as many live keys of its own, for N = 1,000, 100,000
# and 1,000,000: warm (every key written by this server process), then after DEBUG RELOAD (every
# value compact again, as after a restart or on a promoted replica). Every server has a
# module-less replica attached, so both replicate (as with an AOF).
#
# Keys stay live: `CL.THROTTLE key 999 1 3600` is a limiter of 1 an hour with a burst of 999, so
# a key written lives an hour per call and every call of the run is admitted and written (the
# expensive path); FLOOR.TOUCH keeps its key ten minutes. DBSIZE is printed for every row.
#
# Two measures, each beside the floor in the same run:
# - instructions (callgrind, counted from `processCommand`: whole commands, a nested call
#   included), each subject in a server of its own under valgrind; the keys are written and
#   reloaded with instrumentation off (`--instr-atstart=no`), so setup costs no simulation;
# - time: server CPU per call (INFO commandstats, usec_per_call), redis-benchmark with 50
#   clients, pipeline 16, on one server without valgrind, ROUNDS rounds of the module and the
#   floor alternating, medians (noisy on a shared machine: compare the ratio, not the
#   microseconds).
#
#   bench/scale.sh                 (about 5 minutes on 2 shared cores)
# Env: SCALE_KEYS (default "1000 100000 1000000"), SCALE_AOF=1 (an AOF instead of the replica), CALLS (callgrind calls per row, default
# 20000), REQUESTS (timed calls per row, default 200000), ROUNDS (default 3), THROTTLE_SERVER, SCALE_RESULTS (a file:
# the rows as TSV for the plots crate; `make plots-perf` writes docs/src/img/scale.tsv).
set -euo pipefail
cd "$(dirname "$0")/.."
KEYS_LIST=${SCALE_KEYS:-1000 100000 1000000}
CALLS=${CALLS:-20000}
REQUESTS=${REQUESTS:-200000}
ROUNDS=${ROUNDS:-3}
# SCALE_AOF=1: an append-only file (appendfsync everysec) instead of the replica.
AOF=${SCALE_AOF:-0}
PERSIST="--appendonly no"
WITH="a module-less replica attached"
if [ "$AOF" = 1 ]; then PERSIST="--appendonly yes --appendfsync everysec"; WITH="an append-only file (everysec), no replica"; fi
MODULE=${THROTTLE_MODULE:-$(pwd)/target/release/libredis_throttle.so}
FLOOR=$(bench/floor.sh)
SERVER=${THROTTLE_SERVER:-redis-server}
command -v valgrind >/dev/null || { echo "scale: valgrind is missing (apt-get install -y valgrind)" >&2; exit 1; }
DIR=$(mktemp -d)
PIDS=()
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cleanup() {
  for p in "${PORTS[@]:-}"; do [ -n "$p" ] && redis-cli -p "$p" shutdown nosave >/dev/null 2>&1 || true; done
  rm -rf "$DIR"
}
PORTS=()
trap cleanup EXIT

# The command of each subject (key __KEY__), its INFO commandstats name, and its key writer.
LIMITER="CL.THROTTLE __KEY__ 999 1 3600"
subject_cmd() { case $1 in module) echo "$LIMITER" ;; floor) echo "FLOOR.TOUCH __KEY__" ;; esac; }
subject_stat() { case $1 in module) echo cl.throttle ;; floor) echo floor.touch ;; esac; }
# Writes keys bench:000000000000 … (redis-benchmark's __rand_int__ names), 100,000 per script.
populate() { # $1 port, $2 subject, $3 count
  local call
  case $2 in
    module) call="redis.call('CL.THROTTLE', string.format('bench:%012d', i), 999, 1, 3600)" ;;
    floor) call="redis.call('FLOOR.TOUCH', string.format('bench:%012d', i))" ;;
  esac
  local from=0 to
  while [ "$from" -lt "$3" ]; do
    to=$((from + 100000)); [ "$to" -gt "$3" ] && to=$3
    redis-cli -p "$1" EVAL "for i = tonumber(ARGV[1]), tonumber(ARGV[2]) - 1 do $call end" 0 "$from" "$to" >/dev/null
    from=$to
  done
}
wait_up() { for _ in $(seq 600); do redis-cli -p "$1" ping >/dev/null 2>&1 && return 0; sleep 0.1; done; echo "scale: server $1 did not start" >&2; exit 1; }
# A module-less replica of the server on port $1, in $2; waits for its link.
replica_of() {
  local port; port=$(free_port); PORTS+=("$port")
  mkdir -p "$2"
  $SERVER --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$2" --replicaof 127.0.0.1 "$1" \
    --daemonize yes --logfile "$2/server.log"
  for _ in $(seq 600); do redis-cli -p "$port" INFO replication 2>/dev/null | grep -q 'master_link_status:up' && return 0; sleep 0.1; done
  echo "scale: the replica did not link" >&2; exit 1
}
calls_of() { redis-cli -p "$1" INFO commandstats | tr -d '\r' | sed -n "s/^cmdstat_$2:calls=\([0-9]*\),.*/\1/p"; }
totals() { sed -n 's/^totals: \([0-9]*\).*/\1/p' "$1"; }
dbsize() { redis-cli -p "$1" DBSIZE; }

# Instructions per call of `subject` among N keys, warm then reloaded: prints "ir_warm ir_reloaded dbsize_warm dbsize_reloaded".
instructions() { # $1 subject, $2 N
  local port; port=$(free_port); PORTS+=("$port")
  local dir="$DIR/cg-$1-$2"; mkdir -p "$dir"
  valgrind --tool=callgrind --instr-atstart=no --toggle-collect=processCommand --callgrind-out-file="$dir/callgrind.out.%p" \
    "$SERVER" --port "$port" --bind 127.0.0.1 --save "" $PERSIST --dir "$dir" --enable-debug-command yes \
    --loadmodule "$MODULE" --loadmodule "$FLOOR" >"$dir/valgrind.log" 2>&1 &
  local pid=$!
  wait_up "$port"
  [ "$AOF" = 1 ] || replica_of "$port" "$dir/replica"
  populate "$port" "$1" "$2"
  local cmd out=() sizes=() state
  cmd=$(subject_cmd "$1"); cmd=${cmd//__KEY__/bench:__rand_int__}
  for state in warm reloaded; do
    if [ "$state" = reloaded ]; then redis-cli -p "$port" DEBUG RELOAD >/dev/null; fi
    sizes+=("$(dbsize "$port")")
    redis-cli -p "$port" CONFIG RESETSTAT >/dev/null
    callgrind_control -z "$pid" >/dev/null 2>&1; callgrind_control -i on "$pid" >/dev/null 2>&1
    # shellcheck disable=SC2086
    redis-benchmark -p "$port" -n "$CALLS" -c 4 -P 16 -r "$2" -q $cmd >/dev/null 2>&1
    callgrind_control -i off "$pid" >/dev/null 2>&1
    rm -f "$dir"/callgrind.out.*.*; callgrind_control -d "$state" "$pid" >/dev/null 2>&1
    local file; file=$(ls "$dir"/callgrind.out.$pid.* | head -1)
    out+=("$(python3 -c "print(round($(totals "$file") / $(calls_of "$port" "$(subject_stat "$1")")))")")
  done
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  wait "$pid" || true
  echo "${out[0]} ${out[1]} ${sizes[0]} ${sizes[1]}"
}

# Time per call (usec) of `subject` among N keys on the timing server, warm then reloaded.
TPORT=$(free_port); PORTS+=("$TPORT")
mkdir -p "$DIR/time"
$SERVER --port "$TPORT" --bind 127.0.0.1 --save "" $PERSIST --dir "$DIR/time" --enable-debug-command yes \
  --loadmodule "$MODULE" --loadmodule "$FLOOR" --daemonize yes --logfile "$DIR/time/server.log"
wait_up "$TPORT"
[ "$AOF" = 1 ] || replica_of "$TPORT" "$DIR/time/replica"
usec_of() { redis-cli -p "$TPORT" INFO commandstats | tr -d '\r' | sed -n "s/^cmdstat_$1:.*usec_per_call=\([0-9.]*\).*/\1/p"; }
timed_round() { # $1 subject, $2 N
  redis-cli -p "$TPORT" FLUSHALL >/dev/null
  populate "$TPORT" "$1" "$2"
  local cmd out=() state
  cmd=$(subject_cmd "$1"); cmd=${cmd//__KEY__/bench:__rand_int__}
  for state in warm reloaded; do
    if [ "$state" = reloaded ]; then redis-cli -p "$TPORT" DEBUG RELOAD >/dev/null; fi
    redis-cli -p "$TPORT" CONFIG RESETSTAT >/dev/null
    # shellcheck disable=SC2086
    redis-benchmark -p "$TPORT" -n "$REQUESTS" -c 50 -P 16 -r "$2" -q $cmd >/dev/null 2>&1
    out+=("$(usec_of "$(subject_stat "$1")")")
  done
  echo "${out[0]} ${out[1]}"
}
# ROUNDS rounds, the module's and the floor's alternating (the machine's load moves between
# them): prints the medians "module_warm module_reloaded floor_warm floor_reloaded".
timed() { # $1 N
  local r m f ms=() fs=()
  for r in $(seq "$ROUNDS"); do
    m=$(timed_round module "$1"); f=$(timed_round floor "$1")
    ms+=("$m"); fs+=("$f")
  done
  python3 - "${ms[@]}" "--" "${fs[@]}" <<'PY'
import statistics, sys
args = sys.argv[1:]; cut = args.index("--")
med = lambda rows, i: statistics.median(float(r.split()[i]) for r in rows)
m, f = args[:cut], args[cut + 1:]
print(med(m, 0), med(m, 1), med(f, 0), med(f, 1))
PY
}

ratio() { python3 -c "print(f'{$1/$2:.2f}x')"; }
printf '\nCost at scale: CL.THROTTLE on random keys among N live limiters (%s: every call admitted and\n' "${LIMITER//__KEY__/key}"
printf 'written), beside the floor (FLOOR.TOUCH) on as many live keys; %s.\n' "$WITH"
printf 'Instructions: callgrind from processCommand (whole commands), %s calls a row. Time: server usec\n' "$CALLS"
printf 'per call (INFO commandstats), %s calls, 50 clients, pipeline 16, one server, medians of %s rounds.\n' "$REQUESTS" "$ROUNDS"
printf '%-9s %-9s %9s %9s %10s %10s %7s %8s %8s %7s\n' keys state "DBSIZE" "floor DB" "module ir" "floor ir" xfloor "mod usec" "flr usec" xfloor
if [ -n "${SCALE_RESULTS:-}" ]; then
  {
    echo "# command: make plots-perf (bench/scale.sh)"
    echo "# method: callgrind from processCommand, $CALLS calls a row; time: INFO commandstats usec_per_call, $REQUESTS calls, 50 clients, pipeline 16, medians of $ROUNDS alternating rounds; $WITH"
    echo "# limiter: ${LIMITER//__KEY__/key}"
    echo "# date: $(date -u +%Y-%m-%d)"
    echo "# server: $($SERVER --version | sed -n 's/.* v=\([^ ]*\).*/Redis \1/p')"
    echo "# keys	state	dbsize	floor dbsize	module instructions	floor instructions	module usec	floor usec"
  } > "$SCALE_RESULTS"
fi
for n in $KEYS_LIST; do
  read -r m_warm m_rel m_db m_db2 < <(instructions module "$n")
  read -r f_warm f_rel f_db f_db2 < <(instructions floor "$n")
  read -r mt_warm mt_rel ft_warm ft_rel < <(timed "$n")
  for state in warm reloaded; do
    if [ $state = warm ]; then set -- "$m_db" "$f_db" "$m_warm" "$f_warm" "$mt_warm" "$ft_warm"; else set -- "$m_db2" "$f_db2" "$m_rel" "$f_rel" "$mt_rel" "$ft_rel"; fi
    printf '%-9s %-9s %9s %9s %10s %10s %7s %8s %8s %7s\n' "$n" "$state" "$1" "$2" "$3" "$4" "$(ratio "$3" "$4")" "$5" "$6" "$(ratio "$5" "$6")"
    if [ -n "${SCALE_RESULTS:-}" ]; then printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$n" "$state" "$@" >> "$SCALE_RESULTS"; fi
  done
done
