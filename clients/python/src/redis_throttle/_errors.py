"""The package's error type, in a module of its own: the core and the twin's loader both raise it."""

from __future__ import annotations

from redis.exceptions import ResponseError


class ThrottleError(ResponseError):
    """(A ``redis.ResponseError``.) An error the server replied (its own text, e.g. ``ERR limit must be …``), or a call
    refused before sending (keys of one decision in different hash slots, a module-only
    command on a server that runs the Functions twin)."""
