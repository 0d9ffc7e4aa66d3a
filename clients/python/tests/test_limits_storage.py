"""`limits`' storage contract for redis_throttle.limits, sync and `limits.aio`, on the module,
the twin and a cluster: the behaviours limits' own suite asserts of a storage, for the three
strategies (the sliding window counter where its semantics are the same; see the book's
Python page for where a bucketed exact window differs from limits' weighted counter)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, Callable

import limits.aio.strategies as aio_strategies
import limits.strategies as strategies
import pytest
import redis
from conftest import aclose, empty_slot_prefix, move_slot
from limits import RateLimitItemPerHour, RateLimitItemPerMinute, RateLimitItemPerSecond
from limits.errors import ConfigurationError, StorageError
from limits.storage import storage_from_string
from redis.crc import key_slot
from servers import Server

import redis_throttle.limits as rtl
from redis_throttle import ThrottleError
from redis_throttle._core import LOAD_TWIN


class Sync:
    """Runs a coroutine-returning limiter's methods to completion (one loop per test)."""

    def __init__(self, target: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.target, self.loop = target, loop

    def __getattr__(self, name: str) -> Callable[..., Any]:
        attr = getattr(self.target, name)

        def call(*a: Any, **kw: Any) -> Any:
            return self.loop.run_until_complete(attr(*a, **kw))

        return call


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make(storage_uri: str, mode: str):  # type: ignore[no-untyped-def]
    """make("fixed-window" | "moving-window" | "sliding-window-counter") -> a limiter; every
    limiter of a test shares a fresh key prefix."""
    prefix = f"T{uuid.uuid4().hex[:10]}"
    loop = asyncio.new_event_loop()
    made: list[Any] = []

    def build(strategy: str) -> Any:
        if mode == "sync":
            storage = storage_from_string(storage_uri, key_prefix=prefix)
            made.append(storage)
            return strategies.STRATEGIES[strategy](storage)
        storage = loop.run_until_complete(_async_storage("async+" + storage_uri, prefix))
        made.append(storage)
        return Sync(aio_strategies.STRATEGIES[strategy](storage), loop)

    yield build
    for storage in made:
        if mode == "async":
            loop.run_until_complete(aclose(storage.storage))
    loop.close()


async def _async_storage(uri: str, prefix: str) -> Any:
    return storage_from_string(uri, key_prefix=prefix)


def test_every_scheme_resolves_to_this_storage(storage_uri: str, backend: str, request) -> None:  # type: ignore[no-untyped-def]
    assert type(storage_from_string(storage_uri)) is rtl.RedisThrottleStorage
    assert type(storage_from_string("async+" + storage_uri)) is rtl.AsyncRedisThrottleStorage
    # rediss+: over TLS (a cluster's, the TLS-only cluster; a client of a single server
    # connects on its first call).
    tls_uri = storage_uri.replace("redis+", "rediss+")
    if backend == "cluster":
        tls_uri = f"rediss+throttle+cluster://{request.getfixturevalue('tls_cluster').uri_hosts}"
    assert type(storage_from_string(tls_uri, ssl_cert_reqs=None)) is rtl.RedisThrottleStorage


# Fixed window
def test_fixed_window_admits_the_limit_and_reports_the_window(make) -> None:  # type: ignore[no-untyped-def]
    limiter = make("fixed-window")
    limit = RateLimitItemPerSecond(10, 2)
    assert limiter.hit(limit)
    start = time.time()  # (after the first hit: its call may connect and detect the server)
    assert all(limiter.hit(limit) for _ in range(9))
    assert not limiter.hit(limit)
    stats = limiter.get_window_stats(limit)
    assert stats.remaining == 0
    assert stats.reset_time == pytest.approx(start + 2, abs=0.1)


def test_fixed_window_empty_stats(make) -> None:  # type: ignore[no-untyped-def]
    limiter = make("fixed-window")
    limit = RateLimitItemPerSecond(10, 2)
    stats = limiter.get_window_stats(limit)
    assert stats.remaining == 10
    assert stats.reset_time == pytest.approx(time.time(), abs=0.1)


def test_fixed_window_costs_and_test(make) -> None:  # type: ignore[no-untyped-def]
    limiter = make("fixed-window")
    limit = RateLimitItemPerMinute(10, 2)
    assert not limiter.hit(limit, "k1", cost=11)
    assert limiter.hit(limit, "k2", cost=5)
    assert limiter.get_window_stats(limit, "k2").remaining == 5
    assert not limiter.test(limit, "k2", cost=6)
    assert not limiter.hit(limit, "k2", cost=6)
    hourly = RateLimitItemPerHour(2, 1)
    assert limiter.hit(hourly)
    assert limiter.test(hourly)
    assert limiter.hit(hourly)
    assert not limiter.test(hourly)
    assert not limiter.hit(hourly)


def test_fixed_window_opens_again_when_it_ends_and_clear_resets(make) -> None:  # type: ignore[no-untyped-def]
    limiter = make("fixed-window")
    limit = RateLimitItemPerSecond(2, 1)
    assert limiter.hit(limit) and limiter.hit(limit) and not limiter.hit(limit)
    time.sleep(1.05)
    assert limiter.hit(limit)
    limiter.clear(limit)
    assert limiter.get_window_stats(limit).remaining == 2


# Moving window
def test_moving_window_empty_stats(make) -> None:  # type: ignore[no-untyped-def]
    limiter = make("moving-window")
    limit = RateLimitItemPerSecond(10, 2)
    stats = limiter.get_window_stats(limit)
    assert stats.remaining == 10
    assert stats.reset_time == pytest.approx(time.time() + 2, abs=0.1)


def test_moving_window_stats_reset_when_the_oldest_hit_leaves(make) -> None:  # type: ignore[no-untyped-def]
    limiter = make("moving-window")
    limit = RateLimitItemPerMinute(2)
    assert limiter.hit(limit, "key")
    first = time.time()
    time.sleep(0.3)
    assert limiter.hit(limit, "key")
    time.sleep(0.3)
    assert not limiter.hit(limit, "key")
    for _ in range(2):  # from the denied hit's reply, then from the server again
        stats = limiter.get_window_stats(limit, "key")
        assert stats.remaining == 0
        assert stats.reset_time == pytest.approx(first + 60, abs=0.1)
    # Not full: the oldest entry still sets the reset, read from the server or after a hit.
    limit3 = RateLimitItemPerMinute(3)
    assert limiter.hit(limit3, "k3")
    t0 = time.time()
    time.sleep(0.2)
    assert limiter.hit(limit3, "k3")
    after_hit = limiter.get_window_stats(limit3, "k3")
    fresh = limiter.get_window_stats(limit3, "k3")
    assert after_hit.remaining == fresh.remaining == 1
    assert after_hit.reset_time == pytest.approx(t0 + 60, abs=0.1)
    assert fresh.reset_time == pytest.approx(t0 + 60, abs=0.1)


def test_moving_window_slides(make) -> None:  # type: ignore[no-untyped-def]
    limiter = make("moving-window")
    limit = RateLimitItemPerSecond(10, 1)
    assert limiter.hit(limit)
    assert all(limiter.hit(limit) for _ in range(4))
    t0 = time.time()  # (after the five: on a loaded machine they can take a while)
    time.sleep(0.6)
    assert all(limiter.hit(limit) for _ in range(5))
    assert not limiter.hit(limit)
    time.sleep(max(0.0, t0 + 1.05 - time.time()))
    # The first five left the window; the last five are still in it.
    assert all(limiter.hit(limit) for _ in range(5))
    assert not limiter.hit(limit)


def test_moving_window_costs_and_test(make) -> None:  # type: ignore[no-untyped-def]
    limiter = make("moving-window")
    limit = RateLimitItemPerSecond(10, 2)
    assert not limiter.hit(limit, "k1", cost=11)
    assert limiter.hit(limit, "k2", cost=5)
    assert all(limiter.hit(limit, "k2") for _ in range(4))
    assert not limiter.test(limit, "k2", cost=2)
    assert not limiter.hit(limit, "k2", cost=2)
    assert limiter.hit(limit, "k2")
    assert limiter.get_window_stats(limit, "k2").remaining == 0
    five = RateLimitItemPerMinute(5)
    limiter.hit(five, cost=5)
    assert not limiter.hit(five, cost=2)
    limiter.clear(five)
    assert limiter.hit(five)
    hourly = RateLimitItemPerHour(2, 1)
    assert limiter.hit(hourly) and limiter.test(hourly) and limiter.hit(hourly)
    assert not limiter.test(hourly) and not limiter.hit(hourly)


def test_moving_window_huge_limit(make) -> None:  # type: ignore[no-untyped-def]
    limiter = make("moving-window")
    million = RateLimitItemPerSecond(1_000_000, 2)
    assert limiter.hit(million, cost=999_999)
    assert limiter.get_window_stats(million).remaining == 1
    assert limiter.hit(million)
    assert not limiter.hit(million)
    limiter.clear(million)
    assert limiter.get_window_stats(million).remaining == 1_000_000


# Sliding window counter
def test_sliding_window_admits_the_limit_and_clear_resets(make) -> None:  # type: ignore[no-untyped-def]
    limiter = make("sliding-window-counter")
    limit = RateLimitItemPerSecond(10, 2)
    assert all(limiter.hit(limit) for _ in range(10))
    assert not limiter.hit(limit)
    stats = limiter.get_window_stats(limit)
    assert stats.remaining == 0
    assert time.time() < stats.reset_time <= time.time() + 2.2
    limiter.clear(limit)
    assert limiter.get_window_stats(limit).remaining == 10


def test_sliding_window_empty_stats_costs_and_test(make) -> None:  # type: ignore[no-untyped-def]
    limiter = make("sliding-window-counter")
    limit = RateLimitItemPerSecond(10, 2)
    stats = limiter.get_window_stats(limit)
    assert stats.remaining == 10 and stats.reset_time == pytest.approx(time.time(), abs=0.1)
    per_minute = RateLimitItemPerMinute(10, 2)
    assert not limiter.hit(per_minute, "k1", cost=11)
    assert limiter.hit(per_minute, "k2", cost=5)
    assert limiter.get_window_stats(per_minute, "k2").remaining == 5
    assert not limiter.test(per_minute, "k2", cost=6)
    assert not limiter.hit(per_minute, "k2", cost=6)
    hourly = RateLimitItemPerHour(2, 1)
    assert limiter.hit(hourly) and limiter.test(hourly) and limiter.hit(hourly)
    assert not limiter.test(hourly) and not limiter.hit(hourly)


def test_sliding_window_empties_after_the_window(make) -> None:  # type: ignore[no-untyped-def]
    limiter = make("sliding-window-counter")
    limit = RateLimitItemPerSecond(10, 1)
    assert limiter.hit(limit, cost=10)
    assert not limiter.hit(limit)
    # Units leave at the end of their bucket (a tenth of the window) after the window.
    time.sleep(1.25)
    stats = limiter.get_window_stats(limit)
    assert stats.remaining == 10
    assert stats.reset_time == pytest.approx(time.time(), abs=0.1)


# The storage itself
def test_check_reset_and_clear_touch_only_this_storages_keys(storage_uri: str, sync_client, backend: str) -> None:  # type: ignore[no-untyped-def]
    prefix = f"T{uuid.uuid4().hex[:10]}"
    storage = storage_from_string(storage_uri, key_prefix=prefix)
    assert storage.check()
    limiter = strategies.FixedWindowRateLimiter(storage)
    for i in range(5):
        limiter.hit(RateLimitItemPerMinute(10), f"user{i}")
    others = f"{{{prefix}x}}:someone-else"
    sync_client.set(others, "1")
    assert storage.reset() == 5
    assert sync_client.get(others) == b"1"
    assert limiter.get_window_stats(RateLimitItemPerMinute(10), "user0").remaining == 10


def test_a_key_holding_another_applications_data_is_refused_untouched(storage_uri: str, sync_client) -> None:  # type: ignore[no-untyped-def]
    prefix = f"T{uuid.uuid4().hex[:10]}"
    storage = storage_from_string(storage_uri, key_prefix=prefix)
    limit = RateLimitItemPerMinute(5)
    key = f"{prefix}:{limit.key_for('victim')}"
    sync_client.rpush(key, "a", "b")
    for strategy in ("moving-window", "sliding-window-counter", "fixed-window"):
        limiter = strategies.STRATEGIES[strategy](storage)
        with pytest.raises(redis.RedisError, match="WRONGTYPE"):
            limiter.hit(limit, "victim")
    assert sync_client.lrange(key, 0, -1) == [b"a", b"b"]
    assert sync_client.ttl(key) == -1


def test_errors_are_wrapped_when_asked_and_check_reports_a_dead_server() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    storage = storage_from_string(f"redis+throttle://127.0.0.1:{port}", wrap_exceptions=True, socket_timeout=0.2)
    assert not storage.check()
    with pytest.raises(StorageError):
        strategies.FixedWindowRateLimiter(storage).hit(RateLimitItemPerMinute(5))


def test_a_client_that_decodes_replies_works_too(storage_uri: str) -> None:
    storage = storage_from_string(storage_uri, key_prefix=f"T{uuid.uuid4().hex[:10]}", decode_responses=True)
    limit = RateLimitItemPerMinute(3)
    for strategy in ("moving-window", "sliding-window-counter", "fixed-window"):
        limiter = strategies.STRATEGIES[strategy](storage)
        assert limiter.hit(limit, strategy) and limiter.hit(limit, strategy)
        assert limiter.get_window_stats(limit, strategy).remaining == 1
        limiter.hit(limit, strategy)
        assert limiter.get_window_stats(limit, strategy).remaining == 0
        assert not limiter.test(limit, strategy)


# Reads that decide ask the server (limits' test(): get, get_moving_window, get_sliding_window)
@pytest.mark.parametrize("strategy", ["fixed-window", "moving-window", "sliding-window-counter"])
def test_test_sees_another_workers_hit_right_after_this_storages_own(make, strategy: str) -> None:  # type: ignore[no-untyped-def]
    mine, theirs = make(strategy), make(strategy)  # two workers: two storages, one prefix
    limit = RateLimitItemPerMinute(2)
    assert mine.hit(limit, "login")
    assert theirs.hit(limit, "login")
    # Within a millisecond of this storage's own hit: its reply said 1 left, the server says 0.
    assert not mine.test(limit, "login")
    assert mine.get_window_stats(limit, "login").remaining == 0
    assert not mine.hit(limit, "login")


@pytest.mark.parametrize("kind", ["module", "twin"])
def test_no_figure_is_read_from_a_hit_after_a_call_failed(request, kind: str) -> None:  # type: ignore[no-untyped-def]
    server = Server(kind)
    request.addfinalizer(server.stop)
    storage = storage_from_string(f"redis+throttle://127.0.0.1:{server.port}", socket_timeout=0.5)
    limiters = [strategies.STRATEGIES[s](storage) for s in ("fixed-window", "moving-window", "sliding-window-counter")]
    for i, limiter in enumerate(limiters):
        assert limiter.hit(RateLimitItemPerMinute(5), f"u{i}")  # its reply is kept for the headers
    server.kill()
    for i, limiter in enumerate(limiters):
        with pytest.raises(redis.RedisError):
            limiter.hit(RateLimitItemPerMinute(5), f"u{i}")
        # The hit failed: no figure of the hit before it answers.
        with pytest.raises(redis.RedisError):
            limiter.get_window_stats(RateLimitItemPerMinute(5), f"u{i}")


# The sliding window counter's reset: when a hit is next admitted
def test_sliding_window_reset_is_when_the_next_hit_is_admitted(make) -> None:  # type: ignore[no-untyped-def]
    hitting, reading = make("sliding-window-counter"), make("sliding-window-counter")
    limit = RateLimitItemPerSecond(3, 2)  # buckets of 200 ms
    # A burst in one bucket (its three units leave together), and the first of three units
    # spread over three buckets (the oldest bucket's leaving admits one more, not the newest's).
    before = time.time()
    assert hitting.hit(limit, "burst", cost=3) and hitting.hit(limit, "spread")
    first = time.time()
    assert not hitting.hit(limit, "burst")
    after_hit = hitting.get_window_stats(limit, "burst")  # (from the denied hit's reply)
    burst = reading.get_window_stats(limit, "burst")  # (a read of the server)
    assert after_hit.remaining == burst.remaining == 0 and not reading.test(limit, "burst")
    assert after_hit.reset_time == pytest.approx(burst.reset_time, abs=0.1)
    time.sleep(0.6)
    assert hitting.hit(limit, "spread")
    time.sleep(0.6)
    assert hitting.hit(limit, "spread") and not hitting.hit(limit, "spread")
    spread = reading.get_window_stats(limit, "spread")
    assert spread.remaining == 0 and not reading.test(limit, "spread")
    # A unit leaves two seconds after the end of its bucket: 2 to 2.2 s after it was taken.
    for stats in (burst, spread):
        assert before + 2 <= stats.reset_time <= first + 2.25
    time.sleep(max(0.0, min(burst.reset_time, spread.reset_time) - 0.25 - time.time()))
    assert not reading.hit(limit, "burst") and not reading.hit(limit, "spread"), "admitted before the reset"
    time.sleep(max(0.0, max(burst.reset_time, spread.reset_time) + 0.05 - time.time()))
    # The burst's three units left; the spread's oldest left (its next leaves 0.6 s later).
    assert [reading.hit(limit, "burst") for _ in range(4)] == [True] * 3 + [False]
    assert [reading.hit(limit, "spread") for _ in range(2)] == [True, False]


# "0/minute" denies every hit, as limits' own storages do
def test_a_limit_of_zero_denies_every_hit(make, sync_client) -> None:  # type: ignore[no-untyped-def]
    zero = RateLimitItemPerMinute(0)
    for strategy in ("fixed-window", "moving-window", "sliding-window-counter"):
        limiter = make(strategy)
        assert [limiter.hit(zero, strategy) for _ in range(3)] == [False] * 3
        assert not limiter.test(zero, strategy)
        assert limiter.get_window_stats(zero, strategy).remaining == 0


# One range and one error for periods and amounts, on the module and the twin alike
def test_a_period_no_command_takes_is_refused_the_same_everywhere(make) -> None:  # type: ignore[no-untyped-def]
    from limits import RateLimitItemPerYear

    forty_years = RateLimitItemPerYear(5, 40)  # 1.26e9 s: beyond 10^9 s
    for strategy in ("fixed-window", "moving-window", "sliding-window-counter"):
        with pytest.raises(ThrottleError) as err:
            make(strategy).hit(forty_years, strategy)
        assert str(err.value) == "ERR window must be an integer from 1 to 1000000000000 (milliseconds)"
    huge = RateLimitItemPerMinute(2**53)  # beyond the integers both backends count exactly
    for strategy in ("moving-window", "sliding-window-counter"):
        with pytest.raises(ThrottleError, match="^ERR limit must be at most 9007199254740991"):
            make(strategy).hit(huge, strategy)


# WRONGTYPE, and a lost twin, as the package's own errors
def test_a_window_key_is_wrongtype_to_the_fixed_window_on_every_backend(make) -> None:  # type: ignore[no-untyped-def]
    limit = RateLimitItemPerMinute(5)
    for written_by in ("moving-window", "sliding-window-counter"):
        assert make(written_by).hit(limit, written_by)  # (limits' key is the same for every strategy)
        with pytest.raises(ThrottleError, match="^WRONGTYPE Operation against a key holding the wrong kind of value$"):
            make("fixed-window").hit(limit, written_by)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_lost_twin_library_is_named_and_no_stale_figure_is_read(own_twin, mode: str) -> None:  # type: ignore[no-untyped-def]
    uri = f"redis+throttle://127.0.0.1:{own_twin.port}"
    loop = asyncio.new_event_loop()
    if mode == "sync":
        limiter = strategies.MovingWindowRateLimiter(storage_from_string(uri))
    else:
        storage = loop.run_until_complete(_async_storage("async+" + uri, "T"))
        limiter = Sync(aio_strategies.MovingWindowRateLimiter(storage), loop)
    limit = RateLimitItemPerMinute(5)
    assert limiter.hit(limit, "u")
    own_twin.client().function_flush()
    for call in (lambda: limiter.hit(limit, "u"), lambda: limiter.get_window_stats(limit, "u")):
        with pytest.raises(ThrottleError) as err:
            call()
        # (the hit finds the library gone; the read after it detects the server again: neither)
        text = str(err.value)
        assert "library `throttle` is missing" in text or "neither the redis-throttle module" in text
        assert LOAD_TWIN in text
    own_twin.start_functions()
    assert limiter.hit(limit, "u") and limiter.get_window_stats(limit, "u").remaining == 3
    loop.close()


# rediss+throttle+cluster:// speaks TLS
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_rediss_cluster_uri_speaks_tls(tls_cluster, cluster, mode: str) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.new_event_loop()

    def limiter(uri: str, **options: Any) -> Any:
        prefix = f"T{uuid.uuid4().hex[:10]}"
        if mode == "sync":
            return strategies.MovingWindowRateLimiter(storage_from_string(uri, key_prefix=prefix, **options))
        storage = loop.run_until_complete(_async_storage_with("async+" + uri, prefix, **options))
        return Sync(aio_strategies.MovingWindowRateLimiter(storage), loop)

    ca = str(tls_cluster.tls.ca)
    over_tls = limiter(f"rediss+throttle+cluster://{tls_cluster.uri_hosts}", ssl_ca_certs=ca)
    limit = RateLimitItemPerMinute(3)
    assert [over_tls.hit(limit, "u") for _ in range(4)] == [True, True, True, False]
    assert over_tls.get_window_stats(limit, "u").remaining == 0
    # Plain text to the TLS-only cluster, and TLS to a plain one, fail: nothing goes in clear.
    quick = {"socket_connect_timeout": 0.5, "socket_timeout": 0.5}
    with pytest.raises(Exception):  # noqa: B017  (redis-py's error differs by version and mode)
        limiter(f"redis+throttle+cluster://{tls_cluster.uri_hosts}", **quick).hit(limit, "v")
    with pytest.raises(Exception):  # noqa: B017
        plain_cluster = f"rediss+throttle+cluster://{cluster.uri_hosts}"
        limiter(plain_cluster, ssl_ca_certs=ca, **quick).hit(limit, "v")
    loop.close()


def test_a_cluster_uri_with_options_it_cannot_carry_is_refused(cluster) -> None:  # type: ignore[no-untyped-def]
    from limits.errors import ConfigurationError

    for tail in ("/1", "?ssl_cert_reqs=none"):
        with pytest.raises(ConfigurationError, match="storage options"):
            storage_from_string(f"rediss+throttle+cluster://{cluster.uri_hosts}{tail}")


async def _async_storage_with(uri: str, prefix: str, **options: Any) -> Any:
    return storage_from_string(uri, key_prefix=prefix, **options)


@pytest.mark.alone
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_moving_window_hit_and_its_tail_follow_a_slot_that_moved(cluster, mode: str) -> None:  # type: ignore[no-untyped-def]
    """The hit and the read of its log's tail go to the key's node in one pipeline: redirected
    (MOVED), they are sent again through the cluster client, counted once."""
    item = RateLimitItemPerMinute(5)
    prefix = empty_slot_prefix(cluster, "mv", lambda p: f"{p}:{item.key_for('u')}")
    uri = f"redis+throttle+cluster://{cluster.uri_hosts}"
    key = f"{prefix}:{item.key_for('u')}"

    async def main() -> None:
        if mode == "sync":
            limiter = strategies.MovingWindowRateLimiter(storage_from_string(uri, key_prefix=prefix))

            async def hit() -> bool:
                return bool(limiter.hit(item, "u"))

            async def stats() -> Any:
                return limiter.get_window_stats(item, "u")

            storage = limiter.storage
        else:
            storage = storage_from_string("async+" + uri, key_prefix=prefix)
            aio = aio_strategies.MovingWindowRateLimiter(storage)

            async def hit() -> bool:
                return bool(await aio.hit(item, "u"))

            async def stats() -> Any:
                return await aio.get_window_stats(item, "u")

        assert await hit()  # the client now holds the cluster's map
        cluster.client().delete(key)
        owner, target = move_slot(cluster, storage.throttle, key)
        assert await hit()  # (its pipeline to the old owner: MOVED, then to the new one)
        assert (await stats()).remaining == 4  # (one hit in the log: counted once)
        assert target.client().exists(key) == 1
        assert owner.client().execute_command("CLUSTER", "COUNTKEYSINSLOT", key_slot(key.encode())) == 0
        if mode == "async":
            await aclose(storage.storage)

    asyncio.run(main())


# A negative cost on the fixed window: the same on the module, the twin and a cluster
def test_a_negative_cost_gives_fixed_window_hits_back_never_below_zero(make) -> None:  # type: ignore[no-untyped-def]
    limiter = make("fixed-window")
    limit = RateLimitItemPerMinute(3)
    assert all(limiter.hit(limit, "neg") for _ in range(3)) and not limiter.test(limit, "neg")
    assert limiter.hit(limit, "neg", cost=-2)  # (limits admits a negative cost)
    stats = limiter.get_window_stats(limit, "neg")
    assert stats.remaining == 2 and stats.reset_time > time.time() + 50  # the window goes on
    assert limiter.hit(limit, "neg", cost=-5)  # past zero: stops at zero, the window gone
    stats = limiter.get_window_stats(limit, "neg")
    assert stats.remaining == 3 and stats.reset_time <= time.time() + 0.1
    assert [limiter.hit(limit, "neg") for _ in range(4)] == [True, True, True, False]


# get_window_stats asks the server: a test() after it never says otherwise
def test_window_stats_follow_another_storages_clear_and_the_clock(make, mode: str) -> None:  # type: ignore[no-untyped-def]
    for strategy in ("fixed-window", "moving-window", "sliding-window-counter"):
        hitting, clearing = make(strategy), make(strategy)
        limit = RateLimitItemPerSecond(3, 1)
        assert all(hitting.hit(limit, "s") for _ in range(3)) and not hitting.hit(limit, "s")
        clearing.clear(limit, "s")
        stats = hitting.get_window_stats(limit, "s")
        assert stats.remaining == 3 and hitting.test(limit, "s"), strategy
        assert hitting.hit(limit, "s")
        time.sleep(1.3 if strategy == "sliding-window-counter" else 1.05)
        stats = hitting.get_window_stats(limit, "s")
        assert stats.remaining == 3 and stats.reset_time >= time.time() - 0.05, (strategy, stats)
        assert hitting.test(limit, "s", cost=3)


def test_limits_async_implementation_option(module_server) -> None:  # type: ignore[no-untyped-def]
    uri = f"async+redis+throttle://127.0.0.1:{module_server.port}"
    storage = storage_from_string(uri, implementation="redispy", key_prefix=f"impl{uuid.uuid4().hex[:8]}")
    assert type(storage) is rtl.AsyncRedisThrottleStorage
    for other in ("coredis", "valkey"):
        with pytest.raises(ConfigurationError, match=f"implementation='{other}'"):
            storage_from_string(uri, implementation=other)

    async def main() -> None:
        assert await aio_strategies.FixedWindowRateLimiter(storage).hit(RateLimitItemPerMinute(1), "impl")
        await aclose(storage.storage)

    asyncio.run(main())


def test_a_unix_socket_uri(tmp_path_factory: pytest.TempPathFactory) -> None:
    folder = tmp_path_factory.mktemp("sock")
    sock = folder / "r.sock"
    server = Server("module", args=("--unixsocket", str(sock), "--unixsocketperm", "700"))
    try:
        item = RateLimitItemPerMinute(2)
        uri = f"redis+throttle+unix://{sock}"
        limiter = strategies.MovingWindowRateLimiter(storage_from_string(uri, key_prefix="unix"))
        assert [limiter.hit(item, "u") for _ in range(3)] == [True, True, False]
        assert server.client().exists("unix:" + item.key_for("u")) == 1

        async def main() -> None:
            storage = storage_from_string("async+" + uri + "?db=0", key_prefix="unix")
            aio = aio_strategies.MovingWindowRateLimiter(storage)
            assert not await aio.hit(item, "u") and (await aio.get_window_stats(item, "u")).remaining == 0
            await aclose(storage.storage)

        asyncio.run(main())
    finally:
        server.stop()


def test_the_cluster_pool_is_as_large_as_limits_own(cluster) -> None:  # type: ignore[no-untyped-def]
    """limits' redis+cluster:// opens up to 1,000 connections per node: a burst of 500 hits
    at once finds no MaxConnectionsError (redis-py 8's default pool stops at 100)."""
    uri = f"redis+throttle+cluster://{cluster.uri_hosts}"
    sync = storage_from_string(uri)
    assert all(n.redis_connection.connection_pool.max_connections == 1000 for n in sync.storage.get_nodes())
    item = RateLimitItemPerMinute(100)

    async def main() -> None:
        storage = storage_from_string("async+" + uri, key_prefix=f"burst{uuid.uuid4().hex[:8]}")
        aio = aio_strategies.MovingWindowRateLimiter(storage)
        hits = await asyncio.gather(*(aio.hit(item, f"k{i % 7}") for i in range(500)), return_exceptions=True)
        assert [h for h in hits if isinstance(h, BaseException)] == []
        assert sum(hits) == 500  # seven keys of at most 72 hits each
        await aclose(storage.storage)

    asyncio.run(main())
