"""make bench (bench/python.sh): each limits strategy through limits' own Redis storage and
through redis_throttle.limits (module; Functions twin), one run, one machine.

A "request" is what Flask-Limiter does with headers on: hit(), then get_window_stats(). For each
cell: round trips per request (counted in redis-py), Redis CPU per request (INFO commandstats,
every command's usec, after CONFIG RESETSTAT) and requests per second from one client thread.
Two workloads: 1,000 users at 100 per minute (admitted), and one hot key at 10 per second
(mostly denied).

The floors (rows "floor: ..."): redis_throttle.limits with each limiter command replaced on the
wire by the least a command keeping the limiter's state can cost Redis: FLOOR.TOUCH
(bench/floor.c, the SPEC's floor of the module API) for the module; FCALL floor_log
(bench/floor.lua: the four calls cl_window's hot path makes, without its logic) for the twin's
windows. A target below a floor's ratio is out of reach of any command in that place."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import limits.strategies as strategies
from apps import RoundTrips
from limits import RateLimitItemPerMinute, RateLimitItemPerSecond
from limits.storage import storage_from_string
from servers import Server

import redis_throttle.limits  # noqa: F401

N = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
# The floor row each storage's Redis CPU is divided by ("x floor"; the target is at most 1.1).
FLOOR_OF = {"redis+throttle (module)": "floor: FLOOR.TOUCH", "redis+throttle (twin)": "floor: floor_log (twin)"}
ROUNDS = int(os.environ.get("PYTHON_BENCH_ROUNDS", "3"))
ROOT = Path(__file__).resolve().parents[3]


def floor_words(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """A limiter command as its floor: CL.* as FLOOR.TOUCH on its key, FCALL cl_window as
    FCALL floor_log (detection, a CL.THROTTLE without arguments, and other commands pass)."""
    name = str(args[0]).upper() if args else ""
    if name.startswith("CL.") and len(args) > 2:
        return ("FLOOR.TOUCH", args[1])
    if name == "FCALL" and len(args) > 3 and str(args[1]) == "cl_window":
        return ("FCALL", "floor_log", 1, args[3])
    return args


class FloorConnection(redis.Connection):
    def pack_command(self, *args: Any) -> list[bytes | memoryview]:
        return super().pack_command(*floor_words(args))


def redis_usec(server: Server) -> float:
    stats = server.client().info("commandstats")
    skip = ("cmdstat_info", "cmdstat_config")
    return sum(float(v["usec"]) for k, v in stats.items() if k.startswith("cmdstat_") and k not in skip)


def run(server: Server, uri: str, strategy: str, workload: str) -> tuple[float, float, float, float]:
    options: dict[str, Any] = {}
    if uri.startswith("floor:"):
        uri = uri.removeprefix("floor:")
        options["connection_pool"] = redis.ConnectionPool(
            host="127.0.0.1", port=server.port, connection_class=FloorConnection
        )
    storage = storage_from_string(uri, key_prefix=f"B{time.time_ns()}", **options)
    limiter = strategies.STRATEGIES[strategy](storage)
    if workload == "users":
        item, keys = RateLimitItemPerMinute(100), [f"user{i}" for i in range(1000)]
    else:
        item, keys = RateLimitItemPerSecond(10), ["hot"]
    rnd = random.Random(7)
    limiter.hit(item, "warm-up")  # connects (and detects the server)
    server.client().config_resetstat()
    admitted = 0
    with RoundTrips().counting() as trips:
        began = time.perf_counter()
        for _ in range(N):
            k = rnd.choice(keys)
            admitted += limiter.hit(item, k)
            limiter.get_window_stats(item, k)
        elapsed = time.perf_counter() - began
    return trips.count / N, redis_usec(server) / N, N / elapsed, admitted / N


def main() -> None:
    floor_module = subprocess.run(
        ["bash", str(ROOT / "bench/floor.sh")], check=True, capture_output=True, text=True
    ).stdout.strip()
    module, twin = Server("module", args=("--loadmodule", floor_module)), Server("twin")
    try:
        twin.client().function_load((ROOT / "bench/floor.lua").read_text(), replace=True)
        cells = [
            ("limits' RedisStorage", module, f"redis://127.0.0.1:{module.port}"),
            ("redis+throttle (module)", module, f"redis+throttle://127.0.0.1:{module.port}"),
            ("redis+throttle (twin)", twin, f"redis+throttle://127.0.0.1:{twin.port}"),
            ("floor: FLOOR.TOUCH", module, f"floor:redis+throttle://127.0.0.1:{module.port}"),
            # (the twin's fixed window sends plain commands, no FCALL: no floor to replace it)
            ("floor: floor_log (twin)", twin, f"floor:redis+throttle://127.0.0.1:{twin.port}"),
        ]
        print(f"\nlimits strategies, {N} requests (hit + get_window_stats) per cell and round, {ROUNDS} rounds")
        head = ("workload", "strategy", "storage", "RT/req", "Redis us/req", "x limits", "x floor", "req/s", "admitted")
        print("{:<9} {:<23} {:<25} {:>6} {:>12} {:>8} {:>7} {:>7} {:>8}".format(*head))
        for workload in ("users", "hot"):
            for strategy in ("fixed-window", "moving-window", "sliding-window-counter"):
                # Rounds interleave the storages; each cell keeps its least CPU (the machine's
                # other load only ever adds to it) and its best rate.
                best: dict[str, tuple[float, float, float, float]] = {}
                for _ in range(ROUNDS):
                    for name, server, uri in cells:
                        if name == "floor: floor_log (twin)" and strategy == "fixed-window":
                            continue
                        rt, usec, rate, ok = run(server, uri, strategy, workload)
                        old = best.get(name)
                        best[name] = (rt, min(usec, old[1]) if old else usec, max(rate, old[2]) if old else rate, ok)
                base = best[cells[0][0]][1]
                for name, _, _ in cells:
                    if name not in best:
                        continue
                    rt, usec, rate, ok = best[name]
                    # Each of ours beside the floor of the same run on its server (the twin's
                    # fixed window sends plain commands: no floor replaces them).
                    floor = FLOOR_OF.get(name)
                    x_floor = f"{usec / best[floor][1]:.2f}" if floor in best else "-"
                    row = (workload, strategy, name, rt, usec, usec / base, x_floor, rate, ok)
                    print("{:<9} {:<23} {:<25} {:>6.2f} {:>12.2f} {:>8.2f} {:>7} {:>7.0f} {:>8.1%}".format(*row))
    finally:
        module.stop()
        twin.stop()


if __name__ == "__main__":
    main()
