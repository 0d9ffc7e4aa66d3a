"""Real servers for the tests, started once per session on free loopback ports and stopped
at the end: one with the module (THROTTLE_MODULE, else target/release/libredis_throttle.so),
one with only the Functions twin (functions/throttle.lua through FUNCTION LOAD), and a
3-primary cluster with the module on every node."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest
import redis

ROOT = Path(__file__).resolve().parents[3]
SERVER = os.environ.get("THROTTLE_SERVER", "redis-server")
CLI = os.environ.get("THROTTLE_CLI", "redis-cli")


def module_path() -> Path:
    path = Path(os.environ.get("THROTTLE_MODULE") or ROOT / "target/release/libredis_throttle.so")
    if not path.is_file():
        pytest.exit(f"no module at {path}: run `cargo build --release --lib` or set THROTTLE_MODULE", 2)
    return path.resolve()


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def free_port(cluster: bool = False) -> int:
    for _ in range(1000):
        if cluster:
            port = random.randint(20_000, 55_535)
        else:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
        if _free(port) and (not cluster or (port <= 55_535 and _free(port + 10_000))):
            return port
    raise RuntimeError("no free loopback port")


def wait_until(what: str, timeout: float, ok) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


class Server:
    """A redis-server process of this test session."""

    def __init__(self, kind: str, cluster: bool = False, args: tuple[str, ...] = ()) -> None:
        self.kind = kind  # "module" or "twin"
        self.cluster = cluster
        self.args = args  # more server arguments (the bench's floor module)
        self.dir = Path(tempfile.mkdtemp(prefix=f"rt-py-{kind}-"))
        self.port = free_port(cluster)
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def start(self) -> None:
        args = [
            SERVER,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.dir),
            "--save",
            "",
            "--appendonly",
            "no",
            "--logfile",
            "server.log",
        ]
        if self.kind == "module":
            args += ["--loadmodule", str(module_path())]
        args += self.args
        if self.cluster:
            args += [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "2000",
            ]
        self.proc = subprocess.Popen(
            args, cwd=self.dir, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

        def up() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                log = (
                    (self.dir / "server.log").read_text(errors="replace") if (self.dir / "server.log").exists() else ""
                )
                raise RuntimeError(f"redis-server exited: {log}")
            try:
                return bool(self.client().ping())
            except redis.RedisError:
                return False

        wait_until(f"redis-server on {self.port}", 20, up)
        got = self.client().config_get("dir")["dir"]
        assert Path(got).resolve() == self.dir.resolve(), f"another server answers on {self.port}"
        if self.kind == "twin":
            self.start_functions()

    def start_functions(self) -> None:
        """FUNCTION LOAD of functions/throttle.lua (the twin)."""
        self.client().function_load((ROOT / "functions/throttle.lua").read_text(), replace=True)

    def client(self, **kw) -> redis.Redis:  # type: ignore[no-untyped-def]
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5, **kw)

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def command_calls(self, command: str) -> int:
        stats = self.client().info("commandstats").get(f"cmdstat_{command}")
        return int(stats["calls"]) if stats else 0


class Cluster:
    def __init__(self, primaries: int = 3) -> None:
        self.nodes = [Server("module", cluster=True) for _ in range(primaries)]
        out = subprocess.run(
            [
                CLI,
                "--cluster",
                "create",
                *[f"127.0.0.1:{n.port}" for n in self.nodes],
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            capture_output=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stdout.decode() + out.stderr.decode()
        for n in self.nodes:
            wait_until("cluster_state:ok", 60, lambda n=n: n.client().cluster("info")["cluster_state"] == "ok")

    @property
    def uri_hosts(self) -> str:
        return ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def client(self) -> redis.RedisCluster:
        return redis.RedisCluster(host="127.0.0.1", port=self.nodes[0].port)

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()


@pytest.fixture(scope="session")
def module_server() -> Iterator[Server]:
    s = Server("module")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def twin_server() -> Iterator[Server]:
    s = Server("twin")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    c = Cluster(3)
    yield c
    c.stop()


@pytest.fixture
def own_server() -> Iterator[Server]:
    """A server of the test's own (it pauses or kills it)."""
    s = Server("module")
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
def key() -> str:
    """A fresh key (tagged, so several keys derived from it share one slot)."""
    return f"{{t{uuid.uuid4().hex[:12]}}}:k"
