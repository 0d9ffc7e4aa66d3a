"""The shared vectors (tests/vectors at the repository's root, read by every language's tests):
the replies this package decodes, the error texts it gives before sending (the module's own),
and the twin loader's protocol. No server."""

from __future__ import annotations

import json
from typing import Any

import pytest
from servers import ROOT

from redis_throttle import ThrottleError
from redis_throttle._core import Decision, all_decision, decision
from redis_throttle._storage import window_ms
from redis_throttle._twin import _find_library, _plan, compare_versions, twin_library, twin_version

VECTORS = ROOT / "tests" / "vectors"


def read(name: str) -> Any:
    return json.loads((VECTORS / name).read_text())


def neutral(d: Decision) -> dict[str, Any]:
    """A decision as the vectors state it: times in ms, -1 for none."""

    def ms(seconds: float) -> int:
        return -1 if seconds < 0 else round(seconds * 1000)

    return {
        "limited": d.limited,
        "limit": d.limit,
        "remaining": d.remaining,
        "retry_after_ms": ms(d.retry_after),
        "reset_after_ms": ms(d.reset_after),
    }


@pytest.mark.parametrize("vector", read("replies.json")["decode"], ids=lambda v: json.dumps(v["reply"]))
def test_replies_decode_as_the_vectors_say(vector: dict[str, Any]) -> None:
    def decode() -> dict[str, Any]:
        if vector["what"] == "five":
            return neutral(decision(vector["reply"]))
        d = all_decision(vector["reply"], vector["count"])
        return {**neutral(d), "binding": d.binding, "details": [neutral(x) for x in d.details]}

    if "error" in vector:
        with pytest.raises(ThrottleError):
            decode()
    else:
        assert decode() == vector["decoded"]


def test_the_window_error_given_before_sending_is_the_modules() -> None:
    """limits' storage refuses a window no command takes with the module's own text."""
    errors = {" ".join(v["call"]): v["error"] for v in read("errors.json")["errors"]}
    with pytest.raises(ThrottleError) as err:
        window_ms(1_000_000_001)  # seconds: 10^12 + 1000 ms
    assert str(err.value) == errors["CL.COUNTER k 1 1000000000001 MS"]


@pytest.mark.parametrize("vector", read("twin-loader.json")["versions"], ids=lambda v: f"{v['a']}~{v['b']}")
def test_versions_compare_as_the_vectors_say(vector: dict[str, Any]) -> None:
    assert compare_versions(vector["a"], vector["b"]) == vector["order"]


def test_the_loader_plans_as_the_vectors_say() -> None:
    loader = read("twin-loader.json")
    library, version = twin_library(), twin_version()
    for p in loader["plans"]:
        before = {"none": None, "unversioned": "unversioned", "same": version}.get(p["found"])
        before = loader["found_versions"].get(p["found"], before)
        code = library if p["same_code"] else (None if p["found"] == "none" else "#!lua name=throttle\n-- another")
        got = _plan(before, code, library, version, p["force"])
        assert (got if isinstance(got, str) else "refused") == p["action"], p


@pytest.mark.parametrize("vector", read("twin-loader.json")["function_list"], ids=lambda v: json.dumps(v["reply"])[:40])
def test_function_list_replies_read_as_the_vectors_say(vector: dict[str, Any]) -> None:
    found = _find_library(vector["reply"])
    want = vector["library"]
    assert (None if found is None else {"code": found[0], "functions": found[1]}) == want
