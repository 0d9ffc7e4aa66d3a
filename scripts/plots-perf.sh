#!/usr/bin/env bash
# make plots-perf: the figures of the performance chart (docs/src/img/performance.tsv), then the
# chart (docs/src/img/performance.svg). bench/run.sh's CPU table (INFO commandstats, redis-benchmark,
# 50 clients, pipeline 16, REQUESTS per scenario) in two runs, each measuring SET and the C floor
# module (bench/floor.c) next to its commands: one with this module, one with redis-cell loaded
# instead (both register CL.THROTTLE, so they cannot share a server).
# redis-cell: REDIS_CELL=path/to/libredis_cell.so, or REDIS_CELL_SRC=a checkout of
# github.com/brandur/redis-cell (built here with cargo into target/redis-cell); without either the
# chart has no redis-cell bar.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=docs/src/img/performance.tsv
export REQUESTS=${REQUESTS:-200000}
WORK=$(pwd)/target/bench/plots
mkdir -p "$WORK" "$(dirname "$OUT")"

cell=${REDIS_CELL:-}
if [ -z "$cell" ] && [ -n "${REDIS_CELL_SRC:-}" ]; then
  target_dir=$(pwd)/target/redis-cell
  (cd "$REDIS_CELL_SRC" && CARGO_TARGET_DIR="$target_dir" cargo build --release --lib --quiet)
  cell=$(pwd)/target/redis-cell/release/libredis_cell.so
fi

BENCH_TABLE_ONLY=1 BENCH_RESULTS="$WORK/module.tsv" bench/run.sh
if [ -n "$cell" ]; then
  BENCH_TABLE_ONLY=1 BENCH_MODULE="$cell" BENCH_EXTRA=/dev/null TWIN=0 BENCH_RESULTS="$WORK/redis-cell.tsv" bench/run.sh
else
  echo "plots-perf: no REDIS_CELL or REDIS_CELL_SRC: the chart has no redis-cell bar" >&2
  : > "$WORK/redis-cell.tsv"
fi

version=$(${THROTTLE_SERVER:-redis-server} --version | sed -n 's/.* v=\([^ ]*\).*/\1/p')
{
  echo "# command: make plots-perf (scripts/plots-perf.sh)"
  echo "# method: bench/run.sh, redis-benchmark -n $REQUESTS -c 50 -P 16, a hot key and random keys; server CPU per call from INFO commandstats"
  echo "# date: $(date -u +%Y-%m-%d)"
  echo "# server: Redis $version, $(nproc) cores$([ -n "$cell" ] && echo ", redis-cell $(git -C "${REDIS_CELL_SRC:-.}" describe --tags --always 2>/dev/null || echo "(given as REDIS_CELL)")")"
  echo "# run	name	hot_us	rand_us	hot_rps	rand_rps"
  sed 's/^/module\t/' "$WORK/module.tsv"
  # (redis-cell's run: its CL.THROTTLE, with the SET and floor of that run)
  sed -n '/^SET PX\|^module floor\|^CL.THROTTLE/s/^/redis-cell\t/p' "$WORK/redis-cell.tsv"
} > "$OUT"
echo "plots-perf: wrote $OUT"
cargo run --quiet -p redis-throttle-plots -- --only performance
