"""The test servers, standard library only (the matrix runner starts them before any venv
exists): redis-server processes on free loopback ports, with the module (THROTTLE_MODULE, else
target/release/libredis_throttle.so), with only the Functions twin (functions/throttle.lua
through FUNCTION LOAD), 3-primary clusters with the module on every node, one of them over TLS
only (certificates made with openssl).

`tests/matrix.py` starts one set for every row of the matrix and names them in the file that
THROTTLE_TEST_SERVERS points to; conftest.py then attaches to those instead of starting its own."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[3]
SERVER = os.environ.get("THROTTLE_SERVER", "redis-server")
CLI = os.environ.get("THROTTLE_CLI", "redis-cli")


def module_path() -> Path:
    path = Path(os.environ.get("THROTTLE_MODULE") or ROOT / "target/release/libredis_throttle.so")
    if not path.is_file():
        raise SystemExit(f"no module at {path}: run `cargo build --release --lib` or set THROTTLE_MODULE")
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


def wait_until(what: str, timeout: float, ok: Callable[[], bool]) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


class Tls:
    """A CA and a certificate for ``san`` (127.0.0.1 by default) signed by it (openssl), in ``folder``."""

    def __init__(self, folder: Path, san: str = "IP:127.0.0.1") -> None:
        self.folder, self.san = folder, san
        self.ca, self.cert, self.key = folder / "ca.crt", folder / "server.crt", folder / "server.key"
        if not self.cert.exists():
            self._make()

    def _make(self) -> None:
        def openssl(*args: str) -> None:
            subprocess.run(["openssl", *args], cwd=self.folder, check=True, capture_output=True, timeout=60)

        # With the extensions Python 3.13's strict verification asks of a CA and a server's
        # certificate (key usages, key identifiers, the address as a subject name); the nodes
        # present theirs to each other on the cluster bus too (clientAuth).
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "3"]
        ca_ext = ["-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"]
        openssl("req", "-x509", *ec, *ca_ext, "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=rt-test-ca")
        openssl("req", *ec[:-2], "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
        (self.folder / "server.ext").write_text(
            f"subjectAltName={self.san}\nbasicConstraints=critical,CA:FALSE\n"
            "keyUsage=critical,digitalSignature,keyAgreement\nextendedKeyUsage=serverAuth,clientAuth\n"
            "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n"
        )
        openssl(
            "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "server.crt", "-days", "3", "-extfile", "server.ext",
        )  # fmt: skip


class Server:
    """A redis-server process (of this session, or attached to: see ``attach``)."""

    def __init__(
        self, kind: str, cluster: bool = False, args: tuple[str, ...] = (), tls: Tls | None = None, start: bool = True
    ) -> None:
        self.kind = kind  # "module" or "twin"
        self.cluster = cluster
        self.args = args  # more server arguments (the bench's floor module)
        self.tls = tls  # TLS only (no plain port)
        self.dir = Path(tempfile.mkdtemp(prefix=f"rt-py-{kind}-")) if start else Path()
        self.port = free_port(cluster) if start else 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.owned = start
        if start:
            self.start()

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "port": self.port, "dir": str(self.dir), "cluster": self.cluster}

    @classmethod
    def attach(cls, info: dict[str, Any], tls: Tls | None = None) -> Server:
        """A server another process started (the matrix runner's): used, never stopped."""
        server = cls(info["kind"], cluster=info["cluster"], tls=tls, start=False)
        server.port, server.dir = info["port"], Path(info["dir"])
        return server

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def cli(self, *args: str, stdin: bytes | None = None) -> str:
        tls = ["--tls", "--cacert", str(self.tls.ca)] if self.tls else []
        out = subprocess.run(
            [CLI, "-h", "127.0.0.1", "-p", str(self.port), *tls, *args],
            input=stdin,
            capture_output=True,
            timeout=30,
        )
        return out.stdout.decode(errors="replace").strip()

    def start(self) -> None:
        args = [SERVER, "--bind", "127.0.0.1", "--dir", str(self.dir), "--save", "", "--appendonly", "no"]
        args += ["--logfile", "server.log"]
        if self.tls:
            args += ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file", str(self.tls.cert)]
            args += ["--tls-key-file", str(self.tls.key), "--tls-ca-cert-file", str(self.tls.ca)]
            args += ["--tls-auth-clients", "no", "--tls-cluster", "yes"]
        else:
            args += ["--port", str(self.port)]
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
                log = self.dir / "server.log"
                raise RuntimeError(f"redis-server exited: {log.read_text(errors='replace') if log.exists() else ''}")
            return self.cli("PING") == "PONG"

        wait_until(f"redis-server on {self.port}", 20, up)
        got = self.cli("CONFIG", "GET", "dir").splitlines()
        assert got and Path(got[-1]).resolve() == self.dir.resolve(), f"another server answers on {self.port}"
        if self.kind == "twin":
            self.start_functions()

    def start_functions(self) -> None:
        """FUNCTION LOAD of functions/throttle.lua (the twin)."""
        out = self.cli("-x", "FUNCTION", "LOAD", "REPLACE", stdin=(ROOT / "functions/throttle.lua").read_bytes())
        assert out == "throttle", out

    def client(self, **kw: Any) -> Any:
        """A ``redis.Redis`` on this server (redis-py is imported here: the runner has none)."""
        import redis

        if self.tls:
            kw = {"ssl": True, "ssl_ca_certs": str(self.tls.ca), **kw}
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5, **kw)

    def _signal(self, sig: int) -> None:
        assert self.proc is not None, "a server this session did not start is never signalled"
        self.proc.send_signal(sig)

    def pause(self) -> None:
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.owned:
            self.kill()
            shutil.rmtree(self.dir, ignore_errors=True)

    def command_calls(self, command: str) -> int:
        stats = self.client().info("commandstats").get(f"cmdstat_{command}")
        return int(stats["calls"]) if stats else 0


class Cluster:
    """Primaries with the module on every node, slots split evenly (``redis-cli --cluster``)."""

    def __init__(self, primaries: int = 3, tls: Tls | None = None, start: bool = True) -> None:
        self.tls = tls
        self.nodes: list[Server] = []
        if not start:
            return
        try:
            for _ in range(primaries):
                self.nodes.append(Server("module", cluster=True, tls=tls))
            tls_args = ["--tls", "--cacert", str(tls.ca)] if tls else []
            out = subprocess.run(
                [CLI, *tls_args, "--cluster", "create", *[f"127.0.0.1:{n.port}" for n in self.nodes]]
                + ["--cluster-replicas", "0", "--cluster-yes"],
                capture_output=True,
                timeout=60,
            )
            assert out.returncode == 0, out.stdout.decode() + out.stderr.decode()
            for n in self.nodes:
                wait_until("cluster_state:ok", 60, lambda n=n: "cluster_state:ok" in n.cli("CLUSTER", "INFO"))
        except BaseException:
            self.stop()
            raise

    def describe(self) -> list[dict[str, Any]]:
        return [n.describe() for n in self.nodes]

    @classmethod
    def attach(cls, nodes: list[dict[str, Any]], tls: Tls | None = None) -> Cluster:
        cluster = cls(tls=tls, start=False)
        cluster.nodes = [Server.attach(n, tls) for n in nodes]
        return cluster

    @property
    def uri_hosts(self) -> str:
        return ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def client(self, **kw: Any) -> Any:
        import redis

        if self.tls:
            kw = {"ssl": True, "ssl_ca_certs": str(self.tls.ca), **kw}
        return redis.RedisCluster(host="127.0.0.1", port=self.nodes[0].port, **kw)

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()


class Servers:
    """The servers every test may share: the module, the twin, a cluster, a TLS cluster."""

    def __init__(self, module: Server, twin: Server, cluster: Cluster, tls_cluster: Cluster, tls: Tls) -> None:
        self.module, self.twin, self.cluster, self.tls_cluster, self.tls = module, twin, cluster, tls_cluster, tls

    @classmethod
    def start(cls, folder: Path) -> Servers:
        """Every server at once (each cluster takes seconds to form); on a failure, those
        started are stopped."""
        tls = Tls(folder)
        makers: dict[str, Callable[[], Any]] = {
            "module": lambda: Server("module"),
            "twin": lambda: Server("twin"),
            "cluster": lambda: Cluster(3),
            "tls_cluster": lambda: Cluster(3, tls=tls),
        }
        made: dict[str, Any] = {}
        errors: list[BaseException] = []

        def make(name: str) -> None:
            try:
                made[name] = makers[name]()
            except BaseException as err:  # (raised below)
                errors.append(err)

        threads = [threading.Thread(target=make, args=(name,)) for name in makers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            for server in made.values():
                server.stop()
            shutil.rmtree(folder, ignore_errors=True)
            raise errors[0]
        return cls(made["module"], made["twin"], made["cluster"], made["tls_cluster"], tls)

    def save(self, path: Path) -> None:
        info = {
            "module": self.module.describe(),
            "twin": self.twin.describe(),
            "cluster": self.cluster.describe(),
            "tls_cluster": self.tls_cluster.describe(),
            "tls": str(self.tls.folder),
        }
        path.write_text(json.dumps(info))

    @classmethod
    def load(cls, path: Path) -> Servers:
        info = json.loads(path.read_text())
        tls = Tls(Path(info["tls"]))
        return cls(
            Server.attach(info["module"]),
            Server.attach(info["twin"]),
            Cluster.attach(info["cluster"]),
            Cluster.attach(info["tls_cluster"], tls),
            tls,
        )

    def stop(self) -> None:
        for s in (self.module, self.twin, self.cluster, self.tls_cluster):
            s.stop()
        shutil.rmtree(self.tls.folder, ignore_errors=True)
