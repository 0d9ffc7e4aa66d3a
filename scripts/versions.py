#!/usr/bin/env python3
"""One version for everything: fails when anything that states a version differs from the root
Cargo.toml's `[package] version` (the workspace version).

    python3 scripts/versions.py [--dist DIR]

Checks every workspace crate (cargo metadata) and the version requirements between them,
clients/node/package.json and its lockfile's root entries, clients/python/pyproject.toml and
`redis_throttle.__version__`, the Functions twin's header and its `cl_version` reply
(functions/throttle.lua), the Docker image's version label (docker/Dockerfile), the version in
artifact names the docs show, and with --dist the names of the files `make dist` wrote (exactly
the expected set). The module's MODULE LIST version is derived from the crate version at compile
time (src/lib.rs); scripts/dist-test.py checks it, and `cl_version`, on running servers.
Prints one line per check and ends with `N passed, N failed`; exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEMVER = r"\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?"

results: list[tuple[bool, str]] = []


def check(ok: bool, what: str) -> None:
    results.append((ok, what))
    print(f"{'ok  ' if ok else 'FAIL'} {what}")


def read(path: str) -> str:
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def workspace_version() -> str:
    section = re.search(r"^\[package\]\n(.*?)(?=^\[)", read("Cargo.toml"), re.M | re.S)
    found = section and re.search(r'^version\s*=\s*"([^"]+)"', section.group(1), re.M)
    if not found:
        sys.exit("versions.py: no [package] version in Cargo.toml")
    return found.group(1)


def crates(version: str) -> None:
    out = subprocess.run(
        ["cargo", "metadata", "--no-deps", "--format-version", "1", "--offline"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    meta = json.loads(out)
    members = set(meta["workspace_members"])
    names = {p["name"] for p in meta["packages"] if p["id"] in members}
    for p in meta["packages"]:
        if p["id"] not in members:
            continue
        check(p["version"] == version, f"crate {p['name']} version {p['version']}")
        for d in p["dependencies"]:
            # A requirement on another crate of this workspace (needed to publish it) names this version.
            if d["name"] in names and d["req"] != "*":
                ok = re.fullmatch(r"[=^~]?" + re.escape(version), d["req"]) is not None
                check(ok, f"crate {p['name']} requires {d['name']} {d['req']}")


def node(version: str) -> None:
    pkg = json.loads(read("clients/node/package.json"))
    check(pkg.get("version") == version, f"clients/node/package.json version {pkg.get('version')}")
    lock = json.loads(read("clients/node/package-lock.json"))
    check(lock.get("version") == version, f"clients/node/package-lock.json version {lock.get('version')}")
    root = lock.get("packages", {}).get("", {})
    check(root.get("version") == version, f'clients/node/package-lock.json packages[""] version {root.get("version")}')


def python(version: str) -> None:
    text = read("clients/python/pyproject.toml")
    project = re.search(r"^\[project\]\n(.*?)(?=^\[|\Z)", text, re.M | re.S)
    body = project.group(1) if project else ""
    literal = re.search(r'^version\s*=\s*"([^"]+)"', body, re.M)
    dynamic = re.search(r"^dynamic\s*=\s*\[[^]]*\"version\"", body, re.M)
    if literal:
        check(literal.group(1) == version, f"clients/python/pyproject.toml version {literal.group(1)}")
    else:
        check(bool(dynamic), "clients/python/pyproject.toml states a version (or declares it dynamic)")
    found = False
    for path in sorted(glob.glob(os.path.join(ROOT, "clients/python/src/redis_throttle/**/*.py"), recursive=True)):
        with open(path, encoding="utf-8") as f:
            for m in re.finditer(r'^__version__\s*(?::\s*str\s*)?=\s*["\']([^"\']+)["\']', f.read(), re.M):
                found = True
                check(m.group(1) == version, f"{os.path.relpath(path, ROOT)} __version__ {m.group(1)}")
    if dynamic and not literal:
        check(found, "redis_throttle.__version__ exists (pyproject's version is dynamic)")


def twin(version: str) -> None:
    text = read("functions/throttle.lua")
    # The header: the comments before the first line of code state the version.
    header, in_block = [], False
    for line in text.splitlines():
        stripped = line.strip()
        if in_block or stripped.startswith("--") or stripped.startswith("#!") or not stripped:
            header.append(line)
            if stripped.startswith("--[") and re.match(r"--\[=*\[", stripped):
                in_block = "]]" not in stripped[4:]
            elif in_block and "]]" in stripped:
                in_block = False
            continue
        break
    stated = re.findall(r"(?:\bversion|redis-throttle)\W{0,3}(" + SEMVER + ")", "\n".join(header), re.I)
    check(
        bool(stated) and all(v == version for v in stated),
        f"functions/throttle.lua header states version {', '.join(stated) or '(none)'}",
    )
    literal = re.findall(r"^\s*local\s+VERSION\s*=\s*['\"]([^'\"]*)['\"]", text, re.M)
    check(literal == [version], f"functions/throttle.lua: local VERSION = {', '.join(literal) or '(none)'}")
    # cl_version: registered read-only (FCALL_RO), replying the version (scripts/dist-test.py calls it).
    registered = re.search(r"function_name\s*=\s*['\"]cl_version['\"]", text) or re.search(
        r"register(?:_function)?\(\s*['\"]cl_version['\"]", text
    )
    check(bool(registered), "functions/throttle.lua registers cl_version")
    if registered:
        near = text[max(0, registered.start() - 400) : registered.end() + 400]
        check("no-writes" in near, "cl_version is registered with flags = { 'no-writes' }")


def docker(version: str) -> None:
    labels = re.findall(r'org\.opencontainers\.image\.version="?([^"\s]+)"?', read("docker/Dockerfile"))
    check(
        labels == [version], f"docker/Dockerfile LABEL org.opencontainers.image.version {', '.join(labels) or '(none)'}"
    )


def docs(version: str) -> None:
    pages = [os.path.join(ROOT, "README.md")]
    pages += sorted(glob.glob(os.path.join(ROOT, "docs/src/**/*.md"), recursive=True))
    pattern = re.compile(
        r"redis-throttle-(" + SEMVER + r")-(?:x86_64|aarch64)-linux-gnu|redis-throttle-js-(" + SEMVER + r")\.tgz"
        r"|redis_throttle-(" + SEMVER + r")(?:-py3|\.tar\.gz)"
    )
    shown, wrong = 0, []
    for page in pages:
        with open(page, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                for m in pattern.finditer(line):
                    shown += 1
                    named = next(g for g in m.groups() if g)
                    if named != version:
                        wrong.append(f"{os.path.relpath(page, ROOT)}:{n} {m.group(0)}")
    check(
        not wrong,
        f"the docs name artifacts of this version only ({shown} mentions{': ' if wrong else ''}{', '.join(wrong)})",
    )


def dist(version: str, folder: str) -> None:
    want = {
        f"redis-throttle-{version}-x86_64-linux-gnu.tar.gz",
        f"redis-throttle-{version}-aarch64-linux-gnu.tar.gz",
        f"redis-throttle-js-{version}.tgz",
        f"redis_throttle-{version}.tar.gz",
        f"redis_throttle-{version}-py3-none-any.whl",
        "SHA256SUMS",
    }
    have = set(os.listdir(folder)) if os.path.isdir(folder) else set()
    for name in sorted(want):
        check(name in have, f"dist/{name} exists")
    for name in sorted(have - want):
        check(False, f"dist/{name}: not an artifact of version {version}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dist", help="the folder make dist wrote")
    args = parser.parse_args()
    version = workspace_version()
    print(f"versions: the workspace version is {version} (Cargo.toml)")
    crates(version)
    node(version)
    python(version)
    twin(version)
    docker(version)
    docs(version)
    if args.dist:
        dist(version, args.dist)
    failed = sum(1 for ok, _ in results if not ok)
    print(f"versions: {len(results) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
