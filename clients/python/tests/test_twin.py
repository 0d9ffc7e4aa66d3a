"""The twin inside the package: ``load_twin`` (sync and asyncio) and ``python -m redis_throttle
twin load|print`` against plain servers (no module), servers holding an older, newer or
unversioned twin, and every primary of the 3-primary cluster; the warning for an outdated twin,
once; the error naming the loader command on a server with neither the module nor the twin."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import uuid
import warnings
from pathlib import Path
from typing import Iterator

import pytest
import redis
import redis.asyncio
from conftest import ROOT, Cluster, Server, aclose, free_port
from servers import Tls

import redis_throttle
from redis_throttle import (
    Throttle,
    ThrottleError,
    TwinDowngradeError,
    TwinNode,
    TwinVersionWarning,
    _twin,
    load_twin,
    twin_library,
    twin_version,
)
from redis_throttle.asyncio import Throttle as AsyncThrottle
from redis_throttle.asyncio import load_twin as load_twin_async

LIBRARY = ROOT / "functions/throttle.lua"
VERSION = re.search(r'^version = "(.+)"$', (ROOT / "clients/python/pyproject.toml").read_text(), re.M).group(1)  # type: ignore[union-attr]
# What the packaged library's cl_version answers once loaded (None for a library from before cl_version).
STATED = VERSION if "cl_version" in LIBRARY.read_text() else None


def fake(version: str | None) -> str:
    """A library `throttle` that only states `version` (None: one without cl_version, as twins before it)."""
    if version is None:
        return "#!lua name=throttle\nredis.register_function('cl_dummy', function() return 1 end)\n"
    return (
        "#!lua name=throttle\nredis.register_function{function_name='cl_version', "
        f"callback=function() return '{version}' end, flags={{'no-writes'}}}}\n"
    )


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "redis_throttle", *args], capture_output=True, text=True, timeout=120)


def loads(c: redis.Redis) -> int:
    stats = c.info("commandstats").get("cmdstat_function|load")
    return int(stats["calls"]) if stats else 0


@pytest.fixture
def plain() -> Iterator[Server]:
    s = Server("plain")
    yield s
    s.stop()


def test_twin_print_is_the_library_byte_for_byte() -> None:
    out = subprocess.run([sys.executable, "-m", "redis_throttle", "twin", "print"], capture_output=True, timeout=60)
    assert out.returncode == 0
    assert out.stdout == LIBRARY.read_bytes()
    assert twin_library() == LIBRARY.read_text()
    assert twin_version() == VERSION == redis_throttle.__version__
    assert cli("--version").stdout.strip() == VERSION


def test_the_package_under_test_is_installed_with_its_twin_not_read_from_the_checkout() -> None:
    """`pip install <checkout>/clients/python` (make test-python's install) put the library into the package."""
    package = ROOT / "clients/python/src"
    assert package not in Path(redis_throttle.__file__).resolve().parents
    from importlib import resources

    assert resources.files("redis_throttle").joinpath("throttle.lua").read_bytes() == LIBRARY.read_bytes()


def test_the_cli_help_usage_errors_and_an_unreachable_server(plain: Server) -> None:
    helped = cli("twin", "load", "--help")
    assert helped.returncode == 0 and "--force" in helped.stdout and "--cluster" in helped.stdout
    for bad in ([], ["twin"], ["twin", "unload"], ["twin", "load", "--frobnicate"], ["twin", "print", "extra"]):
        out = cli(*bad)
        assert out.returncode == 2, (bad, out.stderr)
        assert "usage:" in out.stderr
    url = plain.url
    plain.stop()
    down = cli("twin", "load", url)
    assert down.returncode == 1
    assert f"connecting to 127.0.0.1:{plain.port}" in down.stderr


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_load_twin_loads_reports_decides_and_is_a_no_op_the_second_time(plain: Server, flavour: str) -> None:
    node = f"127.0.0.1:{plain.port}"
    if flavour == "sync":
        report = load_twin(plain.client())
        again = load_twin(plain.client())
    else:

        async def twice() -> tuple[redis_throttle.TwinReport, redis_throttle.TwinReport]:
            c = redis.asyncio.Redis(host="127.0.0.1", port=plain.port)
            try:
                first = await load_twin_async(c)
                sent = loads(plain.client())
                second = await load_twin_async(c)
                assert loads(plain.client()) == sent
                return first, second
            finally:
                await aclose(c)

        report, again = asyncio.run(twice())
    assert report == redis_throttle.TwinReport(VERSION, (TwinNode(node, None, STATED, "loaded"),))
    assert again == redis_throttle.TwinReport(
        VERSION, (TwinNode(node, STATED or "unversioned", STATED or "unversioned", "unchanged"),)
    )
    t = Throttle(plain.client())
    assert t.backend is redis_throttle.Backend.TWIN
    key = f"first:{uuid.uuid4().hex}"
    assert [t.throttle(key, 1, 2, 60).limited for _ in range(3)] == [False, False, True]
    sent = loads(plain.client())
    assert load_twin(plain.client()).nodes[0].action == "unchanged"
    assert loads(plain.client()) == sent, "FUNCTION LOAD sent for the same library"


def test_older_unversioned_and_same_version_twins_are_replaced(plain: Server) -> None:
    c = plain.client()
    node = f"127.0.0.1:{plain.port}"
    c.function_load(fake("0.0.1"))
    assert load_twin(c).nodes == (TwinNode(node, "0.0.1", STATED, "upgraded"),)
    c.function_load(fake(None), replace=True)
    assert [(n.before, n.action) for n in load_twin(c).nodes] == [("unversioned", "upgraded")]
    c.function_load(fake(VERSION), replace=True)
    assert [(n.before, n.action) for n in load_twin(c).nodes] == [(VERSION, "replaced")]
    out = cli("twin", "load", plain.url)
    assert out.returncode == 0, out.stderr
    assert "unchanged" in out.stdout


def test_a_newer_twin_is_refused_unless_forced(plain: Server) -> None:
    c = plain.client()
    c.function_load(fake("99.1.0"))
    with pytest.raises(TwinDowngradeError) as refused:
        load_twin(c)
    assert isinstance(refused.value, ThrottleError)
    assert "99.1.0" in str(refused.value) and f"this package's {VERSION}" in str(refused.value)
    assert c.fcall_ro("cl_version", 0) == b"99.1.0", "the newer twin was replaced"
    out = cli("twin", "load", plain.url)
    assert out.returncode == 3
    assert re.search(r"refusing to downgrade.*99\.1\.0.*--force", out.stderr)
    assert c.fcall_ro("cl_version", 0) == b"99.1.0"
    forced = cli("twin", "load", plain.url, "--force", "--json")
    assert forced.returncode == 0, forced.stderr
    assert json.loads(forced.stdout)["nodes"] == [
        {"node": f"127.0.0.1:{plain.port}", "before": "99.1.0", "after": STATED, "action": "downgraded"}
    ]
    c.function_load(fake("99.1.0"), replace=True)
    assert load_twin(c, force=True).nodes[0].action == "downgraded"


def test_auth_in_the_url(plain: Server) -> None:
    c = plain.client()
    c.acl_setuser("loader", enabled=True, passwords=["+s3cr@t"], commands=["+@all"], keys=["*"])
    denied = cli("twin", "load", f"redis://loader:wrong@127.0.0.1:{plain.port}")
    assert denied.returncode == 1
    assert "invalid username-password pair" in denied.stderr
    ok = cli("twin", "load", f"redis://loader:s3cr%40t@127.0.0.1:{plain.port}")
    assert ok.returncode == 0, ok.stderr
    assert "loaded" in ok.stdout
    c.config_set("requirepass", "pw")
    again = cli("twin", "load", f"redis://:pw@127.0.0.1:{plain.port}")
    assert again.returncode == 0, again.stderr
    assert "unchanged" in again.stdout


def certificates(folder: Path) -> Path:
    """A CA and a certificate for localhost and 127.0.0.1 signed by it, in `folder`."""
    return Tls(folder, san="DNS:localhost,IP:127.0.0.1").folder


def test_tls_with_cacert_refused_without_it_and_insecure(tmp_path: Path) -> None:
    certs = certificates(tmp_path)
    port = free_port()
    tls = (
        "--tls-port",
        str(port),
        "--tls-cert-file",
        str(certs / "server.crt"),
        "--tls-key-file",
        str(certs / "server.key"),
    )
    server = Server("plain", args=(*tls, "--tls-ca-cert-file", str(certs / "ca.crt"), "--tls-auth-clients", "no"))
    try:
        untrusted = cli("twin", "load", f"rediss://localhost:{port}")
        assert untrusted.returncode == 1
        assert "certificate" in untrusted.stderr.lower()
        by_name = cli("twin", "load", f"rediss://localhost:{port}", "--cacert", str(certs / "ca.crt"))
        assert by_name.returncode == 0, by_name.stderr
        assert f"localhost:{port}  loaded" in by_name.stdout
        by_address = cli("twin", "load", f"rediss://127.0.0.1:{port}", "--cacert", str(certs / "ca.crt"))
        assert by_address.returncode == 0, by_address.stderr
        assert "unchanged" in by_address.stdout
        insecure = cli("twin", "load", f"rediss://127.0.0.1:{port}", "--insecure")
        assert insecure.returncode == 0, insecure.stderr
    finally:
        server.stop()


def test_an_outdated_twin_is_warned_about_once_per_process(plain: Server) -> None:
    _twin._warned.clear()
    c = plain.client()
    c.function_load(fake("0.0.2"))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(3):
            assert Throttle(plain.client()).backend is redis_throttle.Backend.TWIN

        async def detect() -> None:
            a = redis.asyncio.Redis(host="127.0.0.1", port=plain.port)
            try:
                await AsyncThrottle(a).backend()
            finally:
                await aclose(a)

        asyncio.run(detect())
        ours = [w for w in seen if issubclass(w.category, TwinVersionWarning)]
        assert len(ours) == 1, [str(w.message) for w in ours]
        assert re.search(
            rf"twin is 0\.0\.2, older than this package's {re.escape(VERSION)}: load this package's with "
            rf"`python -m redis_throttle twin load redis://127\.0\.0\.1:{plain.port}`",
            str(ours[0].message),
        )
        c.function_load(fake(None), replace=True)
        for _ in range(2):
            assert Throttle(plain.client()).backend is redis_throttle.Backend.TWIN
        ours = [w for w in seen if issubclass(w.category, TwinVersionWarning)]
        assert len(ours) == 2 and "states no version" in str(ours[1].message)
        for v in (VERSION, "99.0.0"):
            c.function_load(fake(v), replace=True)
            assert Throttle(plain.client()).backend is redis_throttle.Backend.TWIN
        assert len([w for w in seen if issubclass(w.category, TwinVersionWarning)]) == 2


def test_neither_module_nor_twin_names_the_exact_loader_command(plain: Server) -> None:
    with pytest.raises(ThrottleError) as err:
        _ = Throttle(plain.client()).backend
    text = str(err.value)
    assert "neither the redis-throttle module" in text
    assert f"`python -m redis_throttle twin load redis://127.0.0.1:{plain.port}`" in text

    async def detect() -> str:
        a = redis.asyncio.Redis(host="127.0.0.1", port=plain.port, username="ops", password="pw")
        try:
            await AsyncThrottle(a).backend()
        except ThrottleError as e:
            return str(e)
        finally:
            await aclose(a)
        return ""

    c = plain.client()
    c.acl_setuser("ops", enabled=True, passwords=["+pw"], commands=["+@all"], keys=["*"])
    assert f"`python -m redis_throttle twin load redis://ops:PASSWORD@127.0.0.1:{plain.port}`" in asyncio.run(detect())


def test_a_plain_client_on_a_cluster_node_is_refused(cluster: Cluster) -> None:
    with pytest.raises(ThrottleError, match="is a node of a cluster: load the twin on every primary"):
        load_twin(cluster.nodes[0].client())


@pytest.fixture
def bare_cluster(cluster: Cluster) -> Iterator[Cluster]:
    """The session's cluster without a library `throttle` before and after the test."""

    def drop() -> None:
        for n in cluster.nodes:
            try:
                n.client().function_delete("throttle")
            except redis.ResponseError:
                pass

    drop()
    yield cluster
    drop()


def test_every_primary_of_a_cluster(bare_cluster: Cluster) -> None:
    cluster = bare_cluster
    names = sorted(f"127.0.0.1:{n.port}" for n in cluster.nodes)
    report = load_twin(cluster.client())
    assert sorted(n.node for n in report.nodes) == names
    assert all(n.action == "loaded" and n.before is None and n.after == STATED for n in report.nodes)
    assert [len(n.client().function_list("throttle")) for n in cluster.nodes] == [1, 1, 1]
    fcalls = [n.command_calls("fcall") for n in cluster.nodes]
    t = Throttle(cluster.client(), backend=redis_throttle.Backend.TWIN)
    assert all(not t.counter(f"spread{i}:{uuid.uuid4().hex}", 1, 60).limited for i in range(60))
    assert all(n.command_calls("fcall") > f for n, f in zip(cluster.nodes, fcalls)), "a primary served no FCALL"

    async def again() -> tuple[str, ...]:
        c = redis.asyncio.RedisCluster(host="127.0.0.1", port=cluster.nodes[1].port)
        try:
            return tuple(n.action for n in (await load_twin_async(c)).nodes)
        finally:
            await aclose(c)

    assert asyncio.run(again()) == ("unchanged",) * 3
    out = cli("twin", "load", cluster.nodes[2].url, "--cluster", "--json")
    assert out.returncode == 0, out.stderr
    assert [n["action"] for n in json.loads(out.stdout)["nodes"]] == ["unchanged"] * 3

    for n in cluster.nodes:
        n.client().function_delete("throttle")
    cluster.nodes[2].client().function_load(fake("99.0.0"))
    refused = cli("twin", "load", cluster.nodes[0].url)
    assert refused.returncode == 3, refused.stderr
    assert f"127.0.0.1:{cluster.nodes[2].port} has the twin 99.0.0, newer than this package's" in refused.stderr
    assert [len(n.client().function_list("throttle")) for n in cluster.nodes] == [0, 0, 1], "something was loaded"
    forced = load_twin(cluster.client(), force=True)
    assert sorted(n.action for n in forced.nodes) == ["downgraded", "loaded", "loaded"]
