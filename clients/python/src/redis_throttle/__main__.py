"""``python -m redis_throttle twin load [URL]`` and ``twin print``: the Functions twin this package
carries, loaded or printed without writing code (through redis-py, the package's dependency)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from typing import Any, Optional, Sequence

import redis
from redis.cluster import RedisCluster

from ._errors import ThrottleError
from ._twin import TwinDowngradeError, TwinReport, _library_bytes, load_twin, twin_version

EPILOG = """\
twin load   Loads the Functions twin this package carries (library `throttle`) with
            FUNCTION LOAD REPLACE on the server at URL, or on every primary when it is a
            node of a cluster, and reports the version found and loaded on each. Loading
            the same library again changes nothing. A server whose twin is newer than this
            package's is refused (nothing is loaded anywhere) unless --force is given.
twin print  Writes the library to stdout, byte for byte (for
            `python -m redis_throttle twin print | redis-cli -x FUNCTION LOAD REPLACE`).

URL: redis://[[USER]:PASSWORD@]HOST[:PORT] (default redis://127.0.0.1:6379), rediss://... for
TLS, unix:///path/to/redis.sock; special characters in the password percent-encoded (%40 for @).

Exit status: 0 loaded (or already there), 1 failed, 2 usage error, 3 downgrade refused."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m redis_throttle",
        description="The Functions twin of redis-throttle (no module needed), carried by this package.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=twin_version())
    commands = p.add_subparsers(dest="command", metavar="twin", required=True)
    twin = commands.add_parser("twin", help="load or print the Functions twin")
    sub = twin.add_subparsers(dest="action", metavar="{load,print}", required=True)
    load = sub.add_parser("load", help="load the twin on a server or every primary of a cluster")
    load.add_argument("url", nargs="?", default="redis://127.0.0.1:6379", help="the server (default %(default)s)")
    load.add_argument("--cluster", action="store_true", help="require a cluster (detected without it)")
    load.add_argument("--force", action="store_true", help="replace a newer twin (a downgrade)")
    load.add_argument("--json", action="store_true", help="print the report as JSON")
    load.add_argument("--cacert", metavar="FILE", help="TLS: trust the CA certificates in FILE (PEM)")
    load.add_argument("--insecure", action="store_true", help="TLS: do not verify the server's certificate")
    sub.add_parser("print", help="write the library to stdout, byte for byte")
    return p


def _tls(args: argparse.Namespace) -> dict[str, Any]:
    if not args.url.startswith("rediss://"):
        return {}
    options: dict[str, Any] = {}
    if args.cacert:
        options["ssl_ca_certs"] = args.cacert
    if args.insecure:
        options.update(ssl_cert_reqs="none", ssl_check_hostname=False)
    return options


def _load(args: argparse.Namespace) -> TwinReport:
    options = {"socket_connect_timeout": 10, "socket_timeout": 60, **_tls(args)}
    seed = redis.Redis.from_url(args.url, **options)  # type: ignore[no-untyped-call, unused-ignore]
    try:
        try:
            info: Any = seed.info()
        except redis.ResponseError:
            info = {}  # an ACL user without INFO: the URL's server as it is, unless --cluster
        cluster = str(info.get("cluster_enabled")) == "1" or args.cluster
        if not cluster:
            return load_twin(seed, force=args.force)
    finally:
        seed.close()
    if args.url.startswith("unix://"):
        raise ThrottleError("ERR a cluster is reached over TCP: give one of its nodes as redis://HOST:PORT")
    nodes = RedisCluster.from_url(args.url, **options)  # type: ignore[no-untyped-call, unused-ignore]
    try:
        return load_twin(nodes, force=args.force)
    finally:
        nodes.close()


def _print(report: TwinReport) -> str:
    n = len(report.nodes)
    lines = [f"redis_throttle: the Functions twin {report.version} on {'1 server' if n == 1 else f'{n} primaries'}:"]
    width = max(len(node.node) for node in report.nodes)
    for node in report.nodes:
        if node.before is None:
            was = "no library before"
        elif node.action == "unchanged":
            was = "the same library was there"
        else:
            was = f"was {node.before}"
        lines.append(f"  {node.node.ljust(width)}  {node.action.ljust(10)}  {node.after or '(no version)'}  ({was})")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)  # exits 2 on a usage error, 0 after --help
    if args.action == "print":
        sys.stdout.buffer.write(_library_bytes())
        sys.stdout.flush()
        return 0
    try:
        report = _load(args)
    except TwinDowngradeError as err:
        print(f"redis_throttle: {_message(err)}", file=sys.stderr)
        return 3
    except (redis.RedisError, OSError, ValueError) as err:
        print(f"redis_throttle: {_message(err)}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"version": report.version, "nodes": [asdict(n) for n in report.nodes]}))
    else:
        print(_print(report))
    return 0


def _message(err: BaseException) -> str:
    text = str(err)
    return text[4:] if text.startswith("ERR ") else text


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # `twin print | head`
        sys.exit(0)
