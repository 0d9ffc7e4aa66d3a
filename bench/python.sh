#!/usr/bin/env bash
# make bench: limits' strategies (Flask-Limiter, slowapi) through limits' own Redis storage and
# through redis_throttle.limits on the module and on the Functions twin, in one run: round trips
# per request, Redis CPU per request (INFO commandstats) and requests per second
# (clients/python/bench/limits_bench.py, in the venv of make test-python).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${PYTHON_VENV:-target/venv-python}
test -x "$VENV/bin/python" || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r clients/python/requirements-dev.txt
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation --force-reinstall ./clients/python
THROTTLE_MODULE=$(pwd)/target/release/libredis_throttle.so "$VENV/bin/python" clients/python/bench/limits_bench.py "${PYTHON_BENCH_REQUESTS:-2000}"
