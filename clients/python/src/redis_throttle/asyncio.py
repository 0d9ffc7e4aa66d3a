"""The asyncio client over ``redis.asyncio.Redis`` or ``redis.asyncio.RedisCluster``.

Each method is one awaited command: cancelling it at any await leaves nothing on the client
(a command already sent may still be decided by the server, as with any Redis call)."""

from __future__ import annotations

import asyncio
from typing import Any, Sequence

from redis.asyncio import Redis
from redis.asyncio.cluster import PipelineCommand, RedisCluster
from redis.client import NEVER_DECODE
from redis.exceptions import MovedError, RedisError, ResponseError

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
from ._sync import _MOVED_RETRIES, _NODE_LOST, _REDIRECTED, failed, server_error
from ._twin import load_twin_async as load_twin

__all__ = ["Backend", "Throttle", "ThrottleError", "load_twin"]


class Throttle:
    """The async twin of :class:`redis_throttle.Throttle`."""

    def __init__(self, client: Redis | RedisCluster, backend: Backend | None = None) -> None:
        self.client = client
        self._cluster = isinstance(client, RedisCluster)
        self._backend = backend
        self._detecting: asyncio.Lock | None = None

    async def backend(self) -> Backend:
        """The module or the twin (asks the server the first time)."""
        if self._backend is None:
            if self._detecting is None:
                self._detecting = asyncio.Lock()
            async with self._detecting:
                if self._backend is None:
                    self._backend = await self._detect()
        return self._backend

    async def _detect(self) -> Backend:
        # CL.THROTTLE with no arguments: an arity error where the module is loaded, "unknown
        # command" where it is not (COMMAND INFO replies that redis-py cannot parse when empty).
        try:
            await self._any("CL.THROTTLE")
        except ThrottleError as err:
            if "wrong number of arguments" in str(err):
                return Backend.MODULE
        backend = _twin.detected(await self._any("FUNCTION", "LIST", "LIBRARYNAME", "throttle"), self.client)
        try:
            version: Any = await self._any("FCALL_RO", "cl_version", 0)
        except ThrottleError as err:
            version = err
        _twin.warn_if_outdated(version, self.client)
        return backend

    async def _any(self, *words: Any) -> Any:
        try:
            if self._cluster:
                c: Any = self.client
                await c.initialize()  # a no-op once the cluster's map is read
                return await c.execute_command(*words, target_nodes=c.get_random_node())
            return await self.client.execute_command(*words)
        except ResponseError as err:
            raise server_error(err) from err

    async def execute(self, words: Sequence[Any], key: Key, raw: bool = False) -> Any:
        """Sends ``words`` (routed by ``key``'s slot in a cluster); ``raw``: the reply's bytes
        undecoded whatever the client's ``decode_responses``."""
        try:
            c: Any = self.client
            options: dict[str, Any] = {NEVER_DECODE: True} if raw else {}
            if not self._cluster:
                return await c.execute_command(*words, **options)
            await c.initialize()
            for attempt in range(_MOVED_RETRIES + 1):
                try:
                    return await c.execute_command(*words, target_nodes=c.get_node_from_key(key), **options)
                except MovedError:
                    if attempt == _MOVED_RETRIES:
                        raise
            raise AssertionError("unreachable")
        except ResponseError as err:
            raise failed(self, err) from err

    async def pipelined(self, key: Key, first: Sequence[Any], then: Sequence[Any]) -> tuple[Any, bytes | None]:
        """``first``, then ``then`` (a read of the same key, its reply's bytes undecoded), in one
        round trip to the server that owns ``key``: see :meth:`redis_throttle.Throttle.pipelined`.
        (In a cluster, on the owner node's own connections.)"""
        c: Any = self.client
        try:
            if not self._cluster:
                pipe = c.pipeline(transaction=False)
                pipe.execute_command(*first)
                pipe.execute_command(*then, **{NEVER_DECODE: True})
                # (Errors as they came, not raised: redis-py would prefix their text.)
                return _core.first_error(await pipe.execute(raise_on_error=False))
            await c.initialize()
            commands = [PipelineCommand(0, *first), PipelineCommand(1, *then, **{NEVER_DECODE: True})]
            await c.get_node_from_key(key).execute_pipeline(commands)
            return _core.first_error([command.result for command in commands])
        except _REDIRECTED as err:
            if not self._cluster:
                raise failed(self, err) from err
            return await self.execute(first, key), await self.execute(then, key, raw=True)
        except _NODE_LOST:
            if self._cluster:
                try:
                    await c.nodes_manager.initialize()
                except RedisError:
                    pass  # (the next call tries again)
            raise
        except ResponseError as err:
            raise failed(self, err) from err

    async def decide(self, limit: Limit, key: Key, quantity: int | None = None, *, debit: bool = False) -> Decision:
        q = limit.quantity if quantity is None else quantity
        words = _core.single(await self.backend(), limit, key, q, debit)
        return _core.decision(await self.execute(words, key))

    async def throttle(
        self, key: Key, max_burst: int, count: int, period: Seconds, quantity: int = 1, *, debit: bool = False
    ) -> Decision:
        return await self.decide(ThrottleLimit(max_burst, count, period), key, quantity, debit=debit)

    async def window(
        self,
        key: Key,
        limit: int,
        window: Seconds,
        quantity: int = 1,
        precision: Seconds | None = None,
        *,
        debit: bool = False,
    ) -> Decision:
        return await self.decide(WindowLimit(limit, window, precision), key, quantity, debit=debit)

    async def bucket(
        self, key: Key, capacity: int, tokens: int, interval: Seconds, quantity: int = 1, *, debit: bool = False
    ) -> Decision:
        return await self.decide(BucketLimit(capacity, tokens, interval), key, quantity, debit=debit)

    async def counter(
        self, key: Key, limit: int, window: Seconds, quantity: int = 1, *, debit: bool = False
    ) -> Decision:
        return await self.decide(CounterLimit(limit, window), key, quantity, debit=debit)

    async def quota(
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
        return await self.decide(QuotaLimit(limit, per, tz, anchor), key, quantity, debit=debit)

    async def all(self, calls: Sequence[tuple[Key, Limit]], *, debit: bool = False) -> AllDecision:
        if not calls:
            raise ThrottleError("ERR all() needs at least one (key, limit)")
        first = _core.one_slot([k for k, _ in calls])
        words = _core.all_command(await self.backend(), calls, debit)
        return _core.all_decision(await self.execute(words, first), len(calls))

    async def acquire(self, key: Key, limit: int, lease: Seconds, id: str | bytes) -> Decision:
        _core.module_only(await self.backend(), "CL.ACQUIRE")
        return _core.decision(await self.execute(["CL.ACQUIRE", key, limit, _core.ms(lease), id, "MS"], key))

    async def release(self, key: Key, id: str | bytes) -> bool:
        _core.module_only(await self.backend(), "CL.RELEASE")
        return bool(await self.execute(["CL.RELEASE", key, id], key))

    async def pace(
        self,
        key: Key,
        count: int,
        period: Seconds,
        maxwait: Seconds | None = None,
        quantity: int = 1,
        block: bool = False,
    ) -> PaceDecision:
        _core.module_only(await self.backend(), "CL.PACE")
        words = _core.pace_words(key, count, period, maxwait, quantity, block)
        return _core.pace_decision(await self.execute(words, key))
