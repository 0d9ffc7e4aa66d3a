"""make bench (bench/python.sh): each limits strategy through limits' own Redis storage and
through redis_throttle.limits (module; Functions twin), one run, one machine.

A "request" is what Flask-Limiter does with headers on: hit(), then get_window_stats(). For each
cell: round trips per request (counted in redis-py), Redis CPU per request (INFO commandstats,
every command's usec, after CONFIG RESETSTAT) and requests per second from one client thread.
Two workloads: 1,000 users at 100 per minute (admitted), and one hot key at 10 per second
(mostly denied)."""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import limits.strategies as strategies
from apps import RoundTrips
from conftest import Server
from limits import RateLimitItemPerMinute, RateLimitItemPerSecond
from limits.storage import storage_from_string

import redis_throttle.limits  # noqa: F401

N = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
ROUNDS = 3


def redis_usec(server: Server) -> float:
    stats = server.client().info("commandstats")
    skip = ("cmdstat_info", "cmdstat_config")
    return sum(float(v["usec"]) for k, v in stats.items() if k.startswith("cmdstat_") and k not in skip)


def run(server: Server, uri: str, strategy: str, workload: str) -> tuple[float, float, float, float]:
    storage = storage_from_string(uri, key_prefix=f"B{time.time_ns()}")
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
    module, twin = Server("module"), Server("twin")
    try:
        cells = [
            ("limits' RedisStorage", module, f"redis://127.0.0.1:{module.port}"),
            ("redis+throttle (module)", module, f"redis+throttle://127.0.0.1:{module.port}"),
            ("redis+throttle (twin)", twin, f"redis+throttle://127.0.0.1:{twin.port}"),
        ]
        print(f"\nlimits strategies, {N} requests (hit + get_window_stats) per cell and round, {ROUNDS} rounds")
        head = ("workload", "strategy", "storage", "RT/req", "Redis us/req", "x limits", "req/s", "admitted")
        print("{:<9} {:<23} {:<24} {:>6} {:>12} {:>8} {:>7} {:>8}".format(*head))
        for workload in ("users", "hot"):
            for strategy in ("fixed-window", "moving-window", "sliding-window-counter"):
                # Rounds interleave the storages; each cell keeps its least CPU (the machine's
                # other load only ever adds to it) and its best rate.
                best: dict[str, tuple[float, float, float, float]] = {}
                for _ in range(ROUNDS):
                    for name, server, uri in cells:
                        rt, usec, rate, ok = run(server, uri, strategy, workload)
                        old = best.get(name)
                        best[name] = (rt, min(usec, old[1]) if old else usec, max(rate, old[2]) if old else rate, ok)
                base = best[cells[0][0]][1]
                for name, _, _ in cells:
                    rt, usec, rate, ok = best[name]
                    row = (workload, strategy, name, rt, usec, usec / base, rate, ok)
                    print("{:<9} {:<23} {:<24} {:>6.2f} {:>12.2f} {:>8.2f} {:>7.0f} {:>8.1%}".format(*row))
    finally:
        module.stop()
        twin.stop()


if __name__ == "__main__":
    main()
