"""redis_throttle.Throttle and redis_throttle.asyncio.Throttle against real servers: the
module, only the twin, and a 3-primary cluster."""

from __future__ import annotations

import asyncio
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis
import redis.asyncio
from conftest import aclose, empty_slot_prefix, move_slot
from redis.crc import key_slot

import redis_throttle.asyncio
from redis_throttle import (
    Backend,
    BucketLimit,
    CounterLimit,
    Throttle,
    ThrottleError,
    ThrottleLimit,
    WindowLimit,
)


def async_client(request: pytest.FixtureRequest, backend: str):  # type: ignore[no-untyped-def]
    if backend == "cluster":
        # A thousand tasks on one key's node: a pool as large as limits' own cluster storage's
        # (python.md, "Timeouts and pools"), where redis-py 8's default, 100 a node, refuses
        # the 101st connection (MaxConnectionsError) while Redis is slow to answer.
        node = request.getfixturevalue("cluster").nodes[0]
        return redis.asyncio.RedisCluster(host="127.0.0.1", port=node.port, max_connections=1000)
    # A thousand tasks at once: a blocking pool (python.md, "Timeouts and pools"), as redis-py 8's
    # default pool refuses the 101st connection (MaxConnectionsError) while Redis is slow to answer.
    port = request.getfixturevalue(f"{backend}_server").port
    pool = redis.asyncio.BlockingConnectionPool(port=port, max_connections=50, timeout=30)
    return redis.asyncio.Redis(connection_pool=pool)


def test_detects_the_module_or_the_twin_once(sync_client, backend: str) -> None:
    t = Throttle(sync_client)
    assert t.backend is (Backend.TWIN if backend == "twin" else Backend.MODULE)


@pytest.mark.alone
def test_a_server_with_neither_is_refused_with_a_clear_error(twin_server) -> None:  # type: ignore[no-untyped-def]
    c = twin_server.client(db=0)
    c.function_delete("throttle")
    try:
        with pytest.raises(ThrottleError, match="neither the redis-throttle module"):
            Throttle(c).window("k", 1, 1)
    finally:
        twin_server.start_functions()


@pytest.mark.parametrize("method", ["window", "counter", "throttle", "bucket"])
def test_each_limiter_admits_its_limit_then_denies_with_times_in_seconds(sync_client, key: str, method: str) -> None:
    t = Throttle(sync_client)
    calls = {
        "window": lambda: t.window(key, 3, 2),
        "counter": lambda: t.counter(key, 3, 2),
        "throttle": lambda: t.throttle(key, 2, 3, 2),
        "bucket": lambda: t.bucket(key, 3, 3, 2),
    }[method]
    got = [calls() for _ in range(4)]
    assert [d.limited for d in got] == [False, False, False, True]
    assert [d.remaining for d in got] == [2, 1, 0, 0]
    assert all(d.limit == 3 for d in got)
    assert got[0].retry_after == -1.0
    # The denial says when to come back: within the period, at millisecond precision.
    assert 0 < got[3].retry_after <= 2.0
    assert round(got[3].retry_after * 1000) == got[3].retry_after * 1000
    assert 0 < got[3].reset_after <= 2.0


def test_the_reply_is_the_servers_own(sync_client, key: str, backend: str) -> None:
    t = Throttle(sync_client)
    d = t.window(key, 10, 60, quantity=4)
    raw = sync_client.execute_command(
        "CL.WINDOW" if backend != "twin" else "FCALL",
        *([key, 10, 60000, 0, "MS"] if backend != "twin" else ["cl_window", 1, key, 10, 60000, 0, "MS"]),
    )
    assert (d.limit, d.remaining) == (raw[1], raw[2]) == (10, 6)
    assert abs(d.reset_after * 1000 - raw[4]) <= 50


def test_quantities_peek_and_refund(sync_client, key: str) -> None:
    t = Throttle(sync_client)
    assert t.counter(key, 5, 10, quantity=3).remaining == 2
    assert t.counter(key, 5, 10, quantity=0).remaining == 2  # a peek takes nothing
    assert t.counter(key, 5, 10, quantity=-2).remaining == 4  # a refund gives back
    assert t.counter(key, 5, 10, quantity=6).limited  # more than the limit: never
    assert t.counter(key, 5, 10, quantity=6).retry_after == -1.0


def test_all_decides_every_limiter_at_once_and_names_the_binding_one(sync_client, key: str) -> None:
    t = Throttle(sync_client)
    calls = [(key + ":a", WindowLimit(10, 60)), (key + ":b", CounterLimit(2, 60)), (key + ":c", BucketLimit(5, 1, 1))]
    first = t.all(calls)
    assert not first.limited and first.binding == 1 and first.remaining == 1
    assert [d.remaining for d in first.details] == [9, 1, 4]
    t.all(calls)
    denied = t.all(calls)
    assert denied.limited and denied.binding == 1
    # All or nothing: the denied call charged none of the others.
    assert t.window(key + ":a", 10, 60, quantity=0).remaining == 8


def test_bad_arguments_get_the_servers_error_and_write_nothing(sync_client, key: str, backend: str) -> None:
    t = Throttle(sync_client)
    with pytest.raises(ThrottleError) as err:
        t.window(key, 0, 60)
    words = (
        ["CL.WINDOW", key, 0, 60000, 1, "MS"]
        if backend != "twin"
        else ["FCALL", "cl_window", 1, key, 0, 60000, 1, "MS"]
    )
    with pytest.raises(redis.ResponseError) as raw:
        sync_client.execute_command(*words)
    # The text the server sent (redis-py keeps the code apart, in `status_code` from redis-py 7.1
    # on, and strips "ERR " before): ours is the same, code included.
    assert str(err.value) == f"{getattr(raw.value, 'status_code', 'ERR')} {raw.value}"
    assert str(err.value).startswith("ERR limit must be an integer from 1 to")
    with pytest.raises(ThrottleError, match="^ERR syntax error|^ERR"):
        t.throttle(key, -1, 10, 60)
    assert sync_client.exists(key) == 0


def test_a_key_holding_another_applications_data_is_refused_untouched(sync_client, key: str) -> None:
    t = Throttle(sync_client)
    sync_client.rpush(key, "theirs", "data")
    sync_client.expire(key, 1000)
    sync_client.set(key + ":s", "not a limiter state at all", ex=1000)
    with pytest.raises(ThrottleError, match="^WRONGTYPE"):
        t.window(key, 5, 10)
    with pytest.raises(ThrottleError, match="^ERR"):
        t.window(key + ":s", 5, 10)
    assert sync_client.lrange(key, 0, -1) == [b"theirs", b"data"]
    assert 990 < sync_client.ttl(key) <= 1000
    assert sync_client.get(key + ":s") == b"not a limiter state at all"


def test_module_only_commands_work_on_the_module_and_are_refused_on_the_twin(
    sync_client, key: str, backend: str
) -> None:
    t = Throttle(sync_client)
    if backend == "twin":
        for call in (lambda: t.acquire(key, 2, 10, "job"), lambda: t.release(key, "job"), lambda: t.pace(key, 10, 1)):
            with pytest.raises(ThrottleError, match="module's only"):
                call()
        return
    assert not t.acquire(key, 1, 10, "job-1").limited
    assert t.acquire(key, 1, 10, "job-2").limited
    assert t.release(key, "job-1") is True
    assert t.release(key, "job-1") is False
    assert not t.acquire(key, 1, 10, "job-2").limited
    first, second = t.pace(key + ":p", 10, 1), t.pace(key + ":p", 10, 1)
    # One unit every 100 ms: the second call waits for the next slot (less the time between them).
    assert first.wait == 0.0 and 0.0 < second.wait <= 0.1 and second.queued == 2


@pytest.mark.alone
def test_keys_of_one_decision_in_different_slots_are_refused_before_sending(request, backend: str) -> None:  # type: ignore[no-untyped-def]
    a, b = "user:1", "user:2"
    assert key_slot(a.encode()) != key_slot(b.encode())
    servers = (
        request.getfixturevalue("cluster").nodes
        if backend == "cluster"
        else [request.getfixturevalue(f"{backend}_server")]
    )
    client = request.getfixturevalue("cluster").client() if backend == "cluster" else servers[0].client()
    t = Throttle(client)
    t.window("warm-up", 1, 1)  # detection done
    sent = sum(n.command_calls("cl.all") + n.command_calls("fcall") for n in servers)
    with pytest.raises(ThrottleError, match="^CROSSSLOT"):
        t.all([(a, WindowLimit(5, 10)), (b, WindowLimit(5, 10))])
    assert sum(n.command_calls("cl.all") + n.command_calls("fcall") for n in servers) == sent


def test_the_server_is_asked_what_it_runs_once_then_each_call_is_one_round_trip(sync_client, key: str) -> None:
    from apps import RoundTrips

    t = Throttle(sync_client)
    with RoundTrips().counting() as trips:
        t.window(key, 5, 10)
        first = trips.count
        for _ in range(10):
            t.window(key, 5, 10)
    # (The first call also connects and probes the server.) Every later call: one round trip.
    assert trips.count - first == 10


@pytest.mark.alone
def test_cluster_calls_go_to_their_keys_slot_cl_all_by_its_first_key(cluster) -> None:  # type: ignore[no-untyped-def]
    t = Throttle(cluster.client())
    before = sum(n.command_calls("cl.all") for n in cluster.nodes)
    tags = [uuid.uuid4().hex[:8] for _ in range(30)]
    for tag in tags:
        d = t.all([(f"{{{tag}}}:m", WindowLimit(3, 10)), (f"{{{tag}}}:h", CounterLimit(5, 10))])
        assert not d.limited
        # Each key now lives on the node that owns its slot (no MOVED was needed).
        owner = cluster.client().get_node_from_key(f"{{{tag}}}:m")
        port = owner.port
        node = next(n for n in cluster.nodes if n.port == port)
        assert node.client().exists(f"{{{tag}}}:m", f"{{{tag}}}:h") == 2
    assert sum(n.command_calls("cl.all") for n in cluster.nodes) - before == len(tags)


def test_a_thousand_concurrent_threads_get_exactly_the_limit(sync_client, key: str) -> None:
    t = Throttle(sync_client)
    barrier = threading.Barrier(50)

    def hit(i: int) -> bool:
        if i < 50:
            barrier.wait()
        return not t.window(key, 5, 60).limited

    with ThreadPoolExecutor(50) as pool:
        admitted = sum(pool.map(hit, range(1000)))
    assert admitted == 5


def test_the_async_client_admits_exactly_the_limit_of_a_thousand_tasks(request, backend: str, key: str) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        client = async_client(request, backend)
        t = redis_throttle.asyncio.Throttle(client)
        results = await asyncio.gather(*(t.window(key, 5, 60) for _ in range(1000)))
        assert sum(not d.limited for d in results) == 5
        assert (await t.backend()) is (Backend.TWIN if backend == "twin" else Backend.MODULE)
        d = await t.all([(key + ":x", ThrottleLimit(0, 1, 60)), (key + ":y", CounterLimit(1, 60))])
        assert not d.limited and len(d.details) == 2
        with pytest.raises(ThrottleError, match="^ERR"):
            await t.counter(key + ":z", 0, 10)
        await aclose(client)

    asyncio.run(main())


def test_a_cancelled_async_call_leaves_the_client_usable(module_server, key: str) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        client = redis.asyncio.Redis(port=module_server.port)
        t = redis_throttle.asyncio.Throttle(client)
        task = asyncio.ensure_future(t.window(key, 5, 60))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        d = await t.window(key, 5, 60)
        # The cancelled call either reached the server or did not: never twice, never lost mid-way.
        assert d.remaining in (3, 4)
        await aclose(client)

    asyncio.run(main())


@pytest.mark.alone
def test_a_slot_that_moved_is_followed_without_running_the_call_twice(cluster) -> None:  # type: ignore[no-untyped-def]
    t = Throttle(cluster.client())
    key = f"{{{empty_slot_prefix(cluster, 'm', lambda p: '{' + p + '}:k')}}}:k"
    assert not t.window(key, 5, 60).limited  # the client now holds the cluster's map
    t.client.delete(key)
    slot = key_slot(key.encode())
    owner, target = move_slot(cluster, t, key)
    d = t.window(key, 5, 60)  # sent to the old owner: MOVED, then to the new one
    assert not d.limited and d.remaining == 4
    assert target.client().exists(key) == 1
    assert owner.client().execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == 0


@pytest.mark.alone
def test_the_twins_fcalls_go_to_their_first_keys_slot_in_a_cluster(cluster) -> None:  # type: ignore[no-untyped-def]
    from conftest import ROOT

    code = (ROOT / "functions/throttle.lua").read_text()
    for n in cluster.nodes:
        n.client().function_load(code, replace=True)
    t = Throttle(cluster.client(), backend=Backend.TWIN)  # FCALL, though the module is there too
    before = sum(n.command_calls("fcall") for n in cluster.nodes)
    tags = [uuid.uuid4().hex[:8] for _ in range(20)]
    for tag in tags:
        # FCALL's first argument after the function is numkeys: routed by the first key instead.
        assert not t.all([(f"{{{tag}}}:a", WindowLimit(3, 10)), (f"{{{tag}}}:b", CounterLimit(5, 10))]).limited
        assert t.window(f"{{{tag}}}:c", 3, 10).remaining == 2
        owner = t.client.get_node_from_key(f"{{{tag}}}:a").port
        node = next(n for n in cluster.nodes if n.port == owner)
        assert node.client().exists(f"{{{tag}}}:a", f"{{{tag}}}:b", f"{{{tag}}}:c") == 3
    assert sum(n.command_calls("fcall") for n in cluster.nodes) - before == 2 * len(tags)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda t, k: t.window(k, 5, float("nan")), "^ERR window must be a finite number of seconds, got nan$"),
        (lambda t, k: t.window(k, 5, float("inf")), "^ERR window must be a finite number of seconds, got inf$"),
        (lambda t, k: t.window(k, 5, True), r"^ERR window must be seconds \(int, float or timedelta\), got True$"),
        (lambda t, k: t.window(k, 5, 10**10), r"^ERR window must be at most 1000000000 seconds \(1000000000000 millis"),
        (lambda t, k: t.counter(k, 5, 1e300), r"^ERR window must be at most 1000000000 seconds"),
        (lambda t, k: t.throttle(k, 1, 5, 0.0005), r"^ERR period 0.0005 s is not a whole number of milliseconds$"),
        (lambda t, k: t.window(k, True, 60), "^ERR limit must be an integer, got True$"),
        (lambda t, k: t.counter(k, 2.5, 60), "^ERR limit must be an integer, got 2.5$"),
        (lambda t, k: t.bucket(k, "5", 1, 60), "^ERR capacity must be an integer, got '5'$"),
        (lambda t, k: t.window(k, 5, 60, quantity=False), "^ERR quantity must be an integer, got False$"),
        (lambda t, k: t.all([(k, WindowLimit(5, float("nan")))]), "^ERR window must be a finite number"),
    ],
)
def test_durations_and_integers_no_command_takes_are_refused_alike_before_sending(
    sync_client, key: str, call, message: str
) -> None:  # type: ignore[no-untyped-def]
    # One error (ThrottleError, the same text) on the module, the twin and a cluster, where
    # Python's own (ValueError, OverflowError) or redis-py's (DataError) came out before.
    t = Throttle(sync_client)
    with pytest.raises(ThrottleError, match=message):
        call(t, key)
    assert sync_client.exists(key) == 0


def test_a_lost_twin_library_is_named_and_found_again_when_loaded(own_twin, key: str) -> None:  # type: ignore[no-untyped-def]
    from redis_throttle._core import LOAD_TWIN

    t = Throttle(own_twin.client())
    assert not t.window(key, 5, 60).limited
    own_twin.client().function_flush()
    with pytest.raises(ThrottleError, match="^ERR the Functions library `throttle` is missing") as err:
        t.window(key, 5, 60)
    assert LOAD_TWIN in str(err.value)
    with pytest.raises(ThrottleError, match="neither the redis-throttle module") as err:
        t.window(key, 5, 60)  # (detected again: neither)
    assert LOAD_TWIN in str(err.value)
    own_twin.start_functions()
    assert t.window(key, 5, 60).remaining == 3 and t.backend is Backend.TWIN


def test_a_lost_module_is_named(request, key: str) -> None:  # type: ignore[no-untyped-def]
    from conftest import Server

    server = Server("module", args=("--enable-module-command", "yes"))
    request.addfinalizer(server.stop)
    t = Throttle(server.client())
    assert not t.window(key, 5, 60).limited
    server.client().execute_command("MODULE", "UNLOAD", "throttle")
    with pytest.raises(ThrottleError, match="^ERR the redis-throttle module is not loaded"):
        t.window(key, 5, 60)
    server.start_functions()  # (the twin instead, after a failover to managed Redis, say)
    assert t.window(key, 5, 60).remaining == 3 and t.backend is Backend.TWIN


@pytest.mark.alone
def test_a_cluster_node_without_the_twin_is_named(cluster) -> None:  # type: ignore[no-untyped-def]
    from conftest import ROOT

    code = (ROOT / "functions/throttle.lua").read_text()
    for n in cluster.nodes:
        n.client().function_load(code, replace=True)
    t = Throttle(cluster.client(), backend=Backend.TWIN)
    key = f"{{l{uuid.uuid4().hex[:8]}}}:k"
    assert not t.window(key, 5, 60).limited
    owner = next(n for n in cluster.nodes if n.port == t.client.get_node_from_key(key).port)
    owner.client().function_delete("throttle")  # (a failover to a replica that never had it)
    try:
        with pytest.raises(ThrottleError, match="^ERR the Functions library `throttle` is missing"):
            t.window(key, 5, 60)
    finally:
        owner.client().function_load(code, replace=True)
