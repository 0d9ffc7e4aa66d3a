"""The decisions of the ``limits`` storages, without I/O (shared by the sync and async ones).

Every write is one command (CL.WINDOW or CL.COUNTER, or the twin's FCALL); what a strategy
reads right after its own hit in the same thread or task (Flask-Limiter's and slowapi's
headers) is answered from that hit's reply, so a request costs one round trip."""

from __future__ import annotations

import contextvars
import dataclasses
import struct
import time
import urllib.parse
from typing import Any, Sequence

from ._core import Backend, CounterLimit, Decision, WindowLimit, decision, single

# limits' fixed window counts every hit, admitted or not, and tells only the count: a
# CL.COUNTER whose limit is never reached (the largest the Functions twin replies exactly)
# counts the same way, and its reply carries the count (limit - remaining) and the window's end.
COUNTER_CEILING = 2**53 - 1
# A peek reports the time left in the window, capped at the window it is given: reads (which
# limits gives no window) peek with the longest window CL.COUNTER takes, in seconds.
PEEK_WINDOW = 1_000_000_000
# CL.WINDOW's exact log takes limits up to this (the module's throttle.max-exact-limit
# default); above it the moving window is bucketed (PRECISION = window / 1000).
MAX_EXACT_LIMIT = 100_000
# The sliding window counter: CL.WINDOW with PRECISION = window / SLIDING_BUCKETS.
SLIDING_BUCKETS = 10
# The moving window's hits read the log's tail (its oldest live entry, for the reset time) in
# the same round trip up to this limit (8 bytes per entry).
TAIL_LIMIT = 4096
# A hit's reply answers the next read of the same key, by the same thread or task, within
# this many seconds (and once): what Flask-Limiter and slowapi read for their headers right
# after the hit. Later reads ask the server.
SEEN_FOR = 0.5


def client_url(uri: str) -> tuple[str, bool, bool]:
    """``redis+throttle://…`` → (the URI redis-py reads, cluster?, async?)."""
    scheme, sep, rest = uri.partition("://")
    words = scheme.split("+")
    is_async = words[0] == "async"
    if is_async:
        words = words[1:]
    cluster = "cluster" in words
    base = words[0] if words and words[0] in ("redis", "rediss") else "redis"
    return f"{base}{sep}{rest}", cluster, is_async


def cluster_nodes(url: str) -> list[tuple[str, int]]:
    parsed = urllib.parse.urlparse(url)
    netloc = parsed.netloc.rsplit("@", 1)[-1]
    out = []
    for loc in netloc.split(","):
        sub = urllib.parse.urlparse(f"fake://{loc.strip()}")
        if sub.hostname is None or sub.port is None:
            raise ValueError(f"missing host or port in {loc!r} of {url!r}")
        out.append((sub.hostname, sub.port))
    return out


def cluster_auth(url: str) -> dict[str, str]:
    parsed = urllib.parse.urlparse(url)
    out = {}
    if parsed.username:
        out["username"] = urllib.parse.unquote(parsed.username)
    if parsed.password:
        out["password"] = urllib.parse.unquote(parsed.password)
    return out


@dataclasses.dataclass
class Seen:
    """A hit's reply, kept for the reads that follow it."""

    key: str
    at: float  # time.monotonic() when the reply arrived
    wall: float  # time.time() then
    count: int  # units in the limiter after the hit
    start: float | None  # moving window: the oldest live entry (wall clock)
    ends: float  # fixed window: when it closes (wall); sliding: the next instant units leave
    unread: set[str]


class Memory:
    """Per storage: the last hits' replies of this thread or task."""

    def __init__(self) -> None:
        self.var: contextvars.ContextVar[tuple[Seen, ...]] = contextvars.ContextVar(
            f"redis_throttle_seen_{id(self)}", default=()
        )
        # clear() and reset() (from any thread) void the replies seen before them.
        self.cleared: dict[str, float] = {}
        self.reset_at = 0.0

    def keep(self, seen: Seen) -> None:
        rest = tuple(s for s in self.var.get() if s.key != seen.key)[-7:]
        self.var.set(rest + (seen,))

    def take(self, key: str, part: str) -> Seen | None:
        now = time.monotonic()
        voided = max(self.reset_at, self.cleared.get(key, 0.0))
        for s in self.var.get():
            if s.key == key and part in s.unread and now - s.at <= SEEN_FOR and s.at > voided:
                s.unread.discard(part)
                return s
        return None

    def forget(self, key: str) -> None:
        now = time.monotonic()
        if len(self.cleared) > 1000:
            self.cleared = {k: at for k, at in self.cleared.items() if now - at <= SEEN_FOR}
        self.cleared[key] = now

    def forget_all(self) -> None:
        self.reset_at = time.monotonic()


def moving_limit(limit: int, expiry: int) -> WindowLimit:
    if limit > MAX_EXACT_LIMIT:
        return WindowLimit(limit, expiry, precision=max(1, expiry * 1000 // 1000) / 1000)
    return WindowLimit(limit, expiry)


def sliding_limit(limit: int, expiry: int) -> WindowLimit:
    return WindowLimit(limit, expiry, precision=expiry * 1000 // SLIDING_BUCKETS / 1000)


def window_words(backend: Backend, limit: WindowLimit, key: str, quantity: int) -> list[Any]:
    return single(backend, limit, key, quantity)


def counter_words(backend: Backend, key: str, expiry: int, quantity: int) -> list[Any]:
    return single(backend, CounterLimit(COUNTER_CEILING, expiry), key, quantity)


def tail_words(key: str, limit: int) -> list[Any] | None:
    if limit > TAIL_LIMIT:
        return None
    return ["GETRANGE", key, -8 * limit, -1]


def oldest_start(d: Decision, tail: Any, window_s: int, wall: float) -> float | None:
    """The oldest live entry of an exact log, on this host's clock, from the log's tail (the
    newest entry leaves the window ``reset_after`` from now: that gives the server's now)."""
    count = d.limit - d.remaining
    if count <= 0 or not isinstance(tail, bytes) or len(tail) < 8 * count or len(tail) % 8:
        return None
    newest: int = struct.unpack_from("<q", tail, len(tail) - 8)[0]
    oldest: int = struct.unpack_from("<q", tail, len(tail) - 8 * count)[0]
    # Entries are nanoseconds since the epoch (after 2001): anything else is not an exact log
    # (a PRECISION ring another caller wrote, read by a peek).
    if not 10**18 < oldest <= newest:
        return None
    server_now_ns = newest + window_s * 1_000_000_000 - round(d.reset_after * 1e9)
    return float(wall + (oldest - server_now_ns) / 1e9)


def moving_seen(key: str, d: Decision, quantity: int, tail: Any, window_s: int) -> Seen:
    wall = time.time()
    count = d.limit - d.remaining
    start = oldest_start(d, tail, window_s, wall)
    if start is None:
        if count == 0:
            start = wall
        elif d.limited and d.retry_after >= 0 and quantity == 1:
            # Denied one unit: it is admitted when the oldest entry leaves.
            start = wall + d.retry_after - window_s
        elif not d.limited and count == quantity:
            start = wall  # only this hit's entries
    return Seen(key, time.monotonic(), wall, count, start, 0.0, {"moving"})


def moving_answer(seen: Seen, window_s: int) -> tuple[float, int] | None:
    if seen.start is None:
        return None
    if seen.count == 0:
        return time.time(), 0
    return seen.start, seen.count


def queue_plain_counter(pipe: Any, key: str, expiry: int, amount: int) -> None:
    """The fixed window on a server without the module, as plain commands in one MULTI/EXEC:
    the bytes and expiry CL.COUNTER keeps (an integer string expiring when the window closes),
    at a fraction of the Functions twin's cost (FCALL cl_counter parses and checks in Lua).
    limits' fixed window never denies in the storage, so nothing else is needed."""
    pipe.set(key, 0, px=expiry * 1000, nx=True)
    pipe.incrby(key, amount)
    pipe.pttl(key)


def plain_counter_seen(key: str, replies: Sequence[Any]) -> Seen:
    wall = time.time()
    count, pttl = int(replies[1]), int(replies[2])
    return Seen(key, time.monotonic(), wall, count, None, wall + max(pttl, 0) / 1000, {"count", "expiry"})


def counter_seen(key: str, d: Decision) -> Seen:
    wall = time.time()
    count = d.limit - d.remaining
    return Seen(key, time.monotonic(), wall, count, None, wall + d.reset_after, {"count", "expiry"})


def sliding_seen(key: str, d: Decision, window_s: int) -> Seen:
    """The bucketed window's count, and the next bucket boundary (the first instant units can
    leave it): buckets are aligned to multiples of the precision, which divides the window, so
    ``reset_after`` modulo the precision is the time to that boundary."""
    wall = time.time()
    count = d.limit - d.remaining
    precision = window_s / SLIDING_BUCKETS
    if count <= 0:
        leaves = 0.0
    else:
        leaves = round(d.reset_after % precision, 3) or precision
    return Seen(key, time.monotonic(), wall, count, None, wall + leaves, {"sliding"})


def sliding_answer(seen: Seen, window_s: int) -> tuple[int, float, int, float]:
    """limits' (previous count, its TTL, current count, its TTL): everything as the current
    window, whose TTL modulo the window is when units next leave."""
    if seen.count <= 0:
        return 0, 0.0, 0, 0.0
    return 0, 0.0, seen.count, max(0.0, seen.ends - time.time())


def decide(reply: Any) -> Decision:
    return decision(reply)


def prefixed(prefix: str, key: str) -> str:
    return f"{prefix}:{key}"


def scan_pattern(prefix: str) -> str:
    escaped = "".join("\\" + c if c in "*?[]\\" else c for c in prefix)
    return f"{escaped}:*"


def stringify(words: Sequence[Any]) -> list[Any]:
    return list(words)
