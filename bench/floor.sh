#!/usr/bin/env bash
# Builds the floor module (bench/floor.c) against the redis-module crate's redismodule.h into
# target/bench/floor.so and prints its path (bench/run.sh, scripts/plots-perf.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
FLOOR=$(pwd)/target/bench/floor.so
header=$(cargo metadata --format-version 1 2>/dev/null | python3 -c '
import json, os, sys
for p in json.load(sys.stdin)["packages"]:
    if p["name"] == "redis-module":
        print(os.path.join(os.path.dirname(p["manifest_path"]), "src", "include")); break')
[ -f "$header/redismodule.h" ] || { echo "bench: redismodule.h not found (cargo metadata)" >&2; exit 1; }
mkdir -p "$(dirname "$FLOOR")"
cc -O2 -fPIC -shared -I"$header" bench/floor.c -o "$FLOOR"
echo "$FLOOR"
