"""The book's Python page (docs/src/guides/python.md): each Python example runs against a real
server with the module (its `localhost:6379` pointed at the test's server)."""

from __future__ import annotations

import re

import pytest
from conftest import ROOT

PAGE = ROOT / "docs/src/guides/python.md"


def examples() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)


@pytest.mark.alone  # (the example's keys are its own: the same in every row)
def test_the_flask_example_limits_its_route(module_server) -> None:  # type: ignore[no-untyped-def]
    code = next(c for c in examples() if "flask_limiter" in c)
    for key in module_server.client().scan_iter(match="THROTTLE:LIMITER/*/5/1/minute"):
        module_server.client().delete(key)  # (a run of the example less than a minute ago)
    scope: dict[str, object] = {"__name__": "docs_example"}
    exec(code.replace("localhost:6379", f"127.0.0.1:{module_server.port}"), scope)
    client = scope["app"].test_client()  # type: ignore[attr-defined]
    statuses = [client.get("/search").status_code for _ in range(6)]
    assert statuses == [200] * 5 + [429]
    assert module_server.client().keys("THROTTLE:*")


@pytest.mark.alone
def test_the_client_example_runs(module_server) -> None:  # type: ignore[no-untyped-def]
    code = next(c for c in examples() if "from redis_throttle import" in c)
    module_server.client().delete("user:42:search", "rl:{user42}:minute", "rl:{user42}:day")
    code = code.replace('host="localhost", port=6379', f'host="127.0.0.1", port={module_server.port}')
    exec(code, {"__name__": "docs_example"})
    assert module_server.client().exists("rl:{user42}:minute", "rl:{user42}:day") == 2
