"""A real FastAPI app with slowapi, served by uvicorn in a thread on a free loopback port."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Iterator

from conftest import free_port
from fastapi import Request, Response  # (module level: FastAPI resolves the endpoint's annotations here)


def fastapi_app(storage_uri: str, strategy: str, limit: str = "5/minute", **options: Any) -> Any:
    from fastapi import FastAPI
    from slowapi import Limiter, _rate_limit_exceeded_handler
    from slowapi.errors import RateLimitExceeded
    from slowapi.util import get_remote_address

    import redis_throttle.limits  # noqa: F401

    limiter = Limiter(
        key_func=get_remote_address, storage_uri=storage_uri, strategy=strategy, **{"headers_enabled": True, **options}
    )
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
