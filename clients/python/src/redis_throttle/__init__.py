"""redis-throttle for Python: a typed client for the redis-throttle module (or its Functions
twin) over redis-py, and a storage for ``limits`` (``redis_throttle.limits``)."""

from ._core import (
    AllDecision,
    Backend,
    BucketLimit,
    CounterLimit,
    Decision,
    Limit,
    PaceDecision,
    QuotaLimit,
    ThrottleLimit,
    WindowLimit,
)
from ._errors import ThrottleError
from ._sync import Throttle
from ._twin import TwinDowngradeError, TwinNode, TwinReport, TwinVersionWarning, load_twin, twin_library, twin_version

__all__ = [
    "AllDecision",
    "Backend",
    "BucketLimit",
    "CounterLimit",
    "Decision",
    "Limit",
    "PaceDecision",
    "QuotaLimit",
    "Throttle",
    "ThrottleError",
    "ThrottleLimit",
    "TwinDowngradeError",
    "TwinNode",
    "TwinReport",
    "TwinVersionWarning",
    "WindowLimit",
    "load_twin",
    "twin_library",
    "twin_version",
]
__version__ = "0.1.0"
