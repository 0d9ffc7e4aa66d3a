"""Real Flask apps with Flask-Limiter served on free loopback ports for the tests (werkzeug's
threaded server in a thread, or worker processes), and a count of redis-py's round trips.
(FastAPI with slowapi: asgi_apps.py.)"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

import redis.connection
from conftest import free_port


class RoundTrips:
    """Counts the round trips redis-py makes from this process (a pipeline is one)."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def counting(self) -> Iterator[RoundTrips]:
        original = redis.connection.AbstractConnection.send_packed_command
        counter = self

        def send(conn: Any, command: Any, check_health: bool = True) -> None:
            with counter._lock:
                counter.count += 1
            original(conn, command, check_health)

        redis.connection.AbstractConnection.send_packed_command = send  # type: ignore[method-assign]
        try:
            yield self
        finally:
            redis.connection.AbstractConnection.send_packed_command = original  # type: ignore[method-assign]


def flask_app(storage_uri: str, strategy: str, limit: str = "5/minute", **options: Any) -> Any:
    import flask
    from flask_limiter import Limiter
    from flask_limiter.util import get_remote_address

    import redis_throttle.limits  # noqa: F401  (the one line: registers redis+throttle://)

    app = flask.Flask("throttled")
    limiter = Limiter(
        get_remote_address, app=app, storage_uri=storage_uri, strategy=strategy, **{"headers_enabled": True, **options}
    )

    @app.route("/")
    @limiter.limit(limit)
    def index() -> str:
        return "ok"

    @app.route("/login", methods=["POST"])
    @limiter.limit(limit, deduct_when=lambda response: response.status_code == 401)
    def login() -> tuple[str, int]:
        return "wrong password", 401  # (every login fails: each counts)

    app.extensions["test_limiter"] = limiter
    return app


@contextlib.contextmanager
def serve_flask(app: Any) -> Iterator[str]:
    from werkzeug.serving import make_server

    port = free_port()
    server = make_server("127.0.0.1", port, app, threaded=True)
    server.socket.listen(1024)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.shutdown()
        thread.join(10)


@contextlib.contextmanager
def flask_workers(count: int, uris: dict[str, str], limit: str, prefix: str) -> Iterator[list[str]]:
    """``count`` worker processes of the Flask app (tests/worker.py: each named storage URI and
    strategy under ``/NAME/STRATEGY``), as a pre-forking server runs them: their URLs, once each
    listens."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).with_name("worker.py")
    procs, urls = [], []
    try:
        for _ in range(count):
            port = free_port()
            proc = subprocess.Popen(
                [sys.executable, str(script), str(port), limit, prefix, *(f"{k}={v}" for k, v in uris.items())],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            procs.append(proc)
            urls.append(f"http://127.0.0.1:{port}")
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready", "a worker did not start"
        yield urls
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(10)
