"""Real web apps served on free loopback ports for the tests: Flask with Flask-Limiter
(werkzeug's threaded server) and FastAPI with slowapi (uvicorn), each in a thread."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Iterator

import redis.connection
from conftest import free_port
from fastapi import Request, Response  # (module level: FastAPI resolves the endpoint's annotations here)


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
        get_remote_address, app=app, storage_uri=storage_uri, strategy=strategy, headers_enabled=True, **options
    )

    @app.route("/")
    @limiter.limit(limit)
    def index() -> str:
        return "ok"

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


def fastapi_app(storage_uri: str, strategy: str, limit: str = "5/minute") -> Any:
    from fastapi import FastAPI
    from slowapi import Limiter, _rate_limit_exceeded_handler
    from slowapi.errors import RateLimitExceeded
    from slowapi.util import get_remote_address

    import redis_throttle.limits  # noqa: F401

    limiter = Limiter(key_func=get_remote_address, storage_uri=storage_uri, strategy=strategy, headers_enabled=True)
    app = FastAPI()
    app.state.limiter = limiter
    app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)  # type: ignore[arg-type]

    @app.get("/")
    @limiter.limit(limit)
    async def index(request: Request, response: Response) -> dict[str, bool]:
        return {"ok": True}

    return app


@contextlib.contextmanager
def serve_asgi(app: Any) -> Iterator[str]:
    import uvicorn

    port = free_port()
    server = uvicorn.Server(
        # Idle connections stay open: on a loaded machine a pooled connection can sit idle past
        # uvicorn's default 5 s and be closed just as the client reuses it (a ReadError).
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=port,
            log_level="warning",
            backlog=2048,
            limit_concurrency=None,
            timeout_keep_alive=600,
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
