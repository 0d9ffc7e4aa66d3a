#!/usr/bin/env bash
# Writes each row's lockfile (NAME.txt: every package pinned with ==, markers for the Pythons
# it may run on) from NAME.in, with uv's universal resolver (uv from PyPI, into target/uv).
# Run it to move a row to newer releases; tests/matrix.py installs the lockfiles as they are.
set -euo pipefail
cd "$(dirname "$0")"
root=$(cd ../../.. && pwd)
uv_venv=$root/target/uv
test -x "$uv_venv/bin/uv" || { python3 -m venv "$uv_venv" && "$uv_venv/bin/pip" install -q uv; }
export UV_PYTHON_DOWNLOADS=never SSL_CERT_FILE=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}
for row in oldest:3.10 newest:3.10 py39:3.9; do
  name=${row%%:*} python=${row#*:}
  "$uv_venv/bin/uv" pip compile --quiet --universal --python-version "$python" --no-header --no-annotate \
    "$name.in" -o "$name.txt.new"
  { echo "# Lockfile of the matrix row '$name' (from $name.in by lock.sh): Python $python and later."; cat "$name.txt.new"; } >"$name.txt"
  rm "$name.txt.new"
done
