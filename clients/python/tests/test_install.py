"""The package as users get it, outside the checkout: the sdist carries the twin, a wheel built
from the checkout, from the sdist and from the repository's git URL (the pip VCS-subdirectory
form) each carry it as redis_throttle/throttle.lua; the wheel built from the sdist, installed in
a clean virtual environment in a temporary directory, loads the twin into a plain redis-server
with its CLI and Flask-Limiter answers 429 through it. (make dist-test installs the wheel with
its dependencies from the index.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT, Server

PACKAGE = ROOT / "clients/python"
VERSION = re.search(r'^version = "(.+)"$', (PACKAGE / "pyproject.toml").read_text(), re.M).group(1)  # type: ignore[union-attr]


def run(*args: str | Path, cwd: Path) -> str:
    # Nothing of the checkout on the paths: no PYTHONPATH, run from the temporary directory.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    out = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"{' '.join(map(str, args))}: {out.stdout}{out.stderr}"
    return out.stdout


def wheel(source: Path | str, into: Path) -> None:
    """`pip wheel` of `source` (a folder, an sdist or a VCS URL) into `into`, with the venv's hatchling."""
    run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "-q",
        "--no-deps",
        "--no-build-isolation",
        "-w",
        into,
        source,
        cwd=into.parent,
    )


def wheel_twin(path: Path) -> bytes:
    with zipfile.ZipFile(path) as z:
        return z.read("redis_throttle/throttle.lua")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sdist, and wheels built from the checkout and from the sdist (make test-python's venv has hatchling)."""
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "hatchling", "build", "-t", "sdist", "-d", out, cwd=PACKAGE)
    wheel(PACKAGE, out / "checkout")
    sdist = out / f"redis_throttle-{VERSION}.tar.gz"
    wheel(sdist, out / "sdist")
    name = f"redis_throttle-{VERSION}-py3-none-any.whl"
    return {"dir": out, "sdist": sdist, "wheel": out / "checkout" / name, "wheel_from_sdist": out / "sdist" / name}


def test_the_sdist_and_both_wheels_carry_the_twin(built: dict[str, Path]) -> None:
    library = (ROOT / "functions/throttle.lua").read_bytes()
    with tarfile.open(built["sdist"]) as t:
        member = t.extractfile(f"redis_throttle-{VERSION}/functions/throttle.lua")
        assert member is not None and member.read() == library
    assert wheel_twin(built["wheel"]) == library
    assert wheel_twin(built["wheel_from_sdist"]) == library


def test_the_pip_vcs_subdirectory_form_builds_a_wheel_with_the_twin(tmp_path: Path) -> None:
    """`pip install "git+https://…/redis-throttle.git#subdirectory=clients/python"`, here from a
    git repository of the checkout's files (committed or not, .gitignore applied, as
    scripts/docs-shell.py makes one: the checkout may be a source archive without .git) through a
    git+file:// URL."""
    repo = tmp_path / "repo.git"
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@localhost", f"--git-dir={repo}", f"--work-tree={ROOT}"]
    run("git", "init", "-q", "--bare", repo, cwd=tmp_path)
    run(*git, "add", "-A", cwd=tmp_path)
    run(*git, "commit", "-q", "-m", "the checkout's files", cwd=tmp_path)
    wheel(f"git+file://{repo}#subdirectory=clients/python", tmp_path / "vcs")
    (built,) = (tmp_path / "vcs").glob("redis_throttle-*.whl")
    assert wheel_twin(built) == (Path(ROOT) / "functions/throttle.lua").read_bytes()


def test_the_wheel_from_the_sdist_in_a_clean_venv_loads_the_twin_and_flask_limiter_answers_429(
    built: dict[str, Path], tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    python = venv / "bin/python"
    run(
        sys.executable,
        *("-m", "pip", "--python", python, "install", "-q", "--disable-pip-version-check", "--no-deps", "--no-index"),
        built["wheel_from_sdist"],
        cwd=tmp_path,
    )
    # The app's other libraries (redis-py, Flask, Flask-Limiter, limits: the pinned dev
    # requirements) from make test-python's venv, after the clean venv's own site-packages, so
    # the package under test is the wheel's.
    site = run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=tmp_path).strip()
    (Path(site) / "zz-host-libraries.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    server = Server("plain")
    try:
        loaded = run(python, "-m", "redis_throttle", "twin", "load", server.url, cwd=tmp_path)
        assert re.search(
            rf"the Functions twin {re.escape(VERSION)} on 1 server:\n  127\.0\.0\.1:{server.port}  loaded", loaded
        )
        app = tmp_path / "app.py"
        app.write_text(
            f"""
import flask, redis_throttle, redis_throttle.limits
from flask_limiter import Limiter
from flask_limiter.util import get_remote_address
assert redis_throttle.__file__.startswith({str(venv)!r}), redis_throttle.__file__
app = flask.Flask("app")
limiter = Limiter(get_remote_address, app=app, storage_uri="redis+throttle://127.0.0.1:{server.port}")
@app.route("/")
@limiter.limit("2/minute")
def index():
    return "ok"
client = app.test_client()
print([client.get("/").status_code for _ in range(3)])
"""
        )
        assert run(python, app, cwd=tmp_path).strip() == "[200, 200, 429]"
    finally:
        server.stop()
