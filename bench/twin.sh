#!/usr/bin/env bash
# The Functions twin's exact window at the caps, against the module, on one server: server time
# per call (INFO commandstats usec_per_call, and SLOWLOG at threshold 0 for the largest single
# call), never wall clock. Each scenario plants the same bytes for the module and the twin,
# then makes the same call on each, REPEAT times.
#
#   bench/twin.sh            (REPEAT=20; CALLGRIND=1: instructions per call instead, counted by
#                            callgrind from the server's processCommand, nested commands included
#                            (valgrind: the load does not move them; REPEAT=2 is enough);
#                            THROTTLE_SERVER=... for another server; ONLY=<part of a
#                            scenario's name> for that scenario alone, without cl_throttle;
#                            ONLY=cl_throttle for the cl_throttle part alone; TWIN=<file> another
#                            version of the library, e.g. to compare with `git show REV:functions/throttle.lua`)
#
# Scenarios (the caps: a 100,000-entry exact log, 10,000 buckets; a ring of 100,001 buckets
# the module writes after `throttle.max-buckets` was raised to its ceiling):
#   denied exact      a full 100,000-entry log (entries spread over the window), denied
#   admitted exact    a log of 99,999 entries, admitted (one SETRANGE appended)
#   clock step        a full log whose newest 50,000 entries lie an hour ahead (the clock
#                     stepped back): the denial rewrites them at now
#   log -> buckets    a full log read with PRECISION (10,000 buckets), denied; and admitted
#                     (a limit one higher: the ring written)
#   buckets -> log    a full 10,000-bucket ring read without PRECISION, denied
#   ring 100,001      a 100,001-bucket ring read with PRECISION at 10,000 buckets (regrouped)
#                     and without PRECISION (converted)
#   ring admitted     the same ring with two buckets empty, read without PRECISION: admitted, the log written
#   ring mixed        a 100,001-bucket ring of counts 0-2 at random read without PRECISION (the
#                     bucket-by-bucket worst case), admitted
#   cl_all x16        cl_all over 16 full logs, denied
# Then the twin's cl_throttle on a hot key against the module's CL.THROTTLE and the plain Lua
# GCRA script (bench/run.sh's) users fall back on, admitted and denied: redis-benchmark (50
# clients, pipeline 16), PAIRS alternating rounds, server µs per call from INFO commandstats,
# the median of each round's ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
MODULE=$(pwd)/target/release/libredis_throttle.so
[ -f "$MODULE" ] || { echo "bench/twin.sh: build the module first (make build)" >&2; exit 1; }
PORT=${BENCH_PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')}
DIR=$(mktemp -d)
trap 'redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true; wait 2>/dev/null; rm -rf "$DIR"' EXIT
if [ -n "${CALLGRIND:-}" ]; then
  valgrind --tool=callgrind --toggle-collect=processCommand --callgrind-out-file="$DIR/cg.out" \
    ${THROTTLE_SERVER:-redis-server} --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$DIR" \
    --loadmodule "$MODULE" --busy-reply-threshold 100000 >"$DIR/valgrind.log" 2>&1 &
  CG_PID=$!
else
  ${THROTTLE_SERVER:-redis-server} --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$DIR" \
    --loadmodule "$MODULE" --daemonize yes --logfile "$DIR/server.log" --busy-reply-threshold 10000
fi
for _ in $(seq 600); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
redis-cli -p "$PORT" -x FUNCTION LOAD REPLACE < "${TWIN:-functions/throttle.lua}" >/dev/null

PORT=$PORT REPEAT=${REPEAT:-20} ONLY=${ONLY:-} CG_PID=${CG_PID:-} CG_OUT="$DIR/cg.out" python3 - <<'PY'
import os, socket, struct, subprocess, time

class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.f = self.s.makefile("rb")
    def send(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.s.sendall(b"".join(out))
    def read(self):
        line = self.f.readline()
        t, rest = line[:1], line[1:-2]
        if t == b"+": return rest.decode()
        if t == b"-": return Exception(rest.decode())
        if t == b":": return int(rest)
        if t == b"$":
            n = int(rest)
            if n < 0: return None
            data = self.f.read(n + 2)
            return data[:-2]
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise RuntimeError(line)
    def __call__(self, *args):
        self.send(*args)
        return self.read()

c = Conn(int(os.environ["PORT"]))
REPEAT = int(os.environ["REPEAT"])
NS = 1_000_000_000
WINDOW = 3600

def now_ns():
    s, us = c("TIME")
    return int(s) * NS + int(us) * 1000

def log(entries, head=0):
    return bytes([1, 0, 0, 0]) + struct.pack("<I", head) + b"".join(struct.pack("<q", e) for e in entries)

def ring(p_ns, newest, counts):
    return bytes([2] + [0] * 7) + struct.pack("<qq", p_ns, newest) + b"".join(struct.pack("<q", x) for x in counts)

def spread(n, start, end):
    return [start + (end - start) * i // n for i in range(n)]

def stats():
    out = {}
    for line in c("INFO", "commandstats").decode().split("\r\n"):
        if line.startswith("cmdstat_"):
            name, rest = line[8:].split(":", 1)
            f = dict(kv.split("=") for kv in rest.split(","))
            out[name] = (int(f["calls"]), int(f["usec"]))
    return out

CG_PID = os.environ.get("CG_PID")
def cpu():
    """The server process's CPU time (user + system, s): what a call costs whatever the load
    (usec_per_call and SLOWLOG are wall time, which includes waiting for a core)."""
    f = dict(l.split(":", 1) for l in c("INFO", "cpu").decode().split("\r\n") if ":" in l)
    return float(f["used_cpu_user"]) + float(f["used_cpu_sys"])

def instructions():
    """Instructions counted since the last call (callgrind: dumped, then zeroed)."""
    out = os.environ["CG_OUT"]
    for f in os.listdir(os.path.dirname(out)):
        if f.startswith("cg.out."):
            os.remove(os.path.join(os.path.dirname(out), f))
    subprocess.run(["callgrind_control", "-d", CG_PID], check=True, capture_output=True)
    total = 0
    for f in os.listdir(os.path.dirname(out)):
        if f.startswith("cg.out."):
            for line in open(os.path.join(os.path.dirname(out), f)):
                if line.startswith("totals:") or line.startswith("summary:"):
                    total = int(line.split()[1])
    subprocess.run(["callgrind_control", "-z", CG_PID], check=True, capture_output=True)
    return total

def measure(make, module_cmd, twin_cmd, keys=1, fresh=False, twin_refuses=False):
    """Server µs per call (commandstats) and the largest single call (SLOWLOG) of each; the
    planted value is made afresh for each side (relative to the server's clock). With
    CALLGRIND: instructions per call (µs) and the most in one call (slowest), in millions."""
    res = {}
    for name, cmd, stat in (("module", module_cmd, module_cmd[0].lower()), ("twin", twin_cmd, "fcall")):
        n = now_ns()
        # (one maker for every key, or a list: one maker per key)
        values = [m(n) for m in make] if isinstance(make, list) else [make(n)] * keys
        c("CONFIG", "SET", "slowlog-log-slower-than", "0")
        c("CONFIG", "SET", "slowlog-max-len", "1000")
        c("SLOWLOG", "RESET")
        c("CONFIG", "RESETSTAT")
        counts, cpus = [], []
        for i in range(REPEAT):
            if fresh or i == 0:
                for k in range(keys):
                    c("SET", "b:%d" % k, values[k])
            if CG_PID:
                instructions()
            t0 = cpu()
            r = c(*cmd)
            cpus.append(cpu() - t0)
            if CG_PID:
                counts.append(instructions())
            if i == 0:
                first = r
            if isinstance(r, Exception) and not (twin_refuses and name == "twin"):
                raise SystemExit(f"{name}: {' '.join(map(str, cmd[:4]))}...: {r}")
        calls, usec = stats()[stat]
        worst = max(e[2] for e in c("SLOWLOG", "GET", "1000") if e[3][0].lower() == stat.encode())
        res[name] = (usec / calls, worst, first)
        CPU[name] = (sum(cpus) / len(cpus) * 1000, max(cpus) * 1000)
        if CG_PID:
            res[name] = (sum(counts) / len(counts) / 1e6, max(counts) / 1e3, first)
    c("CONFIG", "SET", "slowlog-log-slower-than", "10000")
    return res

rows = []
CPU = {}
ONLY = os.environ.get("ONLY", "")
def scenario(label, make, margs, keys=1, all_spec=None, fresh=False, all_specs=None, twin_refuses=False):
    if ONLY and ONLY not in label:
        return
    if all_spec or all_specs:
        ks = ["b:%d" % k for k in range(keys)]
        specs = all_specs or all_spec * keys
        mcmd = ["CL.ALL", keys] + ks + specs
        tcmd = ["FCALL", "cl_all", keys] + ks + specs
    else:
        mcmd = ["CL.WINDOW", "b:0"] + margs
        tcmd = ["FCALL", "cl_window", 1, "b:0"] + margs
    # (the two sides run at different instants: their replies must agree on the decision; a
    # value planted in one bucket and called in the next may not, then the scenario runs again)
    for attempt in range(3):
        r = measure(make, mcmd, tcmd, keys, fresh, twin_refuses)
        (mu, mw, mr), (tu, tw, tr) = r["module"], r["twin"]
        if twin_refuses or mr[0] == tr[0]:
            break
    if twin_refuses:
        # (an earlier version of the twin, TWIN=..., may answer it: then its cost is shown)
        mr = [str(tr)[:40]] if isinstance(tr, Exception) else ["answered"] + tr[:4]
    assert twin_refuses or mr[0] == tr[0], f"{label}: module replied {mr}, twin {tr}"
    rows.append((label, mu, tu, tw))
    unit, most = ("M instr", "M instr") if CG_PID else ("µs", "ms")
    print(f"{label:34} module {mu:9.1f} {unit}   twin {tu:9.1f} {unit}   {tu / mu:6.1f}x   twin's slowest {tw / 1000:8.2f} {most}   "
          f"CPU (ms, mean/most) module {CPU['module'][0]:.2f}/{CPU['module'][1]:.2f} twin {CPU['twin'][0]:.2f}/{CPU['twin'][1]:.2f}   reply {mr[:5] if isinstance(mr, list) else mr}", flush=True)

H = WINDOW * NS
full = lambda n: log(spread(100_000, n - H + 60 * NS, n - NS))
scenario("denied exact, 100,000 entries", full, [100000, WINDOW])
scenario("admitted exact, 99,999 entries", lambda n: log(spread(99_999, n - H + 60 * NS, n - NS)), [100000, WINDOW], fresh=True)
scenario("clock step, 50,000 ahead", lambda n: log(spread(50_000, n - H + 60 * NS, n - NS) + [n + H] * 50_000), [100000, WINDOW], fresh=True)
scenario("log -> buckets (10,000), denied", full, [100000, WINDOW * 1000, "MS", "PRECISION", 360])
scenario("log -> buckets (10,000), admitted", full, [100001, WINDOW * 1000, "MS", "PRECISION", 360], fresh=True)
# A full ring at 10,000 buckets (precision 360 ms over the hour), 10 per bucket.
P = 360_000_000
scenario("buckets -> log, 10,000 buckets", lambda n: ring(P, n // P, [10] * 10_001), [100000, WINDOW])
P2 = 36_000_000
scenario("ring 100,001 -> 10,000 buckets", lambda n: ring(P2, n // P2, [1] * 100_001), [100000, WINDOW * 1000, "MS", "PRECISION", 360])
scenario("ring 100,001 -> exact log", lambda n: ring(P2, n // P2, [1] * 100_001), [100000, WINDOW])
scenario("ring 100,001 -> exact log, admitted", lambda n: ring(P2, n // P2, [1] * 99_999 + [0, 0]), [100000, WINDOW], fresh=True)
RAND = __import__("random").Random(1)
MIXED = [RAND.randint(0, 2) for _ in range(100_001)]
scenario("ring 100,001 counts 0-2 at random -> exact log", lambda n: ring(P2, n // P2, MIXED), [100000, WINDOW], fresh=True)
scenario("cl_all x16, 100,000 entries each", full, None, keys=16, all_spec=["WINDOW", 100000, WINDOW])
# cl_all over 8 keys whose window state it converts (the most the twin converts in one call),
# at the twin's own caps (10,000-bucket rings of uneven counts read as exact logs; full
# 100,000-entry logs read with PRECISION; 10,000-bucket rings regrouped to 5,000): 7 limiters
# that admit and a last one that asks for the whole limit and is denied (nothing written: every
# call finds the same keys), then all 8 admitting (every key converted and written); 16 such
# keys are refused (twin_refuses: the refusal's own cost).
P3 = 360_000_000
RINGS10K = [RAND.randint(0, 2) if i % 20 else 0 for i in range(10_001)]
RING10K = lambda n: ring(P3, n // P3, RINGS10K)
EXACT_SPEC = ["WINDOW", 100000, WINDOW]
PREC_SPEC = ["WINDOW", 100001, WINDOW * 1000, "PRECISION", 360]
HALF_SPEC = ["WINDOW", 100000, WINDOW * 1000, "PRECISION", 720]
DENY = ["QUANTITY", 100000]
for name, make, spec, ms in (("10,000-bucket uneven rings -> exact log", RING10K, EXACT_SPEC, []),
                             ("full logs -> 10,000 buckets", full, PREC_SPEC, ["MS"]),
                             ("10,000-bucket uneven rings -> 5,000", RING10K, HALF_SPEC, ["MS"])):
    scenario(f"cl_all x8 {name}, last denies", make, None, keys=8, all_specs=spec * 8 + DENY + ms)
    scenario(f"cl_all x8 {name}, admitted", make, None, keys=8, all_specs=spec * 8 + ms, fresh=True)
scenario("cl_all x16 10,000-bucket uneven rings -> exact log", RING10K, None, keys=16, all_spec=EXACT_SPEC, twin_refuses=True)
# Rings of 100,001 buckets (the module's raised cap): one read alone (its dearest case, counts
# 0-2 at random, denied and admitted); in cl_all the twin refuses them (twin_refuses: the
# refusal's own cost).
MIX95 = [RAND.randint(0, 2) if i % 20 else 0 for i in range(100_001)]
RINGMIX = lambda n: ring(P2, n // P2, MIX95)
scenario("ring 100,001 counts 0-2 at random -> exact log, denied", lambda n: ring(P2, n // P2, MIXED), [100000, WINDOW, 50000])
scenario("ring 100,001 counts 0-2 at random -> exact log, admitted (95,000)", RINGMIX, [100000, WINDOW], fresh=True)
scenario("cl_all x16 rings 100,001 -> exact log, last denies", RINGMIX, None, keys=16, all_specs=EXACT_SPEC * 16 + DENY, twin_refuses=True)
scenario("cl_all x16 rings 100,001 -> exact log, admitted", RINGMIX, None, keys=16, all_spec=EXACT_SPEC, fresh=True, twin_refuses=True)
PY

[ -n "${ONLY:-}" ] && [ "$ONLY" != cl_throttle ] && exit 0
# ---- cl_throttle against the module and a plain Lua GCRA (admitted and denied).
cli() { redis-cli -p "$PORT" "$@"; }
LUA_GCRA=$(cat bench/gcra.lua)
LUA_SHA=$(cli SCRIPT LOAD "$LUA_GCRA")
usec() { cli INFO commandstats | tr -d '\r' | sed -n "s/^cmdstat_$1:.*usec_per_call=\([0-9.]*\).*/\1/p"; }
one() { # $1 stat, then the command: µs per call on a hot key
  local stat=$1; shift
  cli DEL hot >/dev/null; cli CONFIG RESETSTAT >/dev/null
  redis-benchmark -p "$PORT" -n "${N:-20000}" -c 50 -P 16 -q "$@" >/dev/null 2>&1
  usec "$stat"
}
median() { python3 -c "import statistics,sys; print(f'{statistics.median(float(x) for x in sys.argv[1:]):.2f}')" "$@"; }
for mode in admitted denied; do
  if [ "$mode" = admitted ]; then targs="99 100000000 1"; largs="1000000 1 1000000000"; else targs="0 1 3600"; largs="1 3600 0"; fi
  r_mod=(); r_lua=(); m=(); t=(); l=()
  for _ in $(seq "${PAIRS:-5}"); do
    # shellcheck disable=SC2086
    mu=$(one cl.throttle CL.THROTTLE hot $targs); tu=$(one fcall FCALL cl_throttle 1 hot $targs); lu=$(one evalsha EVALSHA "$LUA_SHA" 1 hot $largs)
    m+=("$mu"); t+=("$tu"); l+=("$lu")
    r_mod+=("$(python3 -c "print($tu/$mu)")"); r_lua+=("$(python3 -c "print($tu/$lu)")")
  done
  printf 'cl_throttle %-8s  module %6s µs  twin %6s µs  Lua GCRA %6s µs (medians)   twin/module %5sx   twin/Lua GCRA %5sx (median of %s rounds)\n' \
    "$mode" "$(median "${m[@]}")" "$(median "${t[@]}")" "$(median "${l[@]}")" "$(median "${r_mod[@]}")" "$(median "${r_lua[@]}")" "${PAIRS:-5}"
done
