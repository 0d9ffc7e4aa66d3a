"""A storage for `limits` (and so Flask-Limiter and slowapi) on redis-throttle.

Importing this module registers it for ``redis+throttle://``, ``rediss+throttle://`` and
``redis+throttle+cluster://`` (sync) and the same with ``async+`` (``limits.aio``)::

    import redis_throttle.limits  # noqa: F401  (registers the schemes)
    limiter = Limiter(get_remote_address, app=app, storage_uri="redis+throttle://localhost:6379")

Also ``redis+throttle+unix:///path/to/socket`` (as limits' ``redis+unix://``).

Strategies: the moving window is CL.WINDOW (an exact log, on the server's clock), the sliding
window counter CL.WINDOW with PRECISION (window / 10), the fixed window CL.COUNTER, each hit
one command. Every read asks the server (``test()`` and ``get_window_stats`` alike).
"""

from __future__ import annotations

import time
import urllib.parse
from typing import Any, cast

import limits
import redis
import redis.asyncio
from limits.aio.storage import MovingWindowSupport as AioMovingWindowSupport
from limits.aio.storage import SlidingWindowCounterSupport as AioSlidingWindowCounterSupport
from limits.aio.storage import Storage as AioStorage
from limits.errors import ConfigurationError
from limits.storage import MovingWindowSupport, SlidingWindowCounterSupport, Storage
from redis.cluster import ClusterNode
from redis.exceptions import RedisError, ResponseError

from . import _storage as s
from ._core import Backend
from ._errors import ThrottleError
from ._sync import Throttle, server_error
from .asyncio import Throttle as AsyncThrottle

if int(limits.__version__.split(".")[0]) < 5:
    raise ImportError(
        f"redis_throttle.limits needs limits>=5 (installed: limits {limits.__version__}; "
        "limits 5 needs Python 3.10 or later): pip install 'redis-throttle[limits]'"
    )

__all__ = ["PREFIX", "AsyncRedisThrottleStorage", "RedisThrottleStorage"]

# redis-py's annotations changed across the versions the package takes (5.0's RedisCluster is
# abstract to mypy, its from_url and pipeline untyped): its constructors are called untyped.
_redis: Any = redis

PREFIX = "THROTTLE"
"""Keys are ``THROTTLE:<limits' key>`` (not limits' ``LIMITS``: its moving-window lists under
the same names would be another type of key)."""


class RedisThrottleStorage(Storage, MovingWindowSupport, SlidingWindowCounterSupport):
    """`limits` storage on the redis-throttle module (or its Functions twin)."""

    STORAGE_SCHEME = [
        "redis+throttle",
        "rediss+throttle",
        "redis+throttle+unix",
        "redis+throttle+cluster",
        "rediss+throttle+cluster",
    ]
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
        Redis storage (a cluster's ``max_connections`` per node defaults to limits' own, 1,000).
        ``rediss+throttle+cluster://`` connects to every node over TLS."""
        super().__init__(uri, wrap_exceptions=wrap_exceptions, **options)
        url, cluster, _ = s.client_url(uri)
        self.key_prefix = key_prefix
        self.cluster = cluster
        client: redis.Redis | redis.RedisCluster
        if cluster:
            hosts, from_uri = cluster_options(url)
            nodes = [ClusterNode(h, p) for h, p in hosts]  # type: ignore[no-untyped-call]
            client = _redis.RedisCluster(startup_nodes=nodes, **{**s.CLUSTER_OPTIONS, **from_uri, **options})
        elif connection_pool is not None:
            client = redis.Redis(connection_pool=connection_pool, **options)
        else:
            client = _redis.from_url(url, **options)
        self.storage = client
        self.throttle = Throttle(client)

    @property
    def base_exceptions(self) -> type[Exception] | tuple[type[Exception], ...]:
        return (RedisError, ThrottleError)

    def _key(self, key: str) -> str:
        return s.prefixed(self.key_prefix, key)

    def _send(self, key: str, words: list[Any], tail: list[Any] | None = None) -> tuple[Any, Any]:
        """One round trip: the command, and the log's tail when asked."""
        if tail is None:
            return self.throttle.execute(words, key), None
        return self.throttle.pipelined(key, words, tail)

    # Fixed window (CL.COUNTER, counting every hit as limits does)
    def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        pk = self._key(key)
        window = s.window_ms(expiry)
        s.amount_ok(amount, "cost")
        if s.plain_counter(self.throttle.backend, self.cluster, amount):
            pipe = cast(Any, self.storage).pipeline(transaction=True)
            s.queue_plain_counter(pipe, pk, window, amount)
            replies = pipe.execute(raise_on_error=False)
            refused = next((r for r in replies if isinstance(r, ResponseError)), None)
            if refused is not None:
                raise self._counter_refused(pk, refused) from refused
            return s.plain_counter_count(replies)
        d = s.decide(self.throttle.execute(s.counter_words(self.throttle.backend, pk, expiry, amount), pk))
        return s.counter_figures(d).count

    def _counter_refused(self, pk: str, err: ResponseError) -> ThrottleError:
        if str(err).startswith("value is not an integer"):
            return s.plain_counter_refused(self.storage.getrange(pk, 0, 0))
        return server_error(err)

    def _counter(self, pk: str) -> s.Figures:
        if self.throttle.backend is Backend.TWIN:
            return s.plain_counter_figures(*self.throttle.pipelined(pk, ["PTTL", pk], ["GET", pk]))
        words = s.counter_words(self.throttle.backend, pk, s.PEEK_WINDOW, 0)
        return s.counter_figures(s.decide(self.throttle.execute(words, pk)))

    def get(self, key: str) -> int:
        return self._counter(self._key(key)).count

    def get_expiry(self, key: str) -> float:
        figures = self._counter(self._key(key))
        return max(figures.ends, figures.wall) if figures.count else figures.wall

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
        self.storage.delete(self._key(key))

    # Moving window (CL.WINDOW, exact)
    def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        if s.amount_ok(limit) <= 0:
            return False  # ("0/minute": limits' own storages deny every hit, as here)
        pk = self._key(key)
        words = s.window_words(self.throttle.backend, s.moving_limit(limit, expiry), pk, s.cost(amount))
        return not s.decide(self.throttle.execute(words, pk)).limited

    def get_moving_window(self, key: str, limit: int, expiry: int) -> tuple[float, int]:
        if s.amount_ok(limit) <= 0:
            return time.time(), 0
        pk = self._key(key)
        words = s.window_words(self.throttle.backend, s.moving_limit(limit, expiry), pk, 0)
        reply, tail = self._send(pk, words, s.tail_words(pk, limit))
        return s.moving_answer(s.moving_figures(s.decide(reply), tail, expiry), expiry)

    # Sliding window counter (CL.WINDOW with PRECISION)
    def acquire_sliding_window_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        if s.amount_ok(limit) <= 0:
            return False
        pk = self._key(key)
        words = s.window_words(self.throttle.backend, s.sliding_limit(limit, expiry), pk, s.cost(amount))
        return not s.decide(self.throttle.execute(words, pk)).limited

    def get_sliding_window(self, key: str, expiry: int) -> tuple[int, float, int, float]:
        if s.limit_of(key) == 0:
            return 0, 0.0, 0, 0.0  # (a limit of 0 never takes a unit: see acquire)
        pk = self._key(key)
        peek = s.sliding_peek_limit(key)
        words = s.window_words(self.throttle.backend, s.sliding_limit(peek, expiry), pk, 0)
        d = s.decide(self.throttle.execute(words, pk))
        return s.sliding_answer(s.sliding_figures(d, peek), expiry)

    def clear_sliding_window(self, key: str, expiry: int) -> None:
        self.clear(key)


def cluster_options(url: str) -> tuple[list[tuple[str, int]], dict[str, Any]]:
    """The startup nodes of ``redis[s]://[user:password@]host:port,host:port`` and the options
    the URI sets (credentials; TLS for ``rediss``). What a cluster URI cannot carry (a database,
    query options, which redis-py would read on one node only) is refused, naming where the
    option goes instead."""
    parsed = urllib.parse.urlparse(url)
    if parsed.path not in ("", "/") or parsed.query or parsed.fragment:
        raise ConfigurationError(
            f"{url!r}: a cluster URI takes user, password and host:port,host:port only (a cluster "
            "has one database); give other redis-py options as storage options (Flask-Limiter's "
            "RATELIMIT_STORAGE_OPTIONS, slowapi's storage_options), e.g. ssl_ca_certs"
        )
    nodes = []
    for loc in parsed.netloc.rsplit("@", 1)[-1].split(","):
        sub = urllib.parse.urlparse(f"fake://{loc.strip()}")
        if sub.hostname is None or sub.port is None:
            raise ConfigurationError(f"missing host or port in {loc!r} of {url!r}")
        nodes.append((sub.hostname, sub.port))
    options: dict[str, Any] = {}
    if parsed.username:
        options["username"] = urllib.parse.unquote(parsed.username)
    if parsed.password:
        options["password"] = urllib.parse.unquote(parsed.password)
    if parsed.scheme == "rediss":
        options["ssl"] = True
    return nodes, options


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
        "async+redis+throttle+unix",
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
        implementation: str = "redispy",
        **options: Any,
    ) -> None:
        """As the sync storage, over ``redis.asyncio``. ``implementation`` is limits' option
        for its async Redis storage: ``"redispy"`` (this storage's client) is the one taken;
        ``"coredis"`` and ``"valkey"`` are refused here, before anything connects."""
        if implementation != "redispy":
            raise ConfigurationError(
                f"implementation={implementation!r} is not supported by async+redis+throttle:// "
                "(it runs on redis-py's asyncio client: implementation='redispy', or leave it out)"
            )
        super().__init__(uri, wrap_exceptions=wrap_exceptions, **options)
        url, cluster, _ = s.client_url(uri)
        self.key_prefix = key_prefix
        self.cluster = cluster
        client: redis.asyncio.Redis | redis.asyncio.RedisCluster
        if cluster:
            from redis.asyncio.cluster import ClusterNode as AsyncClusterNode

            hosts, from_uri = cluster_options(url)
            nodes = [AsyncClusterNode(h, p) for h, p in hosts]
            client = _redis.asyncio.RedisCluster(startup_nodes=nodes, **{**s.CLUSTER_OPTIONS, **from_uri, **options})
        elif connection_pool is not None:
            client = redis.asyncio.Redis(connection_pool=connection_pool, **options)
        else:
            client = _redis.asyncio.from_url(url, **options)
        self.storage = client
        self.throttle = AsyncThrottle(client)

    @property
    def base_exceptions(self) -> type[Exception] | tuple[type[Exception], ...]:
        return (RedisError, ThrottleError)

    def _key(self, key: str) -> str:
        return s.prefixed(self.key_prefix, key)

    async def _send(self, key: str, words: list[Any], tail: list[Any] | None = None) -> tuple[Any, Any]:
        if tail is None:
            return await self.throttle.execute(words, key), None
        return await self.throttle.pipelined(key, words, tail)

    async def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        pk = self._key(key)
        window = s.window_ms(expiry)
        s.amount_ok(amount, "cost")
        backend = await self.throttle.backend()
        if s.plain_counter(backend, self.cluster, amount):
            pipe = cast(Any, self.storage).pipeline(transaction=True)
            s.queue_plain_counter(pipe, pk, window, amount)
            replies = await pipe.execute(raise_on_error=False)
            refused = next((r for r in replies if isinstance(r, ResponseError)), None)
            if refused is not None:
                raise await self._counter_refused(pk, refused) from refused
            return s.plain_counter_count(replies)
        d = s.decide(await self.throttle.execute(s.counter_words(backend, pk, expiry, amount), pk))
        return s.counter_figures(d).count

    async def _counter_refused(self, pk: str, err: ResponseError) -> ThrottleError:
        if str(err).startswith("value is not an integer"):
            return s.plain_counter_refused(await self.storage.getrange(pk, 0, 0))
        return server_error(err)

    async def _counter(self, pk: str) -> s.Figures:
        backend = await self.throttle.backend()
        if backend is Backend.TWIN:
            return s.plain_counter_figures(*await self.throttle.pipelined(pk, ["PTTL", pk], ["GET", pk]))
        words = s.counter_words(backend, pk, s.PEEK_WINDOW, 0)
        return s.counter_figures(s.decide(await self.throttle.execute(words, pk)))

    async def get(self, key: str) -> int:
        return (await self._counter(self._key(key))).count

    async def get_expiry(self, key: str) -> float:
        figures = await self._counter(self._key(key))
        return max(figures.ends, figures.wall) if figures.count else figures.wall

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
        deleted = 0
        pattern = s.scan_pattern(self.key_prefix)
        c: Any = self.storage
        keys = [k async for k in c.scan_iter(match=pattern, count=1000)]
        for k in keys:
            deleted += int(await c.delete(k))
        return deleted

    async def clear(self, key: str) -> None:
        await self.storage.delete(self._key(key))

    async def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        if s.amount_ok(limit) <= 0:
            return False
        pk = self._key(key)
        words = s.window_words(await self.throttle.backend(), s.moving_limit(limit, expiry), pk, s.cost(amount))
        return not s.decide(await self.throttle.execute(words, pk)).limited

    async def get_moving_window(self, key: str, limit: int, expiry: int) -> tuple[float, int]:
        if s.amount_ok(limit) <= 0:
            return time.time(), 0
        pk = self._key(key)
        words = s.window_words(await self.throttle.backend(), s.moving_limit(limit, expiry), pk, 0)
        reply, tail = await self._send(pk, words, s.tail_words(pk, limit))
        return s.moving_answer(s.moving_figures(s.decide(reply), tail, expiry), expiry)

    async def acquire_sliding_window_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        if s.amount_ok(limit) <= 0:
            return False
        pk = self._key(key)
        words = s.window_words(await self.throttle.backend(), s.sliding_limit(limit, expiry), pk, s.cost(amount))
        return not s.decide(await self.throttle.execute(words, pk)).limited

    async def get_sliding_window(self, key: str, expiry: int) -> tuple[int, float, int, float]:
        if s.limit_of(key) == 0:
            return 0, 0.0, 0, 0.0  # (a limit of 0 never takes a unit: see acquire)
        pk = self._key(key)
        peek = s.sliding_peek_limit(key)
        words = s.window_words(await self.throttle.backend(), s.sliding_limit(peek, expiry), pk, 0)
        d = s.decide(await self.throttle.execute(words, pk))
        return s.sliding_answer(s.sliding_figures(d, peek), expiry)

    async def clear_sliding_window(self, key: str, expiry: int) -> None:
        await self.clear(key)
