#!/usr/bin/env bash
# make plots-perf: the figures of the performance chart (docs/src/img/performance.tsv), then the
# chart (docs/src/img/performance.svg). CPU per call as instructions, counted by callgrind
# (bench/instructions.sh: exact, whatever the load of the machine), for the module's commands,
# SET, the C floor module (bench/floor.c) and a Lua GCRA script; then again with redis-cell loaded
# instead of the module (both register CL.THROTTLE, so they cannot share a server).
# redis-cell: REDIS_CELL=path/to/libredis_cell.so, or REDIS_CELL_SRC=a checkout of
# github.com/brandur/redis-cell (built here with cargo into target/redis-cell); without either the
# chart has no redis-cell bar. CALLS: calls per scenario (default 10000). The chart
# (`cargo run -p redis-throttle-plots -- --only performance`) also rewrites the figures the README,
# docs/src/performance.md and docs/src/pictures.md quote from this run (their perf:… blocks);
# the scale chart (docs/src/img/scale.svg) and performance.md's perf:scale block come from
# bench/scale.sh's run (docs/src/img/scale.tsv).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=docs/src/img/performance.tsv
CALLS=${CALLS:-10000}
WORK=$(pwd)/target/bench/plots
mkdir -p "$WORK" "$(dirname "$OUT")"
bench/floor.sh >/dev/null

cell=${REDIS_CELL:-}
if [ -z "$cell" ] && [ -n "${REDIS_CELL_SRC:-}" ]; then
  target_dir=$(pwd)/target/redis-cell
  (cd "$REDIS_CELL_SRC" && CARGO_TARGET_DIR="$target_dir" cargo build --release --lib --quiet)
  cell=$target_dir/release/libredis_cell.so
fi

# The chart's commands, and what the README and docs/src/performance.md quote besides (CL.QUOTA,
# denials, CL.ALL of 1 and 8, random keys among 100,000 limiters): all from this one run.
ONLY='^(CL\.THROTTLE|CL\.WINDOW limit 100|CL\.BUCKET|CL\.COUNTER|CL\.QUOTA|CL\.QUOTA zone \+ anchor|CL\.PACE|CL\.ALL [138] limiters?|Lua GCRA \(EVALSHA\)|CL\.THROTTLE denied|CL\.THROTTLE denied, events|module floor \(whole\)|CL\.THROTTLE, 100k (limiters|reloaded) \(whole\))$'
BENCH_ONLY=$ONLY BENCH_RESULTS="$WORK/module.tsv" bench/instructions.sh "$CALLS"
if [ -n "$cell" ]; then
  BENCH_ONLY='^CL\.THROTTLE$' THROTTLE_MODULE="$cell" BENCH_RESULTS="$WORK/redis-cell.tsv" bench/instructions.sh "$CALLS"
else
  echo "plots-perf: no REDIS_CELL or REDIS_CELL_SRC: the chart has no redis-cell bar" >&2
  : > "$WORK/redis-cell.tsv"
fi

version=$(${THROTTLE_SERVER:-redis-server} --version | sed -n 's/.* v=\([^ ]*\).*/\1/p')
cell_version=""
if [ -n "$cell" ]; then
  cell_version=" (redis-cell $(git -C "${REDIS_CELL_SRC:-$(dirname "$cell")}" describe --tags --always 2>/dev/null || echo "$cell") on a server of its own)"
fi
{
  echo "# command: make plots-perf"
  echo "# method: bench/instructions.sh $CALLS: callgrind, the server's call() only, a hot key, $CALLS calls per scenario"
  echo "# date: $(date -u +%Y-%m-%d)"
  echo "# server: Redis $version with redis-throttle$cell_version"
  echo "# run	name	instructions per call"
  sed 's/^/module\t/' "$WORK/module.tsv"
  sed 's/^/redis-cell\t/' "$WORK/redis-cell.tsv"
} > "$OUT"
echo "plots-perf: wrote $OUT"
# The cost at scale (bench/scale.sh, a few minutes): docs/src/img/scale.tsv, then its chart.
SCALE_RESULTS=docs/src/img/scale.tsv bench/scale.sh
cargo run --quiet -p redis-throttle-plots -- --only performance,scale
