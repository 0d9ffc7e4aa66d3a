"""A real FastAPI app with slowapi on `storage_uri="redis+throttle://…"`, driven over HTTP by
a thousand asyncio tasks."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from asgi_apps import fastapi_app, serve_asgi

STRATEGY = {"module": "fixed-window", "twin": "moving-window", "cluster": "moving-window"}


def test_a_thousand_concurrent_tasks_admit_exactly_five_with_the_documented_headers(
    storage_uri: str, backend: str
) -> None:
    app = fastapi_app(storage_uri, STRATEGY[backend], key_prefix=f"slowapi{time.time_ns()}")

    async def drive(url: str) -> list[httpx.Response]:
        # A thousand tasks at once; at most 20 requests in flight (httpx's pool slows down
        # sharply with hundreds of waiters).
        async with httpx.AsyncClient(base_url=url, limits=httpx.Limits(max_connections=20), timeout=60) as http:
            in_flight = asyncio.Semaphore(20)

            async def get() -> httpx.Response:
                async with in_flight:
                    return await http.get("/")

            return await asyncio.gather(*(get() for _ in range(1000)))

    began = int(time.time())
    with serve_asgi(app) as url:
        responses = asyncio.run(drive(url))
    ok = [r for r in responses if r.status_code == 200]
    refused = [r for r in responses if r.status_code == 429]
    assert len(ok) == 5 and len(refused) == 995
    assert all(0 <= int(r.headers["X-RateLimit-Remaining"]) <= 4 for r in ok)
    now = time.time()
    for r in responses:  # (a reset after the request was made, at most a window on)
        assert r.headers["X-RateLimit-Limit"] == "5"
        assert began <= float(r.headers["X-RateLimit-Reset"]) <= now + 62
    for r in refused:
        assert r.json() == {"error": "Rate limit exceeded: 5 per 1 minute"}
        assert 0 <= int(r.headers["Retry-After"]) <= 60


def _get(app, count: int) -> list[httpx.Response]:  # type: ignore[no-untyped-def]
    """``count`` GET / in turn, in process (httpx's ASGI transport)."""

    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as http:
            return [await http.get("/") for _ in range(count)]

    return asyncio.run(run())


@pytest.mark.parametrize("strategy", ["fixed-window", "moving-window", "sliding-window-counter"])
def test_retry_after_is_never_before_the_next_admission(storage_uri: str, strategy: str) -> None:
    """As with Flask-Limiter: three per ten seconds, all at once; slowapi rounds down too."""
    began = time.time()
    app = fastapi_app(storage_uri, strategy, limit="3 per 10 seconds", key_prefix=f"ra{time.time_ns()}")
    *admitted, refused = _get(app, 4)
    assert [r.status_code for r in admitted] == [200] * 3
    longest = 11 if strategy == "sliding-window-counter" else 10
    assert refused.status_code == 429
    assert 9 <= int(refused.headers["Retry-After"]) <= longest + 1
    assert began + 9 <= float(refused.headers["X-RateLimit-Reset"]) <= time.time() + longest + 2


@pytest.mark.parametrize("swallow_errors", [False, True])
def test_a_limit_of_zero_refuses_every_request(storage_uri: str, swallow_errors: bool) -> None:
    for strategy in ("fixed-window", "moving-window", "sliding-window-counter"):
        prefix = f"zero{time.time_ns()}"
        app = fastapi_app(storage_uri, strategy, limit="0/minute", swallow_errors=swallow_errors, key_prefix=prefix)
        assert [r.status_code for r in _get(app, 3)] == [429] * 3, strategy
