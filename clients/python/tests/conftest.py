"""Real servers for the tests (tests/servers.py): the module, only the Functions twin, a
3-primary cluster with the module on every node, and the same cluster over TLS only. The matrix
runner (tests/matrix.py) starts them once for every row and names them in the file
THROTTLE_TEST_SERVERS points to; without it, each is started on first use and stopped at the
end of the session."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

import pytest
from redis.crc import key_slot
from servers import ROOT, Cluster, Server, Servers, Tls, free_port, wait_until

__all__ = ["ROOT", "Cluster", "Server", "aclose", "free_port", "move_slot", "wait_until"]

T = TypeVar("T")
SHARED = Servers.load(Path(os.environ["THROTTLE_TEST_SERVERS"])) if os.environ.get("THROTTLE_TEST_SERVERS") else None


def _shared_or(make: Callable[[], T], pick: Callable[[Servers], Any]) -> Iterator[T]:
    if SHARED is not None:
        yield pick(SHARED)
        return
    made = make()
    yield made
    made.stop()  # type: ignore[attr-defined]


@contextlib.contextmanager
def _turn(alone: bool) -> Iterator[None]:
    """Rows of the matrix run at once on the shared servers: a test marked ``alone`` (it counts
    a server's commands, or changes what every test sees) runs while no other does; the others
    run together. Two flock(2) locks in the servers' folder, a turnstile first, so a test
    waiting to run alone is not starved by the others."""
    folder = Path(os.environ["THROTTLE_TEST_SERVERS"]).parent
    with open(folder / "turnstile.lock", "a") as gate, open(folder / "servers.lock", "a") as servers:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(servers, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            if not alone:
                fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(servers, fcntl.LOCK_UN)
            if alone:
                fcntl.flock(gate, fcntl.LOCK_UN)


@pytest.fixture(autouse=True)
def _shared_servers_turn(request: pytest.FixtureRequest) -> Iterator[None]:
    if SHARED is None:
        yield
        return
    with _turn(request.node.get_closest_marker("alone") is not None):
        yield


async def aclose(client: Any) -> None:
    """Closes an asyncio client (``close()`` before redis-py 5.0.1, which added ``aclose()``)."""
    await (client.aclose() if hasattr(client, "aclose") else client.close())


@pytest.fixture(scope="session")
def module_server() -> Iterator[Server]:
    yield from _shared_or(lambda: Server("module"), lambda s: s.module)


@pytest.fixture(scope="session")
def twin_server() -> Iterator[Server]:
    yield from _shared_or(lambda: Server("twin"), lambda s: s.twin)


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    yield from _shared_or(lambda: Cluster(3), lambda s: s.cluster)


@pytest.fixture(scope="session")
def tls_cluster() -> Iterator[Cluster]:
    """A 3-primary cluster that speaks TLS only (its CA: ``tls_cluster.tls.ca``)."""
    if SHARED is not None:
        yield SHARED.tls_cluster
        return
    folder = Path(tempfile.mkdtemp(prefix="rt-py-tls-"))
    made = Cluster(3, tls=Tls(folder))
    yield made
    made.stop()
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def own_server() -> Iterator[Server]:
    """A server of the test's own (it pauses or kills it)."""
    s = Server("module")
    yield s
    s.stop()


@pytest.fixture
def own_twin() -> Iterator[Server]:
    """A server with only the twin, of the test's own (it flushes its functions)."""
    s = Server("twin")
    yield s
    s.stop()


@pytest.fixture(params=["module", "twin", "cluster"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def storage_uri(request: pytest.FixtureRequest, backend: str) -> str:
    """A `redis+throttle` URI on the backend's server."""
    if backend == "cluster":
        c = request.getfixturevalue("cluster")
        return f"redis+throttle+cluster://{c.uri_hosts}"
    s = request.getfixturevalue(f"{backend}_server")
    return f"redis+throttle://127.0.0.1:{s.port}"


@pytest.fixture
def sync_client(request: pytest.FixtureRequest, backend: str):  # type: ignore[no-untyped-def]
    if backend == "cluster":
        return request.getfixturevalue("cluster").client()
    return request.getfixturevalue(f"{backend}_server").client()


@pytest.fixture
def servers_of(request: pytest.FixtureRequest, backend: str) -> list[Server]:
    """The backend's server processes (a cluster's nodes)."""
    if backend == "cluster":
        return list(request.getfixturevalue("cluster").nodes)
    return [request.getfixturevalue(f"{backend}_server")]


@pytest.fixture
def key() -> str:
    """A fresh key (tagged, so several keys derived from it share one slot)."""
    return f"{{t{uuid.uuid4().hex[:12]}}}:k"


def empty_slot_prefix(cluster: Cluster, stem: str, key: Callable[[str], str]) -> str:
    """A prefix ``stem<random>`` whose key ``key(prefix)`` hashes to a slot in which no node holds
    a key: move_slot can only move an empty slot, and other tests' keys outlive them (a test
    that moves a slot runs alone, so the slot stays empty until it moves)."""
    for _ in range(1000):
        prefix = f"{stem}{uuid.uuid4().hex[:8]}"
        slot = key_slot(key(prefix).encode())
        if all(n.client().execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == 0 for n in cluster.nodes):
            return prefix
    raise AssertionError(f"no empty slot for {stem}… in 1,000 tries")


def move_slot(cluster: Cluster, t: Any, key: str) -> tuple[Server, Server]:
    """Moves the (empty) slot of ``key`` from its owner to another primary behind the client's
    back (the client ``t`` holds the old map); (old owner, new owner)."""
    slot = key_slot(key.encode())
    owner = next(n for n in cluster.nodes if n.port == t.client.get_node_from_key(key).port)
    target = next(n for n in cluster.nodes if n is not owner)
    target_id = target.client().cluster("myid")
    target_id = target_id.decode() if isinstance(target_id, bytes) else target_id
    # The newest config epoch on the new owner first: a claim the old owner gossips before it
    # hears of the move then loses against the new owner's (with an older epoch, the new owner
    # would hand the slot back and no node would settle on it).
    target.client().execute_command("CLUSTER", "BUMPEPOCH")
    for n in [target, owner] + [n for n in cluster.nodes if n not in (owner, target)]:
        n.client().execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)

    def settled() -> bool:
        for n in cluster.nodes:
            owners = [s for s in n.client().execute_command("CLUSTER", "SLOTS") if s[0] <= slot <= s[1]]
            if not owners or owners[0][2][1] != target.port:
                return False
        return True

    wait_until(f"slot {slot} on port {target.port} everywhere", 20, settled)
    return owner, target
