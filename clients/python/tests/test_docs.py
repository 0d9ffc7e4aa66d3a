"""The book's Python page (docs/src/guides/python.md): each Python example runs against a real
server with the module (its `localhost:6379` pointed at the test's server), and its table of
tested versions names what the matrix's lockfiles pin."""

from __future__ import annotations

import asyncio
import re

import pytest
from conftest import ROOT

PAGE = ROOT / "docs/src/guides/python.md"


def examples() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)


def run(code: str, port: int) -> dict[str, object]:
    scope: dict[str, object] = {"__name__": "docs_example"}
    exec(code.replace("localhost:6379", f"127.0.0.1:{port}"), scope)
    return scope


def clear_example_keys(server, limit: str) -> None:  # type: ignore[no-untyped-def]
    for key in server.client().scan_iter(match=f"THROTTLE:LIMITER/*/{limit}"):
        server.client().delete(key)  # (a run of the example less than a minute ago)


@pytest.mark.alone  # (the example's keys are its own: the same in every row)
def test_the_flask_example_limits_its_route(module_server) -> None:  # type: ignore[no-untyped-def]
    clear_example_keys(module_server, "5/1/minute")
    scope = run(next(c for c in examples() if "flask_limiter" in c), module_server.port)
    client = scope["app"].test_client()  # type: ignore[attr-defined]
    statuses = [client.get("/search").status_code for _ in range(6)]
    assert statuses == [200] * 5 + [429]
    assert module_server.client().keys("THROTTLE:*")


@pytest.mark.alone
def test_the_slowapi_example_limits_its_route(module_server) -> None:  # type: ignore[no-untyped-def]
    import httpx

    clear_example_keys(module_server, "5/1/minute")
    app = run(next(c for c in examples() if "slowapi" in c), module_server.port)["app"]

    async def six() -> list[int]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app") as http:  # type: ignore[arg-type]
            return [(await http.get("/search")).status_code for _ in range(6)]

    assert asyncio.run(six()) == [200] * 5 + [429]


@pytest.mark.alone
def test_the_limits_example_runs(module_server) -> None:  # type: ignore[no-untyped-def]
    module_server.client().delete("THROTTLE:LIMITER/user42/5/1/minute")
    run(next(c for c in examples() if "MovingWindowRateLimiter(storage)" in c), module_server.port)
    assert module_server.client().exists("THROTTLE:LIMITER/user42/5/1/minute")


@pytest.mark.alone
def test_the_client_example_runs(module_server) -> None:  # type: ignore[no-untyped-def]
    code = next(c for c in examples() if "from redis_throttle import" in c)
    module_server.client().delete("user:42:search", "rl:{user42}:minute", "rl:{user42}:day")
    code = code.replace('host="localhost", port=6379', f'host="127.0.0.1", port={module_server.port}')
    exec(code, {"__name__": "docs_example"})
    assert module_server.client().exists("rl:{user42}:minute", "rl:{user42}:day") == 2


def test_the_tested_versions_are_what_the_lockfiles_pin() -> None:
    table = PAGE.read_text().split("<!-- python matrix")[1].split("<!-- end python matrix")[0]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines() if line.startswith("| ")]
    head, body = rows[0], rows[2:]
    for cells in body:
        row = dict(zip(head, cells))
        lock = (ROOT / f"clients/python/matrix/{row['row']}.txt").read_text()
        for package in ("limits", "redis", "Flask-Limiter", "slowapi"):
            if row[package] != "—":
                # (a pin for this row's Python: unconditional, or under a marker it meets)
                assert re.search(rf"^{package.lower()}=={re.escape(row[package])}( ;.*)?$", lock, re.M), (row, package)
