#!/usr/bin/env bash
# The behavioural tests with every server in a container (testcontainers, THROTTLE_BACKEND=container).
#
#   scripts/container-tests.sh [--if-reachable] MODULE
#       builds the test image TEST_IMAGE with MODULE (built on this host) on CONTAINER_BASE (default:
#       a base imported from Debian's Redis 8.0.2 rootfs, so no registry is needed) and copies MODULE
#       into every container
#   scripts/container-tests.sh --image TAG
#       tests an image that carries its own module (built from source: scripts/docker-image.sh source);
#       every container loads the module named by the image's `--loadmodule`
#
# Either way it checks `docker run -p` end to end, then runs every tests/*.rs against containers
# of the image, except the files marked `//! skip containers: why` (scripts/skips.sh containers:
# they need replicas, restarts, a cluster or servers of their own). No Docker engine: an error; with
# --if-reachable a clear notice instead, except under CI=true, where it is an error.
# Env: CONTAINER_BASE, TEST_IMAGE (default redis-throttle:local), CARGO.
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "container-tests: $*" >&2; exit 1; }
usage() { die "usage: scripts/container-tests.sh [--if-reachable] MODULE | --image TAG"; }
if_reachable=false image= module=
case "${1:-}" in
  --image) [ $# -eq 2 ] || usage; image=$2 ;;
  --if-reachable) [ $# -eq 2 ] || usage; if_reachable=true; module=$2 ;;
  *) [ $# -eq 1 ] || usage; module=$1 ;;
esac
TEST_IMAGE="${image:-${TEST_IMAGE:-redis-throttle:local}}"
native_only=" $(scripts/skips.sh containers | tr '\n' ' ') "

if ! scripts/docker-engine.sh --check; then
  msg="no Docker engine answers \`docker info\`, so the container tests cannot run"
  if [ "${CI:-}" = true ] || [ "$if_reachable" = false ]; then
    die "$msg (as root, scripts/docker-engine.sh installs and starts one; .ci/run does)"
  fi
  echo "======================================================================" >&2
  echo "container tests NOT RUN: $msg." >&2
  echo "Enable them: start a Docker engine (as root: scripts/docker-engine.sh), then make test." >&2
  echo "======================================================================" >&2
  exit 0
fi

t0=$SECONDS
if [ -n "$image" ]; then
  in_image=$(docker image inspect -f '{{range .Config.Entrypoint}}{{println .}}{{end}}' "$image" | sed -n '/^--loadmodule$/{n;p;q}') \
    || die "no image $image (scripts/docker-image.sh source builds one)"
  [ -n "$in_image" ] || die "$image's entrypoint has no --loadmodule"
  module_env=(THROTTLE_IMAGE_MODULE="$in_image")
  about="the image's own module, $in_image"
  t1=$SECONDS
else
  module=$(realpath "$module")
  module_env=(THROTTLE_MODULE="$module")
  base="${CONTAINER_BASE:-$(scripts/docker-image.sh local-base)}"
  about="FROM $base, $module copied in"
  t1=$SECONDS
  scripts/docker-image.sh build "$base" "$TEST_IMAGE" "$module"
fi
scripts/docker-image.sh smoke "$TEST_IMAGE"
t2=$SECONDS

targets=()
for f in tests/*.rs; do
  name=$(basename "$f" .rs)
  case "$native_only" in *" $name "*) continue ;; esac
  targets+=(--test "$name")
done
[ ${#targets[@]} -gt 0 ] || die "no test files to run in containers"
mkdir -p target
log=target/container-tests.log
echo "container-tests: ${targets[*]} against $TEST_IMAGE ($about)" >&2
set +e
env THROTTLE_BACKEND=container THROTTLE_IMAGE="$TEST_IMAGE" "${module_env[@]}" \
  timeout 1200 "${CARGO:-cargo}" test --no-fail-fast "${targets[@]}" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
t3=$SECONDS
passed=$(grep -E '^test result:' "$log" | sed -E 's/.* ([0-9]+) passed.*/\1/' | awk '{s+=$1} END {print s+0}')
echo "container-tests: base image $((t1 - t0)) s, test image + smoke $((t2 - t1)) s, tests $((t3 - t2)) s; $passed passed" >&2
[ "$rc" = 0 ] || die "container tests failed (exit $rc; log: $log)"
[ "$passed" -gt 0 ] || die "no container test ran (log: $log)"
