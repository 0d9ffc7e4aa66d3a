"""A real Flask app with Flask-Limiter on `storage_uri="redis+throttle://…"`, driven over HTTP."""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from apps import RoundTrips, flask_app, serve_flask

STRATEGY = {"module": "moving-window", "twin": "fixed-window", "cluster": "sliding-window-counter"}


def test_a_thousand_concurrent_requests_admit_exactly_five_with_the_documented_headers(
    storage_uri: str, backend: str
) -> None:
    app = flask_app(storage_uri, STRATEGY[backend], key_prefix=f"flask{time.time_ns()}")
    began = int(time.time())
    with serve_flask(app) as url, httpx.Client(base_url=url, limits=httpx.Limits(max_connections=64)) as http:
        with ThreadPoolExecutor(64) as pool:
            responses = list(pool.map(lambda _: http.get("/"), range(1000)))
    ok = [r for r in responses if r.status_code == 200]
    refused = [r for r in responses if r.status_code == 429]
    assert len(ok) == 5 and len(refused) == 995
    # Each admitted request's headers describe the limit after its own hit.
    assert sorted(int(r.headers["X-RateLimit-Remaining"]) for r in ok) == [0, 1, 2, 3, 4]
    now = time.time()
    for r in responses:  # (a reset after the request was made, at most a window on)
        assert r.headers["X-RateLimit-Limit"] == "5"
        assert began <= int(r.headers["X-RateLimit-Reset"]) <= now + 62
    for r in refused:
        assert r.headers["X-RateLimit-Remaining"] == "0"
        assert 0 <= int(r.headers["Retry-After"]) <= 60
        assert "5 per 1 minute" in r.text


@pytest.mark.parametrize("strategy", ["fixed-window", "moving-window", "sliding-window-counter"])
def test_one_round_trip_per_request_headers_included(module_server, strategy: str) -> None:  # type: ignore[no-untyped-def]
    app = flask_app(
        f"redis+throttle://127.0.0.1:{module_server.port}", strategy, limit="3/minute", key_prefix=f"rt{time.time_ns()}"
    )
    with serve_flask(app) as url, httpx.Client(base_url=url) as http:
        assert http.get("/").status_code == 200  # connects and detects the server
        with RoundTrips().counting() as trips:
            statuses = [http.get("/").status_code for _ in range(6)]
    assert statuses == [200, 200, 429, 429, 429, 429]
    assert trips.count == 6


def _down(server, how: str) -> None:  # type: ignore[no-untyped-def]
    if how == "paused":
        server.pause()
    else:
        server.kill()


@pytest.mark.parametrize("how", ["paused", "killed"])
def test_in_memory_fallback_takes_over_while_redis_is_down(own_server, how: str, caplog) -> None:  # type: ignore[no-untyped-def]
    app = flask_app(
        f"redis+throttle://127.0.0.1:{own_server.port}",
        "moving-window",
        in_memory_fallback=["2/minute"],
        storage_options={"socket_timeout": 0.3, "socket_connect_timeout": 0.3},
    )
    with serve_flask(app) as url, httpx.Client(base_url=url, timeout=10) as http:
        assert [http.get("/").status_code for _ in range(2)] == [200, 200]
        _down(own_server, how)
        with caplog.at_level(logging.WARNING):
            statuses = [http.get("/").status_code for _ in range(3)]
        # Documented: when the storage is unreachable, the fallback limits apply in memory.
        assert statuses == [200, 200, 429]
        assert any("falling back to in-memory storage" in m for m in caplog.messages)
        if how == "paused":
            own_server.resume()


@pytest.mark.parametrize("how", ["paused", "killed"])
def test_swallow_errors_lets_requests_through_and_without_it_they_fail(own_server, how: str) -> None:  # type: ignore[no-untyped-def]
    uri = f"redis+throttle://127.0.0.1:{own_server.port}"
    opts = {"socket_timeout": 0.3, "socket_connect_timeout": 0.3}
    swallowing = flask_app(uri, "fixed-window", swallow_errors=True, storage_options=opts)
    strict = flask_app(uri, "fixed-window", storage_options=opts)
    with serve_flask(swallowing) as url1, serve_flask(strict) as url2, httpx.Client(timeout=10) as http:
        assert http.get(url1).status_code == 200 and http.get(url2).status_code == 200
        _down(own_server, how)
        assert [http.get(url1).status_code for _ in range(7)] == [200] * 7  # beyond the limit of 5: not limited
        assert http.get(url2).status_code == 500
        if how == "paused":
            own_server.resume()
