"""The Functions twin this package carries (the repository's ``functions/throttle.lua``, put
into the wheel and the sdist at build time) and its loader: :func:`load_twin` loads it with
``FUNCTION LOAD REPLACE`` on a standalone server or on every primary of a cluster, reports the
version found and loaded on each, and refuses to replace a newer twin unless forced.
``python -m redis_throttle twin load URL`` runs the same steps."""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Awaitable, Callable, Generator, List, Literal, Optional, Sequence, Tuple, Union
from urllib.parse import quote

from redis.exceptions import ResponseError

from ._core import Backend
from ._errors import ThrottleError

__all__ = [
    "UNVERSIONED",
    "TwinAction",
    "TwinDowngradeError",
    "TwinNode",
    "TwinReport",
    "TwinVersionWarning",
    "load_twin",
    "load_twin_async",
    "twin_library",
    "twin_version",
]

UNVERSIONED = "unversioned"
"""``before`` of a library ``throttle`` without ``cl_version`` (older than any twin that states one)."""

TwinAction = Literal["loaded", "upgraded", "replaced", "unchanged", "downgraded"]
"""``loaded``: no library ``throttle`` was there; ``upgraded``: an older twin (or one stating no
version) was replaced; ``replaced``: the same version with other code; ``unchanged``: the very same
library was there, nothing was sent; ``downgraded``: a newer twin was replaced (``force``)."""


@dataclass(frozen=True)
class TwinNode:
    """What the loader found and did on one primary."""

    node: str
    """``host:port``."""
    before: Optional[str]
    """The twin's version found there: None without a library ``throttle``, ``"unversioned"``
    for one without ``cl_version``."""
    after: Optional[str]
    """The version the server states now (``FCALL_RO cl_version 0``); None only for a library that states none."""
    action: TwinAction


@dataclass(frozen=True)
class TwinReport:
    version: str
    """The twin this package carries (the package's version)."""
    nodes: Tuple[TwinNode, ...]
    """One entry per primary."""


class TwinDowngradeError(ThrottleError):
    """A primary's twin is newer than this package's: nothing was loaded (``force=True`` replaces it anyway)."""


class TwinVersionWarning(UserWarning):
    """The server's twin is older than this package's (or states no version)."""


_CHECKOUT = Path(__file__).resolve().parents[4] / "functions" / "throttle.lua"


def _library_bytes() -> bytes:
    packed = resources.files("redis_throttle").joinpath("throttle.lua")
    if packed.is_file():
        return packed.read_bytes()
    if _CHECKOUT.is_file():  # an editable install or a source tree on sys.path
        return _CHECKOUT.read_bytes()
    raise ThrottleError(
        "ERR this installation of redis-throttle carries no Functions twin (redis_throttle/throttle.lua): "
        "install the package from its wheel or sdist, or from a checkout of the repository"
    )


def twin_library() -> str:
    """The library this package carries (``functions/throttle.lua``, as text)."""
    return _library_bytes().decode("utf-8")


def twin_version() -> str:
    """The version of the twin this package carries: the package's version."""
    from . import __version__

    return __version__


# ---- versions

_SEMVER = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$")


def compare_versions(a: str, b: str) -> Optional[int]:
    """Semantic-version order of two versions (-1, 0, 1), or None when either is not one."""
    x, y = _SEMVER.match(a.strip()), _SEMVER.match(b.strip())
    if x is None or y is None:
        return None
    for i in (1, 2, 3):
        d = int(x.group(i)) - int(y.group(i))
        if d:
            return 1 if d > 0 else -1
    p, q = x.group(4), y.group(4)
    if p is None or q is None:  # a release follows its pre-releases
        return 0 if p == q else (1 if p is None else -1)
    ps, qs = p.split("."), q.split(".")
    for i in range(max(len(ps), len(qs))):
        if i >= len(ps):
            return -1
        if i >= len(qs):
            return 1
        u, v = ps[i], qs[i]
        nu, nv = u.isdigit(), v.isdigit()
        if nu and nv and int(u) != int(v):
            return 1 if int(u) > int(v) else -1
        if nu != nv:
            return -1 if nu else 1
        if u != v:
            return -1 if u < v else 1
    return 0


# ---- replies (RESP2 lists of pairs or redis-py's dicts; bytes or str)


def _text(v: Any) -> Optional[str]:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return v if isinstance(v, str) else None


def _pairs(v: Any) -> dict[str, Any]:
    if isinstance(v, dict):
        return {k: x for k, x in ((_text(k), x) for k, x in v.items()) if k is not None}
    if isinstance(v, (list, tuple)):
        return {k: v[i + 1] for i in range(0, len(v) - 1, 2) if (k := _text(v[i])) is not None}
    return {}


def _find_library(reply: Any) -> Optional[Tuple[Optional[str], List[str]]]:
    """The library ``throttle`` in a ``FUNCTION LIST … WITHCODE`` reply: its code and function names."""
    for lib in reply if isinstance(reply, (list, tuple)) else []:
        fields = _pairs(lib)
        if _text(fields.get("library_name")) != "throttle":
            continue
        fns = fields.get("functions")
        names = [_text(_pairs(f).get("name")) for f in (fns if isinstance(fns, (list, tuple)) else [])]
        return _text(fields.get("library_code")), [n for n in names if n is not None]
    return None


_LIST = ("FUNCTION", "LIST", "LIBRARYNAME", "throttle", "WITHCODE")
_VERSION = ("FCALL_RO", "cl_version", 0)


def _plan(
    before: Optional[str], code: Optional[str], library: str, version: str, force: bool
) -> Union[str, Tuple[str]]:
    """What loading ``version`` over ``before`` does, or (why it is refused,)."""
    if code == library:
        return "unchanged"
    if before is None:
        return "loaded"
    if before == UNVERSIONED:
        return "upgraded"
    order = compare_versions(before, version)
    if order is None:
        return "replaced" if force else (f"states the version {before!r}, which cannot be compared with {version}",)
    if order < 0:
        return "upgraded"
    if order == 0:
        return "replaced"
    return "downgraded" if force else (f"has the twin {before}, newer than this package's {version}",)


def _refusal(names: Sequence[str], plans: Sequence[Union[str, Tuple[str]]]) -> Optional[TwinDowngradeError]:
    refused = [f"{n} {p[0]}" for n, p in zip(names, plans) if isinstance(p, tuple)]
    if not refused:
        return None
    return TwinDowngradeError(
        "ERR refusing to downgrade the Functions twin: " + "; ".join(refused) + ". Nothing was loaded. "
        "Load this package's twin anyway with force (load_twin(client, force=True), or --force)"
    )


def _load_failed(name: str, err: Exception, done: Sequence[str]) -> ThrottleError:
    again = f" (already loaded on {', '.join(done)}; loading again is safe)" if done else ""
    return ThrottleError(f"ERR FUNCTION LOAD failed on {name}: {err}{again}")


# ---- the caller's client

Send = Callable[..., Any]
AsyncSend = Callable[..., Awaitable[Any]]


def _info_flags(info: Any) -> Tuple[bool, bool]:
    """(a cluster node, a replica) from an INFO reply (redis-py's dict, or the text)."""
    if isinstance(info, dict):
        return str(info.get("cluster_enabled")) == "1", info.get("role") == "slave"
    text = _text(info) or ""
    return bool(re.search(r"^cluster_enabled:1", text, re.M)), bool(re.search(r"^role:slave", text, re.M))


def _plain_refused(name: str, info: Any, client: Any) -> Optional[ThrottleError]:
    cluster, replica = _info_flags(info)
    if cluster:
        return ThrottleError(
            f"ERR {name} is a node of a cluster: load the twin on every primary with a cluster client "
            f"(redis.RedisCluster), or `{loader_command(client)}`"
        )
    if replica:
        return ThrottleError(f"ERR {name} is a replica: load the twin on its primary (replicas receive it from there)")
    return None


def _is_cluster(client: Any) -> bool:
    return callable(getattr(client, "get_primaries", None))


def _primaries(client: Any) -> List[Tuple[str, Send]]:
    if _is_cluster(client):
        nodes = client.get_primaries()
        if not nodes:
            raise ThrottleError("ERR the cluster client knows no primary")
        return [(n.name, lambda *a, n=n: client.execute_command(*a, target_nodes=n)) for n in nodes]
    name = _address(client)[1]
    refused = _plain_refused(name, client.info(), client)
    if refused:
        raise refused
    return [(name, client.execute_command)]


async def _primaries_async(client: Any) -> List[Tuple[str, AsyncSend]]:
    if _is_cluster(client):
        await client.initialize()  # a no-op once the cluster's map is read
        nodes = client.get_primaries()
        if not nodes:
            raise ThrottleError("ERR the cluster client knows no primary")
        return [(n.name, lambda *a, n=n: client.execute_command(*a, target_nodes=n)) for n in nodes]
    name = _address(client)[1]
    refused = _plain_refused(name, await client.info(), client)
    if refused:
        raise refused
    return [(name, client.execute_command)]


def _found(libs: Any) -> Tuple[Optional[str], Optional[str], bool]:
    """(before, code, has cl_version) from FUNCTION LIST."""
    lib = _find_library(libs)
    if lib is None:
        return None, None, False
    return UNVERSIONED, lib[0], "cl_version" in lib[1]


# The loader's steps, one generator for the sync and the asyncio drivers: it yields
# (node index, command) and is sent the reply (or thrown the ResponseError).
Steps = Generator[Tuple[int, Tuple[Any, ...]], Any, TwinReport]


def _steps(names: Sequence[str], force: bool) -> Steps:
    library, version = twin_library(), twin_version()
    befores: List[Optional[str]] = []
    codes: List[Optional[str]] = []
    for i, name in enumerate(names):
        try:
            before, code, versioned = _found((yield i, _LIST))
            if versioned:
                before = _text((yield i, _VERSION)) or UNVERSIONED
        except ResponseError as err:
            raise ThrottleError(f"ERR cannot read the Functions library on {name}: {err}") from err
        befores.append(before)
        codes.append(code)
    plans = [_plan(b, c, library, version, force) for b, c in zip(befores, codes)]
    refused = _refusal(names, plans)
    if refused:
        raise refused
    nodes: List[TwinNode] = []
    for i, (name, plan, before) in enumerate(zip(names, plans, befores)):
        after = before
        if plan != "unchanged":
            try:
                yield i, ("FUNCTION", "LOAD", "REPLACE", library)
            except ResponseError as err:
                raise _load_failed(name, err, [n.node for n in nodes if n.action != "unchanged"]) from err
            try:
                after = _text((yield i, _VERSION))
            except ResponseError:
                after = None  # a library without cl_version (built before it existed)
        nodes.append(TwinNode(name, before, after, plan))  # type: ignore[arg-type]
    return TwinReport(version, tuple(nodes))


def load_twin(client: Any, force: bool = False) -> TwinReport:
    """Loads this package's Functions twin (library ``throttle``) through a redis-py client:
    ``redis.Redis`` (its server) or ``redis.RedisCluster`` (every primary). Returns what it
    found and did on each primary; refuses a downgrade (a server twin newer than the
    package's, :class:`TwinDowngradeError`, nothing loaded anywhere) unless ``force``.
    Loading the same library again sends nothing. For ``redis.asyncio`` clients:
    ``redis_throttle.asyncio.load_twin``."""
    nodes = _primaries(client)
    steps = _steps([n for n, _ in nodes], force)
    reply: Any = None
    failed: Optional[ResponseError] = None
    while True:
        try:
            i, command = steps.send(reply) if failed is None else steps.throw(failed)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        try:
            reply, failed = nodes[i][1](*command), None
        except ResponseError as err:
            reply, failed = None, err


async def load_twin_async(client: Any, force: bool = False) -> TwinReport:
    """:func:`load_twin` for ``redis.asyncio.Redis`` and ``redis.asyncio.RedisCluster``
    (``redis_throttle.asyncio.load_twin``)."""
    nodes = await _primaries_async(client)
    steps = _steps([n for n, _ in nodes], force)
    reply: Any = None
    failed: Optional[ResponseError] = None
    while True:
        try:
            i, command = steps.send(reply) if failed is None else steps.throw(failed)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        try:
            reply, failed = await nodes[i][1](*command), None
        except ResponseError as err:
            reply, failed = None, err


# ---- what the client says about a server's twin


def _address(client: Any) -> Tuple[Optional[str], str]:
    """(the URL without its password, ``host:port``) where the client connects, best effort."""
    try:
        if _is_cluster(client):
            node = client.get_default_node() or client.get_primaries()[0]
            kwargs = getattr(getattr(client, "nodes_manager", None), "connection_kwargs", {}) or {}
            host, port = node.host, node.port
            tls = bool(kwargs.get("ssl"))
        else:
            kwargs = client.connection_pool.connection_kwargs
            if kwargs.get("path"):
                return f"unix://{kwargs['path']}", str(kwargs["path"])
            host, port = kwargs.get("host", "localhost"), kwargs.get("port", 6379)
            tls = "SSL" in client.connection_pool.connection_class.__name__
        user, secret = kwargs.get("username"), kwargs.get("password") is not None
        auth = f"{quote(user, safe='')}:PASSWORD@" if user and user != "default" else (":PASSWORD@" if secret else "")
        h = f"[{host}]" if ":" in str(host) else str(host)
        return f"{'rediss' if tls else 'redis'}://{auth}{h}:{port}", f"{h}:{port}"
    except Exception:  # an unusual client: the placeholder says what to fill in
        return None, "the server"


def loader_command(client: Any) -> str:
    """The CLI command that loads the twin on the client's server (its address when the client tells it)."""
    return f"python -m redis_throttle twin load {_address(client)[0] or 'redis://HOST:PORT'}"


def missing_library(client: Any) -> str:
    """The error text for a server with neither the module nor the twin."""
    return (
        "the server has neither the redis-throttle module (CL.THROTTLE is an unknown command) nor "
        f"its Functions library `throttle` (FUNCTION LIST): load the twin this package carries with "
        f"`{loader_command(client)}` (or redis_throttle.load_twin(client) from code, or "
        "`python -m redis_throttle twin print | redis-cli -x FUNCTION LOAD REPLACE`), "
        "or the module (redis-server --loadmodule /path/to/libredis_throttle.so)"
    )


_warned: set[str] = set()


def warn_if_outdated(reply: Any, client: Any) -> None:
    """Warns once per process (per server and version found) when the server's twin is older than this
    package's or states no version. ``reply``: what ``FCALL_RO cl_version 0`` answered (its
    ResponseError when it failed)."""
    if isinstance(reply, Exception):
        if "function not found" not in str(reply).lower():
            return  # the server cannot say (an ACL without FCALL_RO): no warning
        found = UNVERSIONED
    else:
        found = _text(reply) or UNVERSIONED
    try:
        version = twin_version()
    except Exception:
        return
    order = -1 if found == UNVERSIONED else compare_versions(found, version)
    key = f"{_address(client)[0]} {found}"
    if order is None or order >= 0 or key in _warned:
        return
    _warned.add(key)
    what = "states no version (it predates cl_version)" if found == UNVERSIONED else f"is {found}"
    warnings.warn(
        f"the server's Functions twin {what}, older than this package's {version}: "
        f"load this package's with `{loader_command(client)}`",
        TwinVersionWarning,
        stacklevel=4,
    )


def detected(libraries: Any, client: Any = None) -> Backend:
    """The twin when ``FUNCTION LIST LIBRARYNAME throttle`` lists it (the module was ruled out);
    else the error naming the loader command for ``client``'s server."""
    if isinstance(libraries, (list, tuple)) and len(libraries) > 0:
        return Backend.TWIN
    raise ThrottleError("ERR " + missing_library(client))
