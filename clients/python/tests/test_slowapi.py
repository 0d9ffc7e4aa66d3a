"""A real FastAPI app with slowapi on `storage_uri="redis+throttle://…"`, driven over HTTP by
a thousand asyncio tasks."""

from __future__ import annotations

import asyncio
import time

import httpx
from apps import fastapi_app, serve_asgi

STRATEGY = {"module": "fixed-window", "twin": "moving-window", "cluster": "moving-window"}


def test_a_thousand_concurrent_tasks_admit_exactly_five_with_the_documented_headers(
    storage_uri: str, backend: str
) -> None:
    app = fastapi_app(storage_uri, STRATEGY[backend])

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
    assert sorted(int(r.headers["X-RateLimit-Remaining"]) for r in ok) == [0, 1, 2, 3, 4]
    now = time.time()
    for r in responses:  # (a reset after the request was made, at most a window on)
        assert r.headers["X-RateLimit-Limit"] == "5"
        assert began <= float(r.headers["X-RateLimit-Reset"]) <= now + 62
    for r in refused:
        assert r.json() == {"error": "Rate limit exceeded: 5 per 1 minute"}
        assert 0 <= int(r.headers["Retry-After"]) <= 60
