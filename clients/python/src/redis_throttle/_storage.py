"""The decisions of the ``limits`` storages, without I/O (shared by the sync and async ones).

Every hit is one command (CL.WINDOW or CL.COUNTER, or the twin's FCALL), and every read asks
the server: limits' ``test()`` and ``get_window_stats`` alike (a reply kept from an earlier call
would be contradicted by a ``test()`` after another client's hit or ``clear()``, or by time)."""

from __future__ import annotations

import dataclasses
import struct
import time
from typing import Any, Sequence

from ._core import MAX_MS, Backend, CounterLimit, Decision, WindowLimit, decision, ms, single
from ._errors import ThrottleError

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
# A cluster client's pool per node, as limits' own redis+cluster:// storages make it (redis-py 8's
# default, 100, refuses a burst's 101st connection at once with MaxConnectionsError).
CLUSTER_OPTIONS = {"max_connections": 1000}
WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"


def client_url(uri: str) -> tuple[str, bool, bool]:
    """``redis+throttle://…`` → (the URI redis-py reads, cluster?, async?); ``…+unix://`` is
    redis-py's ``unix://`` (as limits reads its ``redis+unix://``)."""
    scheme, sep, rest = uri.partition("://")
    words = scheme.split("+")
    is_async = words[0] == "async"
    if is_async:
        words = words[1:]
    cluster = "cluster" in words
    base = "unix" if "unix" in words else words[0] if words and words[0] in ("redis", "rediss") else "redis"
    return f"{base}{sep}{rest}", cluster, is_async


def window_ms(expiry: Any) -> int:
    """limits' expiry (seconds) as the milliseconds every command sends, refused before sending
    with the module's own error when no command takes it, on the module and the twin alike (the
    twin's fixed window is plain commands, which would take any)."""
    millis = expiry * 1000 if isinstance(expiry, int) and not isinstance(expiry, bool) else ms(expiry, "window")
    if not 1 <= millis <= MAX_MS:
        raise ThrottleError("ERR window must be an integer from 1 to 1000000000000 (milliseconds)")
    return millis


def amount_ok(value: int, name: str = "limit") -> int:
    """A limit or a cost within the integers both backends count exactly (the twin's Lua
    numbers are exact below 2^53), refused the same way on both."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ThrottleError(f"ERR {name} must be an integer, got {value!r}")
    if value > COUNTER_CEILING:
        raise ThrottleError(f"ERR {name} must be at most {COUNTER_CEILING} (the largest both backends count exactly)")
    return value


def cost(amount: int) -> int:
    """A hit's cost as CL.WINDOW's quantity: limits' own storages admit a negative cost and take
    nothing for it (a negative quantity would be a refund here): a peek."""
    return max(0, amount_ok(amount, "cost"))


def limit_of(key: str) -> int | None:
    """The limit limits wrote into its key (``…/<amount>/<multiples>/<granularity>``, see
    ``RateLimitItem.key_for``), or None for a key of another shape."""
    parts = key.rsplit("/", 3)
    if len(parts) == 4 and parts[1].isdigit() and parts[2].isdigit():
        return int(parts[1])
    return None


@dataclasses.dataclass
class Figures:
    """A limiter's figures, as a reply told them, on this host's clock."""

    wall: float  # time.time() when the reply arrived
    count: int  # units in the limiter
    start: float | None  # moving window: the oldest live entry
    ends: float  # when the window closes (fixed), a unit is next admitted (sliding), the newest
    # entry leaves (moving)


def moving_limit(limit: int, expiry: int) -> WindowLimit:
    window = window_ms(expiry)
    if limit > MAX_EXACT_LIMIT:
        return WindowLimit(limit, expiry, precision=max(1, window // 1000) / 1000)
    return WindowLimit(limit, expiry)


def sliding_limit(limit: int, expiry: int) -> WindowLimit:
    return WindowLimit(limit, expiry, precision=max(1, window_ms(expiry) // SLIDING_BUCKETS) / 1000)


def window_words(backend: Backend, limit: WindowLimit, key: str, quantity: int) -> list[Any]:
    return single(backend, limit, key, quantity)


def counter_words(backend: Backend, key: str, expiry: int, quantity: int) -> list[Any]:
    window_ms(expiry)
    return single(backend, CounterLimit(COUNTER_CEILING, expiry), key, quantity)


def tail_words(key: str, limit: int) -> list[Any] | None:
    if limit > TAIL_LIMIT:
        return None
    return ["GETRANGE", key, -8 * limit, -1]


def oldest_start(d: Decision, tail: Any, window_s: int, wall: float) -> float | None:
    """The oldest live entry of an exact log, on this host's clock, from the log's tail (the
    newest entry leaves the window ``reset_after`` from now: that gives the server's now).

    The tail is read right after the command in the same round trip, not in a transaction: a
    hit of another client that Redis runs between the two (Redis runs a connection's buffered
    commands back to back, so only when the pipeline arrives split) can move the answer by the
    time between them, microseconds."""
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


def moving_figures(d: Decision, tail: Any, window_s: int) -> Figures:
    wall = time.time()
    return Figures(wall, d.limit - d.remaining, oldest_start(d, tail, window_s, wall), wall + d.reset_after)


def moving_answer(figures: Figures, window_s: int) -> tuple[float, int]:
    """limits' (start of the window, entries in it). Without the oldest entry (a bucketed log,
    or one too long to read its tail), the window starts when its newest entry leaves, less
    the window: a reset never earlier than the true one."""
    if figures.count <= 0:
        return time.time(), 0
    if figures.start is not None:
        return figures.start, figures.count
    return figures.ends - window_s, figures.count


def plain_counter(backend: Backend, cluster: bool, amount: int) -> bool:
    """Whether a fixed-window hit is counted with plain commands (queue_plain_counter): on a
    single server with only the Functions twin, for hits. A negative cost (a refund) is the
    command's, on every backend alike: it gives hits back within the window, never below 0,
    and a window given back to 0 is deleted (INCRBY would count below 0, and the module's
    counter cannot hold that)."""
    return backend is Backend.TWIN and not cluster and amount >= 0


def queue_plain_counter(pipe: Any, key: str, expiry_ms: int, amount: int) -> None:
    """The fixed window on a server without the module, as plain commands in one MULTI/EXEC:
    the bytes and expiry CL.COUNTER keeps (an integer string expiring when the window closes),
    at a fraction of the Functions twin's cost (FCALL cl_counter parses and checks in Lua).
    limits' fixed window never denies in the storage, so nothing else is needed."""
    pipe.set(key, 0, px=expiry_ms, nx=True)
    pipe.incrby(key, amount)
    pipe.pttl(key)


def plain_counter_refused(head: Any) -> ThrottleError:
    """What CL.COUNTER answers for a string INCRBY could not count (``head``: its first byte):
    a sliding window's state is WRONGTYPE, anything else not a counter's state."""
    if isinstance(head, bytes) and head in (b"\x01", b"\x02"):
        return ThrottleError(WRONGTYPE)
    return ThrottleError("ERR key does not hold valid CL.COUNTER state")


def plain_counter_count(replies: Sequence[Any]) -> int:
    return int(replies[1])


def plain_counter_figures(pttl: Any, value: Any) -> Figures:
    """The fixed window as ``PTTL`` and ``GET`` (the value's bytes) read it on a server with only
    the twin (a peek through ``FCALL cl_counter`` costs several times these two); a value that
    is not a count is refused as CL.COUNTER refuses it."""
    wall = time.time()
    if value is None:
        return Figures(wall, 0, None, wall)
    if not (isinstance(value, bytes) and value.lstrip(b"-").isdigit() and len(value) <= 20):
        raise plain_counter_refused(value[:1] if isinstance(value, bytes) else None)
    return Figures(wall, int(value), None, wall + max(int(pttl), 0) / 1000)


def counter_figures(d: Decision) -> Figures:
    wall = time.time()
    return Figures(wall, d.limit - d.remaining, None, wall + d.reset_after)


def sliding_peek_limit(key: str) -> int:
    """The limit a read of the sliding window peeks with: one less than the key's own (when it
    is 2 or more), so that a full window replies as a denial, whose ``retry_after`` is exactly
    when its oldest units leave and one more is admitted. A peek writes nothing, and the
    buckets (window and precision) are the key's own: nothing is converted."""
    limit = limit_of(key)
    if limit is None or limit < 2 or limit > COUNTER_CEILING:
        return COUNTER_CEILING
    return limit - 1


def sliding_figures(d: Decision, peeked: int) -> Figures:
    """A sliding window's units, and when a request is next admitted: a denial's own
    ``retry_after``, or ``reset_after`` (when the newest units leave, the limiter full again:
    never earlier than the next admission). ``peeked``: the read's peek limit, one less than
    the key's (``sliding_peek_limit``); the key's limit is then one more than the reply's."""
    wall = time.time()
    if peeked < COUNTER_CEILING and d.limited:
        count = peeked + 1  # full (or over): `remaining` is 0 at the key's limit
    else:
        count = d.limit - d.remaining
    after = d.retry_after if d.limited and d.retry_after >= 0 else d.reset_after
    return Figures(wall, count, None, wall + after)


def sliding_answer(figures: Figures, window_s: int) -> tuple[int, float, int, float]:
    """limits' (previous count, its TTL, current count, its TTL), such that its
    SlidingWindowCounterRateLimiter finds exactly ``figures.count`` units (``remaining`` and
    ``test()``), and its reset at ``figures.ends``, when a request is next admitted.

    limits computes the reset as now + min(previous TTL % (window / previous count),
    current TTL % window). A bucket's units leave up to a bucket later than a window after they
    were taken, so the next admission can be up to 1.1 windows away, which the current window's
    term (modulo the window) cannot say. Then the units are given as a previous window of
    ``window / (2·t)`` units whose TTL is ``t·(2·count + 1)``: its weight is ``count + 0.5``
    units (limits floors it for ``remaining`` and compares ``< limit - cost + 1`` in ``test``:
    the same answers as ``count``), and its term is ``t``."""
    if figures.count <= 0:
        return 0, 0.0, 0, 0.0
    t = max(figures.ends - time.time(), 0.001)
    if t < window_s:
        return 0, 0.0, figures.count, t
    previous: Any = window_s / (2 * t)  # (a fraction: see above)
    return previous, t * (2 * figures.count + 1), 0, 0.0


def decide(reply: Any) -> Decision:
    return decision(reply)


def prefixed(prefix: str, key: str) -> str:
    return f"{prefix}:{key}"


def scan_pattern(prefix: str) -> str:
    escaped = "".join("\\" + c if c in "*?[]\\" else c for c in prefix)
    return f"{escaped}:*"
