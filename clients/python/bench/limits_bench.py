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

import limits.strategies as strategies  # noqa: E402
from apps import RoundTrips  # noqa: E402
from conftest import Server  # noqa: E402
from limits import RateLimitItemPerMinute, RateLimitItemPerSecond  # noqa: E402
from limits.storage import storage_from_string  # noqa: E402

import redis_throttle.limits  # noqa: E402, F401

N = int(sys.argv[1]) if len(sys.argv) > 1 else 4000


def redis_usec(server: Server) -> float:
    stats = server.client().info("commandstats")
    return sum(float(v["usec"]) for k, v in stats.items() if k.startswith("cmdstat_") and k not in ("cmdstat_info", "cmdstat_config"))


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
        print(f"\nlimits strategies, {N} requests (hit + get_window_stats) per cell, one client thread")
        print(f"{'workload':<9} {'strategy':<23} {'storage':<24} {'RT/req':>6} {'Redis µs/req':>12} {'× limits':>8} {'req/s':>7} {'admitted':>8}")
        for workload in ("users", "hot"):
            for strategy in ("fixed-window", "moving-window", "sliding-window-counter"):
                base = None
                for name, server, uri in cells:
                    rt, usec, rate, ok = run(server, uri, strategy, workload)
                    base = usec if base is None else base
                    print(f"{workload:<9} {strategy:<23} {name:<24} {rt:>6.2f} {usec:>12.2f} {usec / base:>8.2f} {rate:>7.0f} {ok:>8.1%}")
    finally:
        module.stop()
        twin.stop()


if __name__ == "__main__":
    main()
