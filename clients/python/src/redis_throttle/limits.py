"""A storage for `limits` (and so Flask-Limiter and slowapi) on redis-throttle.

Importing this module registers it for ``redis+throttle://``, ``rediss+throttle://`` and
``redis+throttle+cluster://`` (sync) and the same with ``async+`` (``limits.aio``)::

    import redis_throttle.limits  # noqa: F401  (registers the schemes)
    limiter = Limiter(get_remote_address, app=app, storage_uri="redis+throttle://localhost:6379")

Strategies: the moving window is CL.WINDOW (an exact log, on the server's clock), the sliding
window counter CL.WINDOW with PRECISION (window / 10), the fixed window CL.COUNTER, each hit
one command; reads right after a hit in the same thread or task come from that hit's reply.
"""

from __future__ import annotations

from typing import Any

import redis
import redis.asyncio
from limits.aio.storage import MovingWindowSupport as AioMovingWindowSupport
from limits.aio.storage import SlidingWindowCounterSupport as AioSlidingWindowCounterSupport
from limits.aio.storage import Storage as AioStorage
from limits.storage import MovingWindowSupport, SlidingWindowCounterSupport, Storage
from redis.client import NEVER_DECODE
from redis.cluster import ClusterNode
from redis.exceptions import RedisError, ResponseError

from . import _storage as s
from ._core import Backend, Decision, ThrottleError
from ._sync import Throttle, server_error
from .asyncio import Throttle as AsyncThrottle

__all__ = ["PREFIX", "AsyncRedisThrottleStorage", "RedisThrottleStorage"]

PREFIX = "THROTTLE"
"""Keys are ``THROTTLE:<limits' key>`` (not limits' ``LIMITS``: its moving-window lists under
the same names would be another type of key)."""


class RedisThrottleStorage(Storage, MovingWindowSupport, SlidingWindowCounterSupport):
    """`limits` storage on the redis-throttle module (or its Functions twin)."""

    STORAGE_SCHEME = ["redis+throttle", "rediss+throttle", "redis+throttle+cluster", "rediss+throttle+cluster"]
    DEPENDENCIES = ["redis"]

    def __init__(
        self,
        uri: str,
        key_prefix: str = PREFIX,
        wrap_exceptions: bool = False,
        connection_pool: redis.ConnectionPool | None = None,
        **options: Any,
    ) -> None:
        """``options`` go to ``redis.from_url`` (or ``RedisCluster``), as in limits' own
        Redis storage."""
        super().__init__(uri, wrap_exceptions=wrap_exceptions, **options)
        url, cluster, _ = s.client_url(uri)
        self.key_prefix = key_prefix
        self.cluster = cluster
        client: redis.Redis | redis.RedisCluster
        if cluster:
            nodes = [ClusterNode(h, p) for h, p in s.cluster_nodes(url)]  # type: ignore[no-untyped-call]
            client = redis.RedisCluster(startup_nodes=nodes, **{**s.cluster_auth(url), **options})
        elif connection_pool is not None:
            client = redis.Redis(connection_pool=connection_pool, **options)
        else:
            client = redis.from_url(url, **options)
        self.storage = client
        self.throttle = Throttle(client)
        self.seen = s.Memory()

    @property
    def base_exceptions(self) -> type[Exception] | tuple[type[Exception], ...]:
        return (RedisError, ThrottleError)

    def _key(self, key: str) -> str:
        return s.prefixed(self.key_prefix, key)

    def _send(self, key: str, words: list[Any], tail: list[Any] | None = None) -> tuple[Any, Any]:
        """One round trip: the command, and the log's tail when asked (standalone only)."""
        if tail is None or self.cluster:
            return self.throttle.execute(words, key), None
        pipe = self.storage.pipeline(transaction=False)
        pipe.execute_command(*words)
        pipe.execute_command(*tail, **{NEVER_DECODE: True})
        try:
            reply, tail_reply = pipe.execute()
        except ResponseError as err:
            raise server_error(err) from err
        return reply, tail_reply

    # Fixed window (CL.COUNTER, counting every hit as limits does)
    def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        pk = self._key(key)
        if self.throttle.backend is Backend.TWIN and not self.cluster:
            pipe = self.storage.pipeline(transaction=True)
            s.queue_plain_counter(pipe, pk, expiry, amount)
            seen = s.plain_counter_seen(pk, pipe.execute())
            self.seen.keep(seen)
            return seen.count
        d = s.decide(self.throttle.execute(s.counter_words(self.throttle.backend, pk, expiry, amount), pk))
        seen = s.counter_seen(pk, d)
        self.seen.keep(seen)
        return seen.count

    def _counter_peek(self, pk: str, part: str) -> s.Seen:
        seen = self.seen.take(pk, part)
        if seen is None:
            d = s.decide(self.throttle.execute(s.counter_words(self.throttle.backend, pk, s.PEEK_WINDOW, 0), pk))
            seen = s.counter_seen(pk, d)
            seen.unread.discard(part)
            self.seen.keep(seen)
        return seen

    def get(self, key: str) -> int:
        return self._counter_peek(self._key(key), "count").count

    def get_expiry(self, key: str) -> float:
        seen = self._counter_peek(self._key(key), "expiry")
        return max(seen.ends, seen.wall) if seen.count else seen.wall

    def check(self) -> bool:
        try:
            if self.cluster:
                c: Any = self.storage
                c.ping(target_nodes=redis.RedisCluster.PRIMARIES)
                return True
            return bool(self.storage.ping())
        except Exception:
            return False

    def reset(self) -> int | None:
        """Deletes every key under the prefix (SCAN, then DEL in batches)."""
        self.seen.forget_all()
        deleted = 0
        pattern = s.scan_pattern(self.key_prefix)
        if self.cluster:
            c: Any = self.storage
            for node in c.get_primaries():
                conn = c.get_redis_connection(node)
                deleted += _delete_matching(conn, pattern)
        else:
            deleted = _delete_matching(self.storage, pattern)
        return deleted

    def clear(self, key: str) -> None:
        pk = self._key(key)
        self.seen.forget(pk)
        self.storage.delete(pk)

    # Moving window (CL.WINDOW, exact)
    def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        pk = self._key(key)
        words = s.window_words(self.throttle.backend, s.moving_limit(limit, expiry), pk, amount)
        reply, tail = self._send(pk, words, s.tail_words(pk, limit))
        d = s.decide(reply)
        self.seen.keep(s.moving_seen(pk, d, amount, tail, expiry))
        return not d.limited

    def get_moving_window(self, key: str, limit: int, expiry: int) -> tuple[float, int]:
        pk = self._key(key)
        seen = self.seen.take(pk, "moving")
        answer = s.moving_answer(seen, expiry) if seen else None
        if answer is None:
            words = s.window_words(self.throttle.backend, s.moving_limit(limit, expiry), pk, 0)
            reply, tail = self._send(pk, words, s.tail_words(pk, limit))
            d: Decision = s.decide(reply)
            fresh = s.moving_seen(pk, d, 0, tail, expiry)
            if fresh.start is None and self.cluster:
                fresh = self._oldest(pk, d, limit, expiry)
            answer = (fresh.start if fresh.start is not None else fresh.wall + d.reset_after - expiry, fresh.count)
            if fresh.count == 0:
                answer = (fresh.wall, 0)
        return answer

    def _oldest(self, pk: str, d: Decision, limit: int, expiry: int) -> s.Seen:
        tail = s.tail_words(pk, limit)
        got = self.throttle.execute(tail, pk, raw=True) if tail else None
        return s.moving_seen(pk, d, 0, got, expiry)

    # Sliding window counter (CL.WINDOW with PRECISION)
    def acquire_sliding_window_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        pk = self._key(key)
        words = s.window_words(self.throttle.backend, s.sliding_limit(limit, expiry), pk, amount)
        d = s.decide(self.throttle.execute(words, pk))
        self.seen.keep(s.sliding_seen(pk, d, expiry))
        return not d.limited

    def get_sliding_window(self, key: str, expiry: int) -> tuple[int, float, int, float]:
        pk = self._key(key)
        seen = self.seen.take(pk, "sliding")
        if seen is None:
            # limits gives no limit here: a peek with the largest limit reads the count (a
            # peek writes nothing and converts nothing).
            words = s.window_words(self.throttle.backend, s.sliding_limit(s.COUNTER_CEILING, expiry), pk, 0)
            seen = s.sliding_seen(pk, s.decide(self.throttle.execute(words, pk)), expiry)
        return s.sliding_answer(seen, expiry)

    def clear_sliding_window(self, key: str, expiry: int) -> None:
        self.clear(key)


def _delete_matching(conn: Any, pattern: str) -> int:
    """SCAN, then one DEL per key in pipelines (a cluster node refuses a DEL across slots)."""
    keys = list(conn.scan_iter(match=pattern, count=1000))
    deleted = 0
    for i in range(0, len(keys), 1000):
        pipe = conn.pipeline(transaction=False)
        for k in keys[i : i + 1000]:
            pipe.delete(k)
        deleted += sum(int(n) for n in pipe.execute())
    return deleted


class AsyncRedisThrottleStorage(AioStorage, AioMovingWindowSupport, AioSlidingWindowCounterSupport):
    """The ``limits.aio`` storage on redis-throttle (``redis.asyncio``)."""

    STORAGE_SCHEME = [
        "async+redis+throttle",
        "async+rediss+throttle",
        "async+redis+throttle+cluster",
        "async+rediss+throttle+cluster",
    ]
    DEPENDENCIES = ["redis"]

    def __init__(
        self,
        uri: str,
        key_prefix: str = PREFIX,
        wrap_exceptions: bool = False,
        connection_pool: redis.asyncio.ConnectionPool | None = None,
        **options: Any,
    ) -> None:
        super().__init__(uri, wrap_exceptions=wrap_exceptions, **options)
        url, cluster, _ = s.client_url(uri)
        self.key_prefix = key_prefix
        self.cluster = cluster
        client: redis.asyncio.Redis | redis.asyncio.RedisCluster
        if cluster:
            from redis.asyncio.cluster import ClusterNode as AsyncClusterNode

            nodes = [AsyncClusterNode(h, p) for h, p in s.cluster_nodes(url)]
            client = redis.asyncio.RedisCluster(startup_nodes=nodes, **{**s.cluster_auth(url), **options})
        elif connection_pool is not None:
            client = redis.asyncio.Redis(connection_pool=connection_pool, **options)
        else:
            client = redis.asyncio.from_url(url, **options)
        self.storage = client
        self.throttle = AsyncThrottle(client)
        self.seen = s.Memory()

    @property
    def base_exceptions(self) -> type[Exception] | tuple[type[Exception], ...]:
        return (RedisError, ThrottleError)

    def _key(self, key: str) -> str:
        return s.prefixed(self.key_prefix, key)

    async def _send(self, key: str, words: list[Any], tail: list[Any] | None = None) -> tuple[Any, Any]:
        if tail is None or self.cluster:
            return await self.throttle.execute(words, key), None
        pipe = self.storage.pipeline(transaction=False)
        pipe.execute_command(*words)
        pipe.execute_command(*tail, **{NEVER_DECODE: True})
        try:
            reply, tail_reply = await pipe.execute()
        except ResponseError as err:
            raise server_error(err) from err
        return reply, tail_reply

    async def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        pk = self._key(key)
        backend = await self.throttle.backend()
        if backend is Backend.TWIN and not self.cluster:
            pipe = self.storage.pipeline(transaction=True)
            s.queue_plain_counter(pipe, pk, expiry, amount)
            seen = s.plain_counter_seen(pk, await pipe.execute())
            self.seen.keep(seen)
            return seen.count
        d = s.decide(await self.throttle.execute(s.counter_words(backend, pk, expiry, amount), pk))
        seen = s.counter_seen(pk, d)
        self.seen.keep(seen)
        return seen.count

    async def _counter_peek(self, pk: str, part: str) -> s.Seen:
        seen = self.seen.take(pk, part)
        if seen is None:
            backend = await self.throttle.backend()
            d = s.decide(await self.throttle.execute(s.counter_words(backend, pk, s.PEEK_WINDOW, 0), pk))
            seen = s.counter_seen(pk, d)
            seen.unread.discard(part)
            self.seen.keep(seen)
        return seen

    async def get(self, key: str) -> int:
        return (await self._counter_peek(self._key(key), "count")).count

    async def get_expiry(self, key: str) -> float:
        seen = await self._counter_peek(self._key(key), "expiry")
        return max(seen.ends, seen.wall) if seen.count else seen.wall

    async def check(self) -> bool:
        try:
            if self.cluster:
                c: Any = self.storage
                await c.ping(target_nodes=redis.asyncio.RedisCluster.PRIMARIES)
                return True
            return bool(await self.storage.ping())
        except Exception:
            return False

    async def reset(self) -> int | None:
        self.seen.forget_all()
        deleted = 0
        pattern = s.scan_pattern(self.key_prefix)
        c: Any = self.storage
        keys = [k async for k in c.scan_iter(match=pattern, count=1000)]
        for k in keys:
            deleted += int(await c.delete(k))
        return deleted

    async def clear(self, key: str) -> None:
        pk = self._key(key)
        self.seen.forget(pk)
        await self.storage.delete(pk)

    async def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        pk = self._key(key)
        backend = await self.throttle.backend()
        words = s.window_words(backend, s.moving_limit(limit, expiry), pk, amount)
        reply, tail = await self._send(pk, words, s.tail_words(pk, limit))
        d = s.decide(reply)
        self.seen.keep(s.moving_seen(pk, d, amount, tail, expiry))
        return not d.limited

    async def get_moving_window(self, key: str, limit: int, expiry: int) -> tuple[float, int]:
        pk = self._key(key)
        seen = self.seen.take(pk, "moving")
        answer = s.moving_answer(seen, expiry) if seen else None
        if answer is None:
            backend = await self.throttle.backend()
            words = s.window_words(backend, s.moving_limit(limit, expiry), pk, 0)
            reply, tail = await self._send(pk, words, s.tail_words(pk, limit))
            d = s.decide(reply)
            fresh = s.moving_seen(pk, d, 0, tail, expiry)
            if fresh.start is None and self.cluster:
                t = s.tail_words(pk, limit)
                got = await self.throttle.execute(t, pk, raw=True) if t else None
                fresh = s.moving_seen(pk, d, 0, got, expiry)
            answer = (fresh.start if fresh.start is not None else fresh.wall + d.reset_after - expiry, fresh.count)
            if fresh.count == 0:
                answer = (fresh.wall, 0)
        return answer

    async def acquire_sliding_window_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        pk = self._key(key)
        backend = await self.throttle.backend()
        words = s.window_words(backend, s.sliding_limit(limit, expiry), pk, amount)
        d = s.decide(await self.throttle.execute(words, pk))
        self.seen.keep(s.sliding_seen(pk, d, expiry))
        return not d.limited

    async def get_sliding_window(self, key: str, expiry: int) -> tuple[int, float, int, float]:
        pk = self._key(key)
        seen = self.seen.take(pk, "sliding")
        if seen is None:
            backend = await self.throttle.backend()
            words = s.window_words(backend, s.sliding_limit(s.COUNTER_CEILING, expiry), pk, 0)
            seen = s.sliding_seen(pk, s.decide(await self.throttle.execute(words, pk)), expiry)
        return s.sliding_answer(seen, expiry)

    async def clear_sliding_window(self, key: str, expiry: int) -> None:
        await self.clear(key)
