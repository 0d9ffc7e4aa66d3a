"""DEBIT through the typed clients (``debit=True``) on the module, the twin alone and a cluster,
sync and asyncio, and the token-budgets guide's Python example, run as written."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
import redis.asyncio
from conftest import ROOT, aclose

import redis_throttle.asyncio
from redis_throttle import CounterLimit, Throttle, ThrottleError, WindowLimit


def test_a_debit_counts_past_the_limit_and_checks_are_refused_until_repaid(sync_client, key: str) -> None:  # type: ignore[no-untyped-def]
    t = Throttle(sync_client)
    assert not t.window(key, 10, 60, quantity=0).limited
    d = t.window(key, 10, 60, quantity=25, debit=True)
    # Counted although it overdrew (more than the limit: never admissible as one take).
    assert (d.limited, d.limit, d.remaining, d.retry_after) == (True, 10, 0, -1.0)
    assert 59 < d.reset_after <= 60
    assert t.window(key, 10, 60, quantity=0).limited and t.window(key, 10, 60).limited
    c = key + ":c"
    fits = t.counter(c, 10, 60, quantity=4, debit=True)
    assert (fits.limited, fits.remaining, fits.retry_after) == (False, 6, -1.0)
    assert t.counter(c, 10, 60, quantity=10, debit=True).limited
    assert int(sync_client.get(c)) == 14
    assert t.counter(c, 10, 60, quantity=0).limited
    g = key + ":g"
    assert not t.throttle(g, 4, 5, 5, quantity=0, debit=True).limited  # (a debit of 0: a check)
    with pytest.raises(ThrottleError, match="^ERR DEBIT takes a quantity of 0 or more"):
        t.throttle(g, 4, 5, 5, quantity=-1, debit=True)
    assert sync_client.exists(g) == 0
    with pytest.raises(ThrottleError, match="debit must be True or False"):
        t.counter(c, 10, 60, debit=1)  # type: ignore[arg-type]


def test_all_debits_every_limiter_overdrawn_or_not(request, backend: str, key: str) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        if backend == "cluster":
            node = request.getfixturevalue("cluster").nodes[0]
            client: Any = redis.asyncio.RedisCluster(host="127.0.0.1", port=node.port)
        else:
            client = redis.asyncio.Redis(port=request.getfixturevalue(f"{backend}_server").port)
        t = redis_throttle.asyncio.Throttle(client)
        calls = [(key + ":w", WindowLimit(10, 60, quantity=3)), (key + ":c", CounterLimit(5, 60, quantity=3))]
        assert not (await t.all(calls, debit=True)).limited
        d = await t.all(calls, debit=True)
        assert d.limited and d.binding == 1
        assert [x.remaining for x in d.details] == [4, 0]
        assert int(await client.get(key + ":c")) == 6
        assert (await t.counter(key + ":c", 5, 60, quantity=1, debit=True)).limited
        await aclose(client)

    asyncio.run(main())


def guide_example() -> str:
    page = (ROOT / "docs/src/guides/token-budgets.md").read_text()
    section = page.split("\n## From Python\n", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"```python\n(.*?)```", section, flags=re.S)
    assert found, 'docs/src/guides/token-budgets.md has a ```python block under "## From Python"'
    return found.group(1)


@pytest.mark.alone  # (the example's key is its own)
def test_the_token_budgets_example_runs_as_written(module_server) -> None:  # type: ignore[no-untyped-def]
    module_server.client().delete("tokens:ann")

    def call_model(prompt: str) -> dict[str, Any]:
        return {"text": f"re: {prompt}", "usage": {"total_tokens": 150_000}}

    scope: dict[str, Any] = {"__name__": "docs_example", "call_model": call_model}
    exec(guide_example().replace("localhost", "127.0.0.1").replace("6379", str(module_server.port)), scope)
    # The first request fits the budget; its real count (150,000 tokens) overdraws it.
    assert scope["answer"]("ann", "hello")[0] == 200
    status, text = scope["answer"]("ann", "again")
    assert status == 429 and re.fullmatch(r"retry in \d+ s", text)
    assert int(module_server.client().exists("tokens:ann")) == 1
