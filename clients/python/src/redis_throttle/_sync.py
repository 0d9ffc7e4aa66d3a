"""The synchronous client over ``redis.Redis`` or ``redis.RedisCluster``."""

from __future__ import annotations

import threading
from typing import Any, Sequence

import redis
from redis.client import NEVER_DECODE
from redis.cluster import RedisCluster
from redis.exceptions import AskError, ClusterDownError, MovedError, RedisError, ResponseError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from . import _core, _twin
from ._core import (
    AllDecision,
    Backend,
    BucketLimit,
    CounterLimit,
    Decision,
    Key,
    Limit,
    PaceDecision,
    QuotaLimit,
    Seconds,
    ThrottleLimit,
    WindowLimit,
)
from ._errors import ThrottleError

# A MOVED reply (a slot that moved since the client read the cluster's map) means the
# command did not run: safe to send again, once the client has its new map.
_MOVED_RETRIES = 3
# Replies of a cluster node that ran nothing (the slot moved or is moving, the cluster is
# down): a pipeline sent to it is sent again through the cluster client, which follows them.
_REDIRECTED = (AskError, TryAgainError, ClusterDownError)
# Errors after which the node a pipeline went to may be gone: the cluster client reads the
# cluster's map again (as it does after its own), and the call fails (never sent twice).
_NODE_LOST = (RedisConnectionError, RedisTimeoutError)


# The error codes other than ERR a server replies with, which redis-py before ``status_code``
# leaves in the message (it strips ERR): any other first word is the text of an ERR (the
# module's "DEBIT takes …", "PRECISION …").
_CODES = frozenset(
    "WRONGTYPE CROSSSLOT MOVED ASK TRYAGAIN CLUSTERDOWN MASTERDOWN BUSY BUSYKEY NOSCRIPT LOADING "
    "READONLY NOAUTH NOPERM WRONGPASS OOM EXECABORT NOREPLICAS MISCONF UNBLOCKED NOTBUSY NOPROTO".split()
)


def server_error(err: ResponseError) -> ThrottleError:
    """The server's own text back (redis-py strips the ``ERR`` code off the message)."""
    code = getattr(err, "status_code", None)
    text = str(err)
    if code and not text.startswith(f"{code} "):
        text = f"{code} {text}"
    elif not code and text.split(" ", 1)[0] not in _CODES:
        text = f"ERR {text}"
    return ThrottleError(text)


def failed(throttle: Any, err: ResponseError) -> ThrottleError:
    """The package's error for a server's error reply to a limiter's call. A backend gone from
    the server (the twin's library flushed, a failover) gets a message naming the fix and is
    detected again on the next call (``throttle``: the sync or async client)."""
    error = server_error(err)
    gone = _core.lost(error, throttle._backend)
    if gone is None:
        return error
    throttle._backend = None
    return gone


class Throttle:
    """Rate limiting over a redis-py client (``redis.Redis`` or ``redis.RedisCluster``): one
    method per command, each one round trip. Whether the server has the module or only the
    Functions twin is detected on the first call (``backend`` forces it)."""

    def __init__(self, client: redis.Redis | RedisCluster, backend: Backend | None = None) -> None:
        self.client = client
        self._cluster = isinstance(client, RedisCluster)
        self._backend = backend
        self._lock = threading.Lock()

    @property
    def backend(self) -> Backend:
        """The module or the twin (asks the server the first time)."""
        if self._backend is None:
            with self._lock:
                if self._backend is None:
                    self._backend = self._detect()
        return self._backend

    def _detect(self) -> Backend:
        # CL.THROTTLE with no arguments: an arity error where the module is loaded, "unknown
        # command" where it is not (COMMAND INFO replies that redis-py cannot parse when empty).
        try:
            self._any("CL.THROTTLE")
        except ThrottleError as err:
            if "wrong number of arguments" in str(err):
                return Backend.MODULE
        backend = _twin.detected(self._any("FUNCTION", "LIST", "LIBRARYNAME", "throttle"), self.client)
        try:
            version: Any = self._any("FCALL_RO", "cl_version", 0)
        except ThrottleError as err:
            version = err
        _twin.warn_if_outdated(version, self.client)
        return backend

    def _any(self, *words: Any) -> Any:
        try:
            if self._cluster:
                c: Any = self.client
                return c.execute_command(*words, target_nodes=c.get_random_node())
            plain: Any = self.client
            return plain.execute_command(*words)
        except ResponseError as err:
            raise server_error(err) from err

    def execute(self, words: Sequence[Any], key: Key, raw: bool = False) -> Any:
        """Sends ``words`` (routed by ``key``'s slot in a cluster); ``raw``: the reply's bytes
        undecoded whatever the client's ``decode_responses``."""
        try:
            c: Any = self.client
            options: dict[str, Any] = {NEVER_DECODE: True} if raw else {}
            if not self._cluster:
                return c.execute_command(*words, **options)
            for attempt in range(_MOVED_RETRIES + 1):
                try:
                    return c.execute_command(*words, target_nodes=c.get_node_from_key(key), **options)
                except MovedError:
                    if attempt == _MOVED_RETRIES:
                        raise
            raise AssertionError("unreachable")
        except ResponseError as err:
            raise failed(self, err) from err

    def pipelined(self, key: Key, first: Sequence[Any], then: Sequence[Any]) -> tuple[Any, bytes | None]:
        """``first``, then ``then`` (a read of the same key, its reply's bytes undecoded), in one
        round trip to the server that owns ``key`` (a pipeline, not a transaction). In a cluster
        a redirected pipeline (the slot moved) is sent again as two calls through the cluster
        client, which follows the redirection and reads the new map."""
        c: Any = self.client
        try:
            if self._cluster:
                pipe = c.get_redis_connection(c.get_node_from_key(key)).pipeline(transaction=False)
            else:
                pipe = c.pipeline(transaction=False)
            pipe.execute_command(*first)
            pipe.execute_command(*then, **{NEVER_DECODE: True})
            # (Errors as they came, not raised: redis-py would prefix their text.)
            return _core.first_error(pipe.execute(raise_on_error=False))
        except _REDIRECTED as err:
            if not self._cluster:
                raise failed(self, err) from err
            return self.execute(first, key), self.execute(then, key, raw=True)
        except _NODE_LOST:
            if self._cluster:
                try:
                    c.nodes_manager.initialize()
                except RedisError:
                    pass  # (the next call tries again)
            raise
        except ResponseError as err:
            raise failed(self, err) from err

    def decide(self, limit: Limit, key: Key, quantity: int | None = None, *, debit: bool = False) -> Decision:
        """One limiter's call (``limit.quantity`` units unless ``quantity`` is given). ``debit``:
        the units are counted whatever the limit says (DEBIT: a charge for what was already used,
        e.g. an LLM call's real token count after a check with an estimate); ``limited`` then says
        whether they overdrew, and later calls are refused until time has repaid the overdraft.
        Every method of a limiter command takes it."""
        q = limit.quantity if quantity is None else quantity
        return _core.decision(self.execute(_core.single(self.backend, limit, key, q, debit), key))

    def throttle(
        self, key: Key, max_burst: int, count: int, period: Seconds, quantity: int = 1, *, debit: bool = False
    ) -> Decision:
        """CL.THROTTLE (GCRA)."""
        return self.decide(ThrottleLimit(max_burst, count, period), key, quantity, debit=debit)

    def window(
        self,
        key: Key,
        limit: int,
        window: Seconds,
        quantity: int = 1,
        precision: Seconds | None = None,
        *,
        debit: bool = False,
    ) -> Decision:
        """CL.WINDOW (sliding window, exact or with ``precision``)."""
        return self.decide(WindowLimit(limit, window, precision), key, quantity, debit=debit)

    def bucket(
        self, key: Key, capacity: int, tokens: int, interval: Seconds, quantity: int = 1, *, debit: bool = False
    ) -> Decision:
        """CL.BUCKET (token bucket with interval refill)."""
        return self.decide(BucketLimit(capacity, tokens, interval), key, quantity, debit=debit)

    def counter(self, key: Key, limit: int, window: Seconds, quantity: int = 1, *, debit: bool = False) -> Decision:
        """CL.COUNTER (fixed window from the first counted unit)."""
        return self.decide(CounterLimit(limit, window), key, quantity, debit=debit)

    def quota(
        self,
        key: Key,
        limit: int,
        per: str,
        tz: str | None = None,
        anchor: str | int | None = None,
        quantity: int = 1,
        *,
        debit: bool = False,
    ) -> Decision:
        """CL.QUOTA (calendar quota)."""
        return self.decide(QuotaLimit(limit, per, tz, anchor), key, quantity, debit=debit)

    def all(self, calls: Sequence[tuple[Key, Limit]], *, debit: bool = False) -> AllDecision:
        """CL.ALL: every ``(key, limit)`` decided at one instant, all or nothing (each limit's
        ``quantity``). Keys must share one hash slot in a cluster (refused before sending).
        ``debit``: every limiter counts its quantity whatever its limit says (CL.ALL … DEBIT)."""
        if not calls:
            raise ThrottleError("ERR all() needs at least one (key, limit)")
        first = _core.one_slot([k for k, _ in calls])
        words = _core.all_command(self.backend, calls, debit)
        return _core.all_decision(self.execute(words, first), len(calls))

    def acquire(self, key: Key, limit: int, lease: Seconds, id: str | bytes) -> Decision:
        """CL.ACQUIRE (a lease among at most ``limit``; the module only)."""
        _core.module_only(self.backend, "CL.ACQUIRE")
        return _core.decision(self.execute(["CL.ACQUIRE", key, limit, _core.ms(lease), id, "MS"], key))

    def release(self, key: Key, id: str | bytes) -> bool:
        """CL.RELEASE: True if ``id`` held a live lease (the module only)."""
        _core.module_only(self.backend, "CL.RELEASE")
        return bool(self.execute(["CL.RELEASE", key, id], key))

    def pace(
        self,
        key: Key,
        count: int,
        period: Seconds,
        maxwait: Seconds | None = None,
        quantity: int = 1,
        block: bool = False,
    ) -> PaceDecision:
        """CL.PACE (a schedule: the wait before acting; the module only). With ``block`` the
        server holds the reply until the slot: give it a connection of its own."""
        _core.module_only(self.backend, "CL.PACE")
        return _core.pace_decision(self.execute(_core.pace_words(key, count, period, maxwait, quantity, block), key))
