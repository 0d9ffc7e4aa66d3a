#!/usr/bin/env bash
# make bench: limits' strategies (Flask-Limiter, slowapi) through limits' own Redis storage and
# through redis_throttle.limits on the module and on the Functions twin, in one run: round trips
# per request, Redis CPU per request (INFO commandstats) and requests per second, beside the floor
# rows (clients/python/bench/limits_bench.py, in the venv of the test matrix's newest row).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=$(python3 clients/python/tests/matrix.py --venv newest)
"$PY" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation --force-reinstall ./clients/python
THROTTLE_MODULE=${THROTTLE_MODULE:-$(pwd)/target/release/libredis_throttle.so} "$PY" clients/python/bench/limits_bench.py "${PYTHON_BENCH_REQUESTS:-2000}"
