"""A real Flask app with Flask-Limiter on `storage_uri="redis+throttle://…"`, driven over HTTP."""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

import httpx
import pytest
from apps import RoundTrips, flask_app, flask_workers, serve_flask

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
    # Each admitted request's headers are read from the server after its own hit (other hits
    # may have come between): never more than its hit left.
    assert all(0 <= int(r.headers["X-RateLimit-Remaining"]) <= 4 for r in ok)
    now = time.time()
    # A reset after the request was made, at most a window on; the sliding window counter's
    # units leave at the end of their bucket (a tenth of the window), up to 66 s after a hit.
    longest = 66 if STRATEGY[backend] == "sliding-window-counter" else 60
    for r in responses:
        assert r.headers["X-RateLimit-Limit"] == "5"
        assert began <= int(r.headers["X-RateLimit-Reset"]) <= now + longest + 2
    for r in refused:
        assert r.headers["X-RateLimit-Remaining"] == "0"
        assert 0 <= int(r.headers["Retry-After"]) <= longest
        assert "5 per 1 minute" in r.text


def _trips(storage_uri: str, strategy: str, headers: bool) -> tuple[list[int], int]:
    """Six requests against "3/minute" after a first one: their statuses, and the round trips
    they made to Redis."""
    app = flask_app(storage_uri, strategy, limit="3/minute", key_prefix=f"rt{time.time_ns()}", headers_enabled=headers)
    http = app.test_client()
    assert http.get("/").status_code == 200  # connects and detects the server
    with RoundTrips().counting() as trips:
        statuses = [http.get("/").status_code for _ in range(6)]
    return statuses, trips.count


@pytest.mark.parametrize("backend", ["module", "twin", "cluster"])
@pytest.mark.parametrize("strategy", ["fixed-window", "moving-window", "sliding-window-counter"])
def test_one_round_trip_per_decision_and_headers_read_as_limits_own_storage_reads(
    storage_uri: str, backend: str, strategy: str
) -> None:
    """A decision is one round trip. The headers are read from the server afterwards (a reply
    kept from the hit would be contradicted by a later test()), in no more round trips than
    limits' own Redis storage makes for them on the same server."""
    statuses, trips = _trips(storage_uri, strategy, headers=False)
    assert statuses == [200, 200, 429, 429, 429, 429] and trips == 6
    statuses, ours = _trips(storage_uri, strategy, headers=True)
    assert statuses == [200, 200, 429, 429, 429, 429]
    theirs_uri = storage_uri.replace("redis+throttle+cluster://", "redis+cluster://").replace(
        "redis+throttle://", "redis://"
    )
    statuses, theirs = _trips(theirs_uri, strategy, headers=True)
    assert statuses == [200, 200, 429, 429, 429, 429]
    print(f"round trips for six requests, headers on: ours {ours}, limits' own {theirs} ({backend}, {strategy})")
    assert 6 < ours <= theirs, (ours, theirs)


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


@pytest.fixture(scope="module")
def login_workers(module_server, twin_server, cluster) -> Iterator[list[str]]:  # type: ignore[no-untyped-def]
    """Two worker processes serving the login app on every backend (started once: a second each)."""
    uris = {
        "module": f"redis+throttle://127.0.0.1:{module_server.port}",
        "twin": f"redis+throttle://127.0.0.1:{twin_server.port}",
        "cluster": f"redis+throttle+cluster://{cluster.uri_hosts}",
    }
    with flask_workers(2, uris, "3/minute", f"login{time.time_ns()}") as urls:
        yield urls


def test_deduct_when_counts_every_workers_failed_logins(login_workers: list[str], backend: str) -> None:
    """Two worker processes (one thread each, as gunicorn's sync workers), failed logins
    against "3/minute" counted only when they fail (`deduct_when`), one worker then the other:
    each request's `test()` must see the other worker's hits, however recent."""
    with httpx.Client(timeout=10) as http:
        for strategy in ("fixed-window", "moving-window", "sliding-window-counter"):
            statuses = [http.post(f"{login_workers[i % 2]}/{backend}/{strategy}/login").status_code for i in range(8)]
            # Three failed logins are let through (and counted), then every other is refused.
            assert statuses == [401, 401, 401] + [429] * 5, strategy


@pytest.mark.parametrize("strategy", ["fixed-window", "moving-window", "sliding-window-counter"])
def test_retry_after_is_never_before_the_next_admission(storage_uri: str, strategy: str) -> None:
    """Three requests per ten seconds, all at once: the next is admitted ten seconds on (up to
    eleven for the sliding window counter, whose units leave at the end of their bucket).
    Flask-Limiter sends whole seconds, rounded down: at least 9."""
    prefix = f"ra{time.time_ns()}"
    workers = [flask_app(storage_uri, strategy, limit="3 per 10 seconds", key_prefix=prefix) for _ in range(2)]
    http, other = workers[0].test_client(), workers[1].test_client()
    began = time.time()
    assert [http.get("/").status_code for _ in range(3)] == [200] * 3
    assert [http.post("/login").status_code for _ in range(3)] == [401] * 3
    longest = 11 if strategy == "sliding-window-counter" else 10
    # A refused hit (its own reply), a refused hit on another worker, and a refused test() of a
    # login (deduct_when: a read of the server).
    for refused in (http.get("/"), other.get("/"), http.post("/login"), other.post("/login")):
        assert refused.status_code == 429
        assert 9 <= int(refused.headers["Retry-After"]) <= longest + 1
        assert began + 9 <= int(refused.headers["X-RateLimit-Reset"]) <= time.time() + longest + 1


@pytest.mark.parametrize("swallow_errors", [False, True])
def test_a_limit_of_zero_refuses_every_request(storage_uri: str, swallow_errors: bool) -> None:
    for strategy in ("fixed-window", "moving-window", "sliding-window-counter"):
        prefix = f"zero{time.time_ns()}"
        app = flask_app(storage_uri, strategy, limit="0/minute", swallow_errors=swallow_errors, key_prefix=prefix)
        http = app.test_client()
        assert [http.get("/").status_code for _ in range(3)] == [429] * 3, strategy


def test_a_lost_twin_library_fails_the_request_naming_the_fix(own_twin) -> None:  # type: ignore[no-untyped-def]
    from redis_throttle import ThrottleError
    from redis_throttle._core import LOAD_TWIN

    app = flask_app(f"redis+throttle://127.0.0.1:{own_twin.port}", "moving-window")
    app.testing = True  # (the app's exception reaches the test instead of a bare 500)
    http = app.test_client()
    assert http.get("/").status_code == 200
    own_twin.client().function_flush()
    with pytest.raises(ThrottleError, match="`throttle` is missing") as err:
        http.get("/")
    assert LOAD_TWIN in str(err.value)
    app.testing = False
    assert http.get("/").status_code == 500  # never admitted unlimited (swallow_errors is the app's to set)
    own_twin.start_functions()
    assert http.get("/").status_code == 200


def test_a_tls_cluster_uri_limits_over_tls(tls_cluster) -> None:  # type: ignore[no-untyped-def]
    app = flask_app(
        f"rediss+throttle+cluster://{tls_cluster.uri_hosts}",
        "moving-window",
        key_prefix=f"tls{time.time_ns()}",
        storage_options={"ssl_ca_certs": str(tls_cluster.tls.ca)},
    )
    http = app.test_client()
    assert [http.get("/").status_code for _ in range(6)] == [200] * 5 + [429]
