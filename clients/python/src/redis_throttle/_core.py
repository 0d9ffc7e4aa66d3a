"""What the sync and async clients share: arguments, replies, routing. No I/O here."""

from __future__ import annotations

import datetime
import enum
import math
from dataclasses import dataclass, field
from typing import Any, Sequence, Tuple, Union

from redis.crc import key_slot

from ._errors import ThrottleError

Key = Union[str, bytes]
Seconds = Union[int, float, datetime.timedelta]

MODULE_ONLY = ("CL.PACE", "CL.ACQUIRE", "CL.RELEASE")
FUNCTIONS = {
    "CL.THROTTLE": "cl_throttle",
    "CL.WINDOW": "cl_window",
    "CL.BUCKET": "cl_bucket",
    "CL.COUNTER": "cl_counter",
    "CL.QUOTA": "cl_quota",
    "CL.ALL": "cl_all",
}
# How to load the Functions twin: the one place that says it (every error that needs it names it).
LOAD_TWIN = "python -m redis_throttle twin load"
TWIN_LOST = (
    "the Functions library `throttle` is missing on the server that owns this key (FUNCTION "
    "FLUSH or FUNCTION DELETE, or a failover to a node that never had it); nothing was counted. "
    f"Load it on every primary: `{LOAD_TWIN} redis://HOST:PORT` (or redis_throttle.load_twin(client))"
)
MODULE_LOST = (
    "the redis-throttle module is not loaded on the server that owns this key (a restart or a "
    "failover to a node without --loadmodule); nothing was counted. Load it (loadmodule "
    f"libredis_throttle.so), or the Functions twin: `{LOAD_TWIN} redis://HOST:PORT`"
)
# Every duration a command takes is at most 10^9 s (10^12 ms), on the module and the twin.
MAX_MS = 1_000_000_000_000


class Backend(enum.Enum):
    """What the server offers: the module's commands or the Functions twin's ``FCALL``s."""

    MODULE = "module"
    TWIN = "twin"


@dataclass(frozen=True)
class Decision:
    """A limiter's answer. Times are seconds (floats at millisecond precision);
    ``retry_after`` is ``-1.0`` when the call was admitted or can never be."""

    limited: bool
    limit: int
    remaining: int
    retry_after: float
    reset_after: float

    @property
    def allowed(self) -> bool:
        return not self.limited


@dataclass(frozen=True)
class AllDecision(Decision):
    """CL.ALL: the binding limiter's five fields, its 0-based ``binding`` index in the call's
    order, and every limiter's own decision (``details``)."""

    binding: int = 0
    details: Tuple[Decision, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class PaceDecision:
    """CL.PACE: ``wait`` seconds before acting (``-1.0`` when refused), ``queued`` units."""

    limited: bool
    wait: float
    queued: int
    retry_after: float
    reset_after: float


# Limiter specs for CL.ALL (and the arguments of the single commands).
@dataclass(frozen=True)
class ThrottleLimit:
    """GCRA: ``max_burst + 1`` at once, then ``count`` per ``period``."""

    max_burst: int
    count: int
    period: Seconds
    quantity: int = 1

    def words(self) -> list[Any]:
        return [integer(self.max_burst, "max_burst"), integer(self.count, "count"), ms(self.period, "period")]


@dataclass(frozen=True)
class WindowLimit:
    """Sliding window: ``limit`` per ``window`` (exact, or bucketed by ``precision``)."""

    limit: int
    window: Seconds
    precision: Seconds | None = None
    quantity: int = 1

    def words(self) -> list[Any]:
        out: list[Any] = [integer(self.limit, "limit"), ms(self.window, "window")]
        if self.precision is not None:
            out += ["PRECISION", ms(self.precision, "precision")]
        return out


@dataclass(frozen=True)
class BucketLimit:
    """Token bucket: ``capacity``, ``tokens`` added every ``interval``."""

    capacity: int
    tokens: int
    interval: Seconds
    quantity: int = 1

    def words(self) -> list[Any]:
        return [integer(self.capacity, "capacity"), integer(self.tokens, "tokens"), ms(self.interval, "interval")]


@dataclass(frozen=True)
class CounterLimit:
    """Fixed window: ``limit`` per ``window`` from the first counted unit."""

    limit: int
    window: Seconds
    quantity: int = 1

    def words(self) -> list[Any]:
        return [integer(self.limit, "limit"), ms(self.window, "window")]


@dataclass(frozen=True)
class QuotaLimit:
    """Calendar quota: ``limit`` per ``per`` (MINUTE … YEAR) in ``tz``, shifted to ``anchor``
    (an RFC 3339 instant, or Unix time in milliseconds)."""

    limit: int
    per: str
    tz: str | None = None
    anchor: str | int | None = None
    quantity: int = 1

    def words(self) -> list[Any]:
        out: list[Any] = [integer(self.limit, "limit"), "PER", self.per]
        if self.tz is not None:
            out += ["TZ", self.tz]
        if self.anchor is not None:
            out += ["ANCHOR", self.anchor]
        return out


Limit = Union[ThrottleLimit, WindowLimit, BucketLimit, CounterLimit, QuotaLimit]
SPEC_WORD = {
    ThrottleLimit: "THROTTLE",
    WindowLimit: "WINDOW",
    BucketLimit: "BUCKET",
    CounterLimit: "COUNTER",
    QuotaLimit: "QUOTA",
}
COMMAND_OF = {
    ThrottleLimit: "CL.THROTTLE",
    WindowLimit: "CL.WINDOW",
    BucketLimit: "CL.BUCKET",
    CounterLimit: "CL.COUNTER",
    QuotaLimit: "CL.QUOTA",
}


def ms(value: Seconds, name: str = "duration") -> int:
    """Seconds (int, float or timedelta) as whole milliseconds, the unit every call sends
    (with ``MS``). Refused before sending, with the same error on the module and the twin: a
    duration that is not a number (a bool, NaN, infinity), not a whole number of
    milliseconds, or longer than any command takes (10^9 s). (Zero and negative durations are
    the server's to refuse: some arguments take 0.)"""
    if isinstance(value, datetime.timedelta):
        total = value // datetime.timedelta(milliseconds=1)
        if datetime.timedelta(milliseconds=total) != value:
            raise ThrottleError(f"ERR {name} {value} is not a whole number of milliseconds")
        millis = int(total)
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ThrottleError(f"ERR {name} must be seconds (int, float or timedelta), got {value!r}")
    elif isinstance(value, float) and not math.isfinite(value):
        raise ThrottleError(f"ERR {name} must be a finite number of seconds, got {value!r}")
    else:
        if abs(value) > MAX_MS:  # (before the product, which could overflow a float's range)
            raise ThrottleError(f"ERR {name} must be at most 1000000000 seconds (1000000000000 milliseconds)")
        millis = round(value * 1000)
        if abs(millis - value * 1000) > 1e-6 * max(1.0, abs(value * 1000)):
            raise ThrottleError(f"ERR {name} {value} s is not a whole number of milliseconds")
    if millis > MAX_MS:
        raise ThrottleError(f"ERR {name} must be at most 1000000000 seconds (1000000000000 milliseconds)")
    return millis


def integer(value: object, name: str) -> int:
    """An integer argument (a limit, a count, a quantity), refused before sending when it is
    anything else (a bool, a float, a string): redis-py would send ``True`` or ``2.5`` as text
    the module and the twin read differently."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ThrottleError(f"ERR {name} must be an integer, got {value!r}")
    return value


def single(backend: Backend, limit: Limit, key: Key, quantity: int, debit: bool = False) -> list[Any]:
    """The words of one limiter's call: ``CL.X key params… q [DEBIT] MS`` or ``FCALL cl_x 1 key …``."""
    command = COMMAND_OF[type(limit)]
    head: list[Any] = [command] if backend is Backend.MODULE else ["FCALL", FUNCTIONS[command], 1]
    words = head + [key] + limit.words()
    if isinstance(limit, QuotaLimit):
        words.append("QUANTITY")
    return words + [integer(quantity, "quantity")] + debit_word(debit) + ["MS"]


def debit_word(debit: object) -> list[Any]:
    """``DEBIT`` (count the units whatever the limit says: a charge for what was used), or nothing."""
    if not isinstance(debit, bool):
        raise ThrottleError(f"ERR debit must be True or False, got {debit!r}")
    return ["DEBIT"] if debit else []


def all_command(backend: Backend, calls: Sequence[tuple[Key, Limit]], debit: bool = False) -> list[Any]:
    head: list[Any] = ["CL.ALL"] if backend is Backend.MODULE else ["FCALL", "cl_all"]
    words = head + [len(calls)] + [key for key, _ in calls]
    for _, limit in calls:
        words += [SPEC_WORD[type(limit)]] + limit.words() + ["QUANTITY", integer(limit.quantity, "quantity")]
    return words + debit_word(debit) + ["MS", "DETAILS"]


def module_only(backend: Backend, command: str) -> None:
    if backend is Backend.TWIN:
        raise ThrottleError(
            f"ERR {command} is the module's only: the server runs the Functions twin "
            "(functions/throttle.lua), which has no twin of it; load the module"
        )


def one_slot(keys: Sequence[Key]) -> Key:
    """The first key, after checking every key of one decision hashes to its slot."""
    first = keys[0]
    slot = key_slot(_b(first))
    for other in keys[1:]:
        if key_slot(_b(other)) != slot:
            raise ThrottleError(
                f"CROSSSLOT keys {first!r} and {other!r} are in different hash slots: one "
                "decision must keep its keys in one slot; use a hash tag, e.g. rl:{user42}:s "
                "and rl:{user42}:h"
            )
    return first


def _b(key: Key) -> bytes:
    return key.encode() if isinstance(key, str) else key


def _int(v: object) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ThrottleError(f"ERR expected an integer in the reply, got {v!r}")
    return v


def _secs(v: int) -> float:
    return -1.0 if v < 0 else v / 1000.0


def decision(reply: Any) -> Decision:
    if not isinstance(reply, (list, tuple)) or len(reply) < 5:
        raise ThrottleError(f"ERR expected five integers, got {reply!r}")
    f = [_int(x) for x in reply[:5]]
    return Decision(bool(f[0]), f[1], f[2], _secs(f[3]), _secs(f[4]))


def all_decision(reply: Any, count: int) -> AllDecision:
    if not isinstance(reply, (list, tuple)) or len(reply) < 7 or not isinstance(reply[6], (list, tuple)):
        raise ThrottleError(f"ERR expected CL.ALL's reply with DETAILS, got {reply!r}")
    head = decision(reply)
    details = tuple(decision(d) for d in reply[6])
    if len(details) != count:
        raise ThrottleError(f"ERR expected {count} details, got {len(details)}")
    return AllDecision(
        head.limited,
        head.limit,
        head.remaining,
        head.retry_after,
        head.reset_after,
        binding=_int(reply[5]) - 1,
        details=details,
    )


def pace_decision(reply: Any) -> PaceDecision:
    if not isinstance(reply, (list, tuple)) or len(reply) < 5:
        raise ThrottleError(f"ERR expected five integers, got {reply!r}")
    f = [_int(x) for x in reply[:5]]
    return PaceDecision(bool(f[0]), _secs(f[1]), f[2], _secs(f[3]), _secs(f[4]))


def pace_words(key: Key, count: int, period: Seconds, maxwait: Seconds | None, quantity: int, block: bool) -> list[Any]:
    words: list[Any] = ["CL.PACE", key, integer(count, "count"), ms(period, "period")]
    if maxwait is not None:
        words += ["MAXWAIT", ms(maxwait, "maxwait")]
    words += ["QUANTITY", integer(quantity, "quantity"), "MS"]
    if block:
        words.append("BLOCK")
    return words


def first_error(replies: Sequence[Any]) -> tuple[Any, Any]:
    """A pipeline's two replies, or its first error raised."""
    for reply in replies:
        if isinstance(reply, BaseException):
            raise reply
    return replies[0], replies[1]


def lost(err: ThrottleError, backend: Backend | None) -> ThrottleError | None:
    """The clear error for a call that found its backend gone from the server that owns the key
    (the twin's library flushed, a failover to a node without the module or the library), or
    None for any other error."""
    text = str(err)
    if backend is Backend.TWIN and text.startswith("ERR Function not found"):
        return ThrottleError("ERR " + TWIN_LOST)
    if backend is Backend.MODULE and text.startswith("ERR unknown command 'CL."):
        return ThrottleError("ERR " + MODULE_LOST)
    return None
