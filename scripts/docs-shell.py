#!/usr/bin/env python3
"""Every shell line of the docs runs: each command line of a fenced `sh`, `bash`, `shell` or
`console` block (`$ ` lines) in README.md and docs/src/**/*.md, run as written, in order, one shell
per block (so a variable set on one line is there on the next), against throwaway servers.

    python3 scripts/docs-shell.py --dist DIR [--app DIR]   (scripts/dist-test.py runs it)

--app: an APP already holding the npm tarball (node_modules) and a venv (.venv) with the wheel,
as scripts/dist-test.py leaves its project folder; otherwise one is made in a temporary folder.

Where the lines run, as a user would type them:
- A block that runs `make` or names a path of the repository (`functions/…`, `scripts/…`,
  `docker/…`, `./clients/…`) runs in the checkout, as the docs tell; files it leaves there
  (untracked, not ignored) are removed after it and reported. Any other block runs in a user's
  project folder, APP: a temporary folder holding the release's files (a copy of dist/, as if
  downloaded), with a clone of the repository next to it (`../redis-throttle`), which is at once
  an npm project with the npm tarball installed, a Cargo project and a Python venv (first on
  PATH: `python` and `pip` are the venv's) with the wheel installed. The blocks of a page run in
  order in the same APP, so a later block finds what an earlier one unpacked.
- `redis-cli` is a wrapper that adds `-p PORT` of the block's own server: a fresh redis-server with
  the module of the x86_64 tarball loaded (functions load too); `localhost:6379` and
  `127.0.0.1:6379` in a line name that server as well. `npx` never downloads a package
  (npm_config_yes=false): it runs the one installed in APP.

The lines that cannot run as written on CI are rewritten by MAPPED below (each with its reason;
it says what runs instead); a rule that matches no line of the docs fails the test, so the table
cannot rot. No line is skipped: each one runs (as written or as mapped) or the test fails.
Prints one line per command and ends with `docs-shell: N passed, N failed`; exits 1 on a failure.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INFOS = {"sh", "bash", "shell", "console"}

# (pattern, replacement, reason): `re.sub(pattern, replacement, line)` on each command line that
# the pattern matches. $DOCS_* are set in each block's shell (see prelude()).
MAPPED: list[tuple[str, str, str]] = [
    (
        r"^make run(\s.*)?$",
        "docs_serve make run PORT=$DOCS_RUN_PORT",
        "make run serves on port 6379 in the foreground until stopped: it runs on a free port until its "
        "server answers CL.THROTTLE, then that server is shut down",
    ),
    (
        r"^redis-server\b([^#]*).*$",
        r"docs_serve redis-server\1 --port $DOCS_RUN_PORT",
        "redis-server serves on port 6379 in the foreground until stopped: it runs on a free port until it "
        "answers CL.THROTTLE, then it is shut down",
    ),
    (
        r"^make dist(\s.*)?$",
        "make -n dist >/dev/null",
        "make dist wrote what this test runs on just before (make dist-test depends on it): checked to be "
        "a make target (make -n)",
    ),
    (
        r"^make rls(\s.*)?$",
        "make -n rls >/dev/null",
        "builds the gateway service in release (minutes on 2 cores): make test's cargo test --workspace "
        "builds it and runs it against real servers (gateway/tests); checked to be a make target (make -n)",
    ),
    (
        r"^make run-rls(\s.*)?$",
        "make -n run-rls >/dev/null",
        "serves the gateway on upstream's fixed ports (8080, 8081, 6070) in the foreground: its tests start "
        "the same service on free ports (make test); checked to be a make target (make -n)",
    ),
    (
        r"^curl -s localhost:8080/json\b.*$",
        "docs_covered 'make test'",
        "asks the service make run-rls serves on 8080: gateway/tests post the same /json requests to the "
        "service they start (make test runs them)",
    ),
    (
        r"^make check(\s.*)?$",
        "docs_covered 'make check'",
        "clippy compiles every crate of the workspace (minutes on a cold target): .ci/run runs make check "
        "first, on this checkout",
    ),
    (
        r"^make test(\s.*)?$",
        "make -n test >/dev/null",
        "make test is what runs this test (.ci/run runs it): only checked to be a make target (make -n)",
    ),
    (
        r"^make (plots|plots-perf)\b.*$",
        r"make -n \1 >/dev/null",
        "rewrites the committed pictures (plots-perf also measures for minutes with callgrind): checked "
        "to be a make target (make -n)",
    ),
    (
        r"^make test-matrix\b([^#]*).*$",
        r"make -n test-matrix\1>/dev/null",
        ".ci/run runs make test-matrix (every server of the matrix, ~15 min): checked to be a make "
        "target taking these variables (make -n)",
    ),
    (
        r"^docker (build|run)\b.*$",
        "docs_covered 'make test-image'",
        "the Dockerfile's default bases come from a container registry, which CI cannot reach: .ci/run's "
        "make test-image builds this Dockerfile from local Debian bases, and its smoke test runs the image "
        "with docker run -p and asks CL.THROTTLE from the host",
    ),
    (
        r"\bnpm install redis-throttle-js\b",
        "npm install $DOCS_DIST/redis-throttle-js-$DOCS_VERSION.tgz",
        "the package is not on the npm registry yet: the tarball make dist wrote (npm pack of clients/node)",
    ),
    (
        r"""\bpip install (["']?)redis-throttle(\[limits\])?\1(?=\s|$)""",
        r'pip install "$DOCS_DIST/redis_throttle-$DOCS_VERSION-py3-none-any.whl\2"',
        "the package is not on PyPI yet: the wheel make dist wrote",
    ),
    (
        r"git\+https://github\.com/[^/\s]+/redis-throttle(\.git)?(?=[@#\s\"']|$)",
        "git+file://localhost$DOCS_REPO",
        "the public repository cannot be reached from CI: the same VCS install from a git repository "
        "holding this checkout's files",
    ),
    (
        r"--git https://github\.com/[^/\s]+/redis-throttle(\.git)?(?=\s|$)",
        "--git file://$DOCS_REPO",
        "the public repository cannot be reached from CI: cargo fetches the same crate from a git "
        "repository holding this checkout's files",
    ),
]


def pages() -> list[Path]:
    return [ROOT / "README.md"] + sorted((ROOT / "docs/src").rglob("*.md"))


def shell_blocks(page: Path) -> list[tuple[int, str, list[tuple[int, str]]]]:
    """(line of the fence, info, [(line, command)]) of each shell block; continuation lines joined."""
    out = []
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)(`{3,}|~{3,})\s*(\S*)(.*)$", lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = m.group(1), m.group(2), m.group(3)
        j = i + 1
        while j < len(lines) and not (
            lines[j].strip().startswith(fence) and lines[j].strip() == fence[0] * len(lines[j].strip())
        ):
            j += 1
        body = [
            (n + 1, ln[len(indent) :] if ln.startswith(indent) else ln)
            for n, ln in enumerate(lines[i + 1 : j], start=i + 1)
        ]
        if info in INFOS:
            commands: list[tuple[int, str]] = []
            pending: tuple[int, str] | None = None
            for n, ln in body:
                if info == "console":
                    if pending is None and not ln.startswith("$ "):
                        continue  # output shown in the docs
                    ln = ln[2:] if pending is None else ln
                if pending is not None:
                    pending = (pending[0], pending[1] + "\n" + ln)
                elif ln.strip() and not ln.lstrip().startswith("#"):
                    pending = (n, ln)
                if pending is not None and not pending[1].endswith("\\"):
                    commands.append(pending)
                    pending = None
            if pending is not None:
                commands.append(pending)
            out.append((i + 1, info, commands))
        i = j + 1
    return out


def top_level_paths() -> list[str]:
    try:
        names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        names = [p.name for p in ROOT.iterdir()]
    return sorted({n.split("/")[0] for n in names if not n.startswith(".")})


def in_checkout(commands: list[str], tops: list[str]) -> bool:
    for c in commands:
        for word in re.split(r"[\s<>|;&()\"'=]+", c):
            if word == "make" or any(
                word == t or word.startswith(t + "/") or word.startswith("./" + t + "/") for t in tops
            ):
                return True
    return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def prelude(tmp: Path) -> str:
    return rf"""
docs_serve() {{  # COMMAND...: a server in the foreground, until it answers CL.THROTTLE; then shut down
  "$@" >"$DOCS_TMP/serve.log" 2>&1 &
  local pid=$! i
  for i in $(seq 2400); do
    if [ "$("$DOCS_REDIS_CLI" -p "$DOCS_RUN_PORT" CL.THROTTLE docs-shell 1 1 1 2>/dev/null | head -n1)" = 0 ]; then
      "$DOCS_REDIS_CLI" -p "$DOCS_RUN_PORT" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
      wait "$pid" || true
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || {{ tail -n 30 "$DOCS_TMP/serve.log" >&2; return 1; }}
    sleep 0.5
  done
  kill "$pid"; return 1
}}
docs_covered() {{  # STEP: the line is what .ci/run's STEP runs; it must be there
  grep -qF -- "$1" "$DOCS_ROOT/.ci/run" || {{ echo ".ci/run does not run $1" >&2; return 1; }}
}}
"""


def run_block(
    page: Path, commands: list[tuple[int, str]], env: dict[str, str], cwd: Path, tmp: Path, server_port: int
) -> list[tuple[bool, str, str]]:
    """Runs a block's commands in one bash; returns (ok, label, detail) per command."""
    script = ["set -eo pipefail", prelude(tmp)]
    labels = []
    for k, (n, text) in enumerate(commands):
        line = re.sub(r"\b(localhost|127\.0\.0\.1):6379\b", f"127.0.0.1:{server_port}", text)
        notes = []
        for pattern, replacement, reason in MAPPED:
            if re.search(pattern, line, re.M):
                USED.add(pattern)
                line = re.sub(pattern, replacement, line, flags=re.M)
                notes.append(reason)
        where = f"{page.relative_to(ROOT)}:{n}"
        labels.append((where, text.replace("\n", " "), notes))
        script.append(f"echo '@@docs-shell {k}' >&2\n{line}")
    script.append("echo '@@docs-shell done' >&2")
    p = subprocess.run(["bash", "-c", "\n".join(script)], cwd=cwd, env=env, capture_output=True, timeout=1800)
    err = p.stderr.decode(errors="replace")
    reached = [int(m) for m in re.findall(r"^@@docs-shell (\d+)$", err, re.M)]
    done = "@@docs-shell done" in err and p.returncode == 0
    last = reached[-1] if reached else 0
    out = []
    for k, (where, text, notes) in enumerate(labels):
        ok = done or k < last
        mapped = f"  [mapped: {notes[0]}]" if notes else ""
        detail = ""
        if not ok and k == last:
            tail = (
                p.stdout.decode(errors="replace") + "\n" + re.sub(r"^@@docs-shell.*\n", "", err, flags=re.M)
            ).strip()
            detail = "\n     ".join(tail.splitlines()[-20:]) + f"\n     (exit {p.returncode})"
        elif not ok:
            detail = "not reached"
        out.append((ok, f"{where}: {text}{mapped}", detail))
    return out


USED: set[str] = set()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dist", required=True, help="the folder make dist wrote")
    parser.add_argument("--app", help="an APP with the npm tarball and a .venv with the wheel installed")
    args = parser.parse_args()
    dist = Path(args.dist).resolve()
    version = re.search(
        r'^\[package\]\n(?:[^\[]*?\n)?version\s*=\s*"([^"]+)"', (ROOT / "Cargo.toml").read_text(), re.M
    ).group(1)  # type: ignore[union-attr]
    results: list[tuple[bool, str]] = []

    def report(ok: bool, what: str, detail: str = "") -> None:
        results.append((ok, what))
        print(f"{'ok  ' if ok else 'FAIL'} {what}" + (f"\n     {detail}" if detail and not ok else ""), flush=True)

    tmp = Path(tempfile.mkdtemp(prefix="docs-shell."))
    t0 = time.monotonic()
    servers: list[subprocess.Popen[bytes]] = []
    try:
        # The module of the x86_64 tarball, for every block's server.
        tar = dist / f"redis-throttle-{version}-x86_64-linux-gnu.tar.gz"
        subprocess.run(["tar", "-xzf", str(tar), "-C", str(tmp)], check=True)
        module = tmp / f"redis-throttle-{version}-x86_64-linux-gnu/libredis_throttle.so"
        real_cli = shutil.which("redis-cli")
        if real_cli is None:
            sys.exit("docs-shell: redis-cli is missing (scripts/deps.sh installs redis-tools)")
        bin_dir = tmp / "bin"
        bin_dir.mkdir()
        (bin_dir / "redis-cli").write_text(f'#!/bin/sh\nexec "{real_cli}" -p "$DOCS_PORT" "$@"\n')
        (bin_dir / "redis-cli").chmod(0o755)
        # A git repository of this checkout's files (committed or not, .gitignore applied), for the
        # VCS installs: a clone of the public repository, as far as pip and cargo can tell.
        repo = tmp / "repo.git"
        git = [
            "git",
            "-c",
            "user.name=docs-shell",
            "-c",
            "user.email=docs-shell@localhost",
            f"--git-dir={repo}",
            f"--work-tree={ROOT}",
        ]
        for step in (
            ["git", "init", "-q", "--bare", str(repo)],
            git + ["add", "-A"],
            git + ["commit", "-q", "-m", "the checkout's files"],
        ):
            subprocess.run(step, check=True, capture_output=True)
        # APP: a user's project, with the repository cloned next to it.
        app = Path(args.app).resolve() if args.app else tmp / "app"
        app.mkdir(exist_ok=True)
        if not (app.parent / "redis-throttle").exists():
            (app.parent / "redis-throttle").symlink_to(ROOT)
        venv = app / ".venv"
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "PYTHONHOME", "NODE_PATH", "VIRTUAL_ENV") and not k.startswith("npm_")
        }
        env["PATH"] = os.pathsep.join([str(bin_dir), str(venv / "bin"), env.get("PATH", "")])
        env.update(
            npm_config_yes="false",
            npm_config_update_notifier="false",
            PIP_DISABLE_PIP_VERSION_CHECK="1",
            DOCS_DIST=str(dist),
            DOCS_VERSION=version,
            DOCS_ROOT=str(ROOT),
            DOCS_REPO=str(repo),
            DOCS_TMP=str(tmp),
            DOCS_REDIS_CLI=real_cli,
        )
        setup = (
            []
            if args.app
            else [
                ([sys.executable, "-m", "venv", str(venv)], "a venv"),
                (
                    [str(venv / "bin/pip"), "install", "-q", str(dist / f"redis_throttle-{version}-py3-none-any.whl")],
                    "the wheel, into it",
                ),
                (
                    ["npm", "install", "--no-audit", "--no-fund", str(dist / f"redis-throttle-js-{version}.tgz")],
                    "the npm tarball",
                ),
            ]
        )
        setup.append((["cargo", "init", "-q", "--lib", "--name", "docs_app", "--vcs", "none"], "a Cargo project"))
        for artifact in dist.iterdir():
            shutil.copy2(artifact, app / artifact.name)
        for argv, what in setup:
            p = subprocess.run(argv, cwd=app, env=env, capture_output=True, timeout=600)
            if p.returncode != 0:
                sys.exit(f"docs-shell: setting up APP ({what}) failed:\n{p.stdout.decode()}{p.stderr.decode()}")
        tops = top_level_paths()
        print(f"docs-shell: APP is {app} (set up in {time.monotonic() - t0:.0f} s)", flush=True)

        for page in pages():
            for fence_line, _info, commands in shell_blocks(page):
                if not commands:
                    continue
                port = free_port()
                log = open(tmp / f"server-{port}.log", "wb")
                server = subprocess.Popen(
                    [
                        "redis-server",
                        "--port",
                        str(port),
                        "--bind",
                        "127.0.0.1",
                        "--save",
                        "",
                        "--appendonly",
                        "no",
                        "--dir",
                        str(tmp),
                        "--loadmodule",
                        str(module),
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
                servers.append(server)
                for _ in range(200):
                    if (
                        subprocess.run([real_cli, "-p", str(port), "PING"], capture_output=True).stdout.strip()
                        == b"PONG"
                    ):
                        break
                    time.sleep(0.05)
                texts = [c for _, c in commands]
                checkout = in_checkout(texts, tops)
                before = set(untracked()) if checkout else set()
                block_env = dict(env, DOCS_PORT=str(port), DOCS_RUN_PORT=str(free_port()))
                started = time.monotonic()
                for ok, what, detail in run_block(page, commands, block_env, ROOT if checkout else app, tmp, port):
                    report(ok, what + ("" if checkout else "  (in APP)"), detail)
                print(f"     ({page.relative_to(ROOT)}:{fence_line}: {time.monotonic() - started:.1f} s)", flush=True)
                if checkout:
                    left = sorted(set(untracked()) - before)
                    for name in left:
                        path = ROOT / name
                        if path.is_file() or path.is_symlink():
                            path.unlink()
                    if left:
                        print(f"     removed what the block left in the checkout: {', '.join(left)}")
                server.terminate()
                server.wait()
        for pattern, _replacement, reason in MAPPED:
            report(
                pattern in USED,
                f"the mapping for {reason.split(':')[0]!r} matches a line of the docs",
                f"no line matches {pattern}: remove the rule",
            )
    finally:
        for s in servers:
            if s.poll() is None:
                s.terminate()
                s.wait()
    failed = sum(1 for ok, _ in results if not ok)
    print(f"docs-shell: {len(results)} lines and rules in {time.monotonic() - t0:.0f} s")
    if failed == 0:
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print(f"docs-shell: the temporary folder is kept: {tmp}")
    print(f"docs-shell: {len(results) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


def untracked() -> list[str]:
    p = subprocess.run(["git", "ls-files", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True)
    return p.stdout.split() if p.returncode == 0 else []


if __name__ == "__main__":
    main()
