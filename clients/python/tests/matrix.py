"""The Python package's test matrix (make test-python), standard library only.

Each row is a lockfile (clients/python/matrix/ROW.txt, every package pinned with ``==``) on a
Python of this machine, in a venv of its own under target/python-matrix/ (made again only when
its lockfile or its Python changes). Every row installs the same wheel, built once from
clients/python, then runs ruff, mypy --strict and pytest against one set of servers started
here for all of them (the module, the twin, a 3-primary cluster, a TLS-only cluster). Then the
wheel is installed in a clean venv outside the checkout and used once. Last, a table of the
versions each row ran and what it found (target/python-matrix/table.md), which the book's
Python page shows.

    python3 clients/python/tests/matrix.py [ROW...]      (default: every row)
    python3 clients/python/tests/matrix.py --venv ROW    (only make ROW's venv; print its python)

Rows: ``oldest`` (limits 5.0.0 and redis-py 5.0.0, on the oldest Python from 3.10: limits 5
needs it), ``newest`` (the newest of everything, on the newest Python), ``py39`` (the typed
client on Python 3.9, where the machine has one; limits 5 does not install there). A machine
with one Python 3.10 or later (Debian's 3.11) runs ``oldest`` and ``newest`` on it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
PACKAGE = HERE.parent
ROOT = PACKAGE.parents[1]
sys.path.insert(0, str(HERE))

from servers import Servers  # noqa: E402

OUT = ROOT / os.environ.get("CARGO_TARGET_DIR", "target") / "python-matrix"
CLIENT_MODULES = ["src/redis_throttle/__init__.py", "src/redis_throttle/_core.py", "src/redis_throttle/_errors.py"]
CLIENT_MODULES += ["src/redis_throttle/_storage.py"]
CLIENT_MODULES += ["src/redis_throttle/_sync.py", "src/redis_throttle/asyncio.py"]
SHOWN = ["limits", "redis", "Flask-Limiter", "slowapi", "Flask", "fastapi"]


@dataclass
class Row:
    name: str
    python: str  # "oldest" (from 3.10), "newest", or a version that must be there ("3.9")
    tests: list[str] = field(default_factory=lambda: ["tests"])
    mypy_files: list[str] = field(default_factory=list)  # (empty: pyproject's, the whole package)
    optional: bool = False  # skipped, with a notice, on a machine without its Python

    @property
    def lockfile(self) -> Path:
        return PACKAGE / "matrix" / f"{self.name}.txt"


ROWS = [
    # (tests/test_install.py builds the sdist and wheels with hatchling, pinned by the newest row
    # only: they test the artifacts, the same whatever the host libraries' versions.)
    Row("oldest", "oldest", tests=["tests", "--ignore=tests/test_install.py"]),
    Row("newest", "newest"),
    Row(
        "py39",
        "3.9",
        tests=["tests/test_client.py", "tests/test_docs.py::test_the_client_example_runs"],
        mypy_files=CLIENT_MODULES,
        optional=True,
    ),
]


def say(text: str) -> None:
    print(text, flush=True)


def version_of(python: str) -> tuple[int, int] | None:
    """(major, minor) of a Python that can make venvs, or None."""
    try:
        out = subprocess.run(
            [python, "-c", "import sys, venv, ensurepip; print(*sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except OSError:
        return None
    if out.returncode != 0:
        return None
    major, minor = out.stdout.split()
    return int(major), int(minor)


def pythons() -> dict[tuple[int, int], str]:
    """Every Python 3.9 or later this machine has (pyenv's versions first, then PATH)."""
    found: dict[tuple[int, int], str] = {}
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    for minor in range(9, 30):
        v = f"3.{minor}"
        candidates = sorted(
            pyenv.glob(f"{v}.*/bin/python{v}"),
            key=lambda p: [int(x) for x in re.findall(r"\d+", p.parts[-3])],
            reverse=True,
        )
        on_path = shutil.which(f"python{v}")
        for candidate in [str(c) for c in candidates] + ([on_path] if on_path else []):
            if version_of(candidate) == (3, minor):
                found[(3, minor)] = candidate
                break
    default = shutil.which("python3")
    if default and (got := version_of(default)) and got not in found and got >= (3, 9):
        found[got] = default
    return found


def pick(row: Row, found: dict[tuple[int, int], str]) -> tuple[str, tuple[int, int]] | None:
    usable = sorted(v for v in found if v >= (3, 10))
    if row.python == "oldest" and usable:
        return found[usable[0]], usable[0]
    if row.python == "newest" and usable:
        return found[usable[-1]], usable[-1]
    wanted = tuple(int(x) for x in row.python.split("."))
    if wanted in found:
        return found[wanted], wanted  # type: ignore[index]
    return None


def run(args: list[str], log: Path, env: dict[str, str] | None = None, cwd: Path = PACKAGE) -> tuple[bool, float]:
    began = time.monotonic()
    with log.open("w") as out:
        rc = subprocess.run(args, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env).returncode
    return rc == 0, time.monotonic() - began


def tail(log: Path, lines: int = 60) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def venv(row: Row, python: str, version: tuple[int, int]) -> Path:
    """The row's venv with its lockfile installed (made again when the lockfile or the Python
    changed)."""
    home = OUT / row.name
    stamp = hashlib.sha256(row.lockfile.read_bytes() + python.encode() + repr(version).encode()).hexdigest()
    py = home / "bin" / "python"
    if (home / "stamp").is_file() and (home / "stamp").read_text() == stamp and py.exists():
        return py
    shutil.rmtree(home, ignore_errors=True)
    home.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([python, "-m", "venv", str(home)], check=True)
    log = OUT / f"{row.name}.install.log"
    pip = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps"]
    for step in (pip + ["-r", str(row.lockfile)], [str(py), "-m", "pip", "check"]):
        ok, _ = run(step, log)
        if not ok:
            raise SystemExit(f"{row.name}: {' '.join(step[2:5])}… failed:\n{tail(log)}")
    (home / "stamp").write_text(stamp)
    return py


def build_wheel(py: Path) -> Path:
    dist = OUT / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    log = OUT / "wheel.log"
    ok, _ = run([str(py), "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist), "."], log)
    if not ok:
        raise SystemExit(f"building the wheel failed:\n{tail(log)}")
    (wheel,) = dist.glob("redis_throttle-*.whl")
    return wheel


def versions(py: Path) -> dict[str, str]:
    code = (
        "import json, importlib.metadata as m\n"
        "out = {}\n"
        f"for name in {SHOWN!r}:\n"
        "    try: out[name] = m.version(name)\n"
        "    except m.PackageNotFoundError: out[name] = ''\n"
        "print(json.dumps(out))"
    )
    return dict(json.loads(subprocess.run([str(py), "-c", code], capture_output=True, text=True, check=True).stdout))


def smoke(wheel: Path, python: str, servers: Servers) -> tuple[bool, float]:
    """The wheel (with its ``limits`` extra, dependencies from the package index) in a clean
    venv outside the checkout, used once against the module."""
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rt-py-smoke-") as tmp:
        subprocess.run([python, "-m", "venv", f"{tmp}/venv"], check=True)
        log = OUT / "smoke.log"
        py = f"{tmp}/venv/bin/python"
        ok, _ = run([py, "-m", "pip", "install", "-q", f"{wheel}[limits]"], log, cwd=Path(tmp))
        script = (
            "import redis, redis_throttle.limits\n"
            "from limits import RateLimitItemPerMinute\n"
            "from limits.storage import storage_from_string\n"
            "from limits.strategies import MovingWindowRateLimiter\n"
            "from redis_throttle import Throttle\n"
            f"uri = 'redis+throttle://127.0.0.1:{servers.module.port}'\n"
            "limiter = MovingWindowRateLimiter(storage_from_string(uri, key_prefix='smoke'))\n"
            "item = RateLimitItemPerMinute(2)\n"
            "assert [limiter.hit(item, 'me') for _ in range(3)] == [True, True, False]\n"
            f"t = Throttle(redis.Redis(port={servers.module.port}))\n"
            "assert t.window('smoke:typed', 2, 60).remaining == 1\n"
            "assert redis_throttle.limits.__file__.startswith(" + repr(tmp) + ")\n"
            "print('smoke: ok')\n"
        )
        if ok:
            ok, _ = run([py, "-c", script], log, cwd=Path(tmp))
        if not ok:
            say(tail(log))
    return ok, time.monotonic() - began


def run_row(row: Row, version: tuple[int, int], py: Path, wheel: Path, env: dict[str, str]) -> tuple[bool, str]:
    """The wheel into the row's venv, then ruff, mypy and pytest: whether all passed, and
    pytest's last line."""
    logs = OUT / row.name / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    pip = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", "--force-reinstall"]
    ok, _ = run([*pip, str(wheel)], logs / "install.log")
    python = f"{version[0]}.{version[1]}"
    mypy = [str(py.parent / "mypy"), "--python-version", python, "--cache-dir", str(OUT / row.name / "mypy-cache")]
    commands = {
        "ruff": [str(py.parent / "ruff"), "check", "--no-cache", "src", "tests", "bench"],
        "mypy": mypy + row.mypy_files,
        "pytest": [str(py), "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=25", *row.tests],
    }
    # The three at once (mypy and pytest take the longest, and wait on different things).
    done: dict[str, tuple[bool, float]] = {}
    checks = [
        threading.Thread(target=lambda name=name, cmd=cmd: done.update({name: run(cmd, logs / f"{name}.log", env=env)}))
        for name, cmd in commands.items()
    ]
    for check in checks:
        check.start()
    for check in checks:
        check.join()
    steps, line = [], ""
    for name in commands:
        log = logs / f"{name}.log"
        step_ok, took = done[name]
        if name == "pytest":
            last = log.read_text(errors="replace").strip().splitlines()
            line = last[-1].strip("= ") if last else "no output"
        found = f" ({line})" if name == "pytest" else ""
        steps.append(f"{name} {'ok' if step_ok else 'FAILED'} in {took:.0f} s{found}")
        if not step_ok:
            say(f"--- {row.name}: {name} failed ({log}):\n{tail(log)}")
        ok = ok and step_ok
    say(f"{row.name} (Python {python}): " + ", ".join(steps))
    return ok, line


class Jobs:
    """Threads, each job's failure kept to be raised in the main thread."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []

    def start(self, job: Callable[[], None]) -> None:
        def run() -> None:
            try:
                job()
            except BaseException as err:  # (raised again by join)
                self.errors.append(err)

        thread = threading.Thread(target=run)
        thread.start()
        self.threads.append(thread)

    def join(self) -> None:
        for thread in self.threads:
            thread.join()
        if self.errors:
            raise self.errors[0]


def main() -> int:
    """Venvs, the wheel and the servers are made at once; then the rows run at once (tests that
    change what the others see run alone: tests/conftest.py), and the clean-venv smoke test."""
    began = time.monotonic()
    args = sys.argv[1:]
    found = pythons()
    OUT.mkdir(parents=True, exist_ok=True)
    if args[:1] == ["--venv"]:
        row = next(r for r in ROWS if r.name == args[1])
        chosen = pick(row, found)
        if chosen is None:
            raise SystemExit(f"no Python for the row {row.name}")
        say(str(venv(row, *chosen)))
        return 0
    say(f"python matrix: Pythons here: {', '.join(f'{a}.{b}' for a, b in sorted(found))}")
    newest = pick(ROWS[1], found)
    if newest is None:
        raise SystemExit("the matrix needs Python 3.10 or later: apt-get install python3 python3-venv")
    plan: list[tuple[Row, str, tuple[int, int]]] = []
    notes: list[str] = []
    for row in [r for r in ROWS if not args or r.name in args]:
        chosen = pick(row, found)
        if chosen is None:
            if not row.optional:
                raise SystemExit(f"the row {row.name} needs Python 3.10 or later: apt-get install python3 python3-venv")
            notes.append(f"{row.name}: not run, no Python {row.python} on this machine")
            continue
        plan.append((row, *chosen))

    made: dict[str, object] = {}
    setup = Jobs()
    setup.start(lambda: made.update(servers=Servers.start(Path(tempfile.mkdtemp(prefix="rt-py-matrix-")))))
    setup.start(lambda: made.update(wheel=build_wheel(venv(ROWS[1], *newest))))
    for row, python, version in plan:
        if row is not ROWS[1]:
            setup.start(
                lambda row=row, python=python, version=version: made.update({row.name: venv(row, python, version)})
            )
    try:
        setup.join()
    except BaseException:
        if "servers" in made:
            made["servers"].stop()  # type: ignore[attr-defined]
        raise
    servers, wheel = made["servers"], made["wheel"]
    assert isinstance(servers, Servers) and isinstance(wheel, Path)
    listing = OUT / "servers.json"
    servers.save(listing)
    env = {**os.environ, "THROTTLE_TEST_SERVERS": str(listing)}

    results: dict[str, tuple[tuple[int, int], dict[str, str], str, bool]] = {}
    smoked: list[bool] = []
    rows = Jobs()
    try:
        for row, _, version in plan:
            py = OUT / row.name / "bin" / "python"

            def job(row: Row = row, version: tuple[int, int] = version, py: Path = py) -> None:
                ok, line = run_row(row, version, py, wheel, env)
                results[row.name] = (version, versions(py), line, ok)

            rows.start(job)

        def smoke_job() -> None:
            ok, took = smoke(wheel, newest[0], servers)
            smoked.append(ok)
            say(f"wheel in a clean venv outside the checkout: {'ok' if ok else 'FAILED'} ({took:.0f} s)")

        rows.start(smoke_job)
        rows.join()
    finally:
        servers.stop()

    table = ["| row | Python | " + " | ".join(SHOWN) + " | checks |", "|---" * (len(SHOWN) + 3) + "|"]
    for row, _, _ in plan:
        version, shown, line, ok = results[row.name]
        cells = [row.name, f"{version[0]}.{version[1]}"] + [shown[name] or "—" for name in SHOWN]
        found = re.sub(r" in [0-9.]+s.*$", "", line)  # (the time is the log's, not the table's)
        table.append("| " + " | ".join(cells) + f" | {'ruff, mypy --strict, ' + found if ok else 'FAILED: ' + line} |")
    (OUT / "table.md").write_text("\n".join(table) + "\n")
    say("\n".join(table))
    for note in notes:
        say(note)
    passed = all(ok for *_, ok in results.values()) and all(smoked)
    say(f"python matrix: {'ok' if passed else 'FAILED'} in {time.monotonic() - began:.0f} s")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
