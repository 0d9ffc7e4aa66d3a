#!/usr/bin/env bash
# Images of the gateway service (docker/rls.Dockerfile), with or without a container registry.
#
#   docker/rls-image.sh local-source TAG
#                        docker/rls.Dockerfile from this checkout, FROM the local builder and base of
#                        scripts/docker-image.sh (Debian packages and this host's Rust toolchain)
#   docker/rls-image.sh build BINARY TAG
#                        the fast path: the Dockerfile's runtime stage FROM the local base, with BINARY
#                        (redis-throttle-rls built on this host, glibc of bookworm: runs on trixie)
#   docker/rls-image.sh smoke TAG REDIS_IMAGE
#                        the image as upstream's users run it: entrypoint /bin/ratelimit, ports 8080,
#                        8081 and 6070 exposed, an unprivileged user; then on a Docker network with
#                        REDIS_IMAGE (redis-server with the module) and a mounted configuration:
#                        /healthcheck, decisions over HTTP /json (200 until the limit, then 429),
#                        /rlconfig on 6070 and gRPC health `ratelimit` on 8081, from the host
#
# Never a pull: FROM names local images (scripts/docker-image.sh local-base, local-builder).
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "rls-image.sh: $*" >&2; exit 1; }
say() { echo "rls-image.sh: $*" >&2; }

local_source() {
  local tag=$1 builder base log=target/docker-rls-source.log t0=$SECONDS
  builder=$(scripts/docker-image.sh local-builder)
  base=$(scripts/docker-image.sh local-base)
  mkdir -p target
  say "building $tag from source: build stage FROM $builder, runtime FROM $base (log: $log)"
  if ! DOCKER_BUILDKIT=0 timeout "${SOURCE_TIMEOUT:-3600}" docker build -f docker/rls.Dockerfile \
       --build-arg "RUST_IMAGE=$builder" --build-arg "BASE_IMAGE=$base" -t "$tag" . >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    die "docker build of $tag failed (log: $log)"
  fi
  say "built $tag from source in $((SECONDS - t0)) s"
}

# The Dockerfile's runtime stage alone (its global ARGs and everything from its last FROM on),
# taking the binary from the build context: one definition of the image.
build() {
  local binary=$1 tag=$2 base last ctx
  [ -x "$binary" ] || die "no binary at $binary (cargo build -p redis-throttle-rls)"
  base=$(scripts/docker-image.sh local-base)
  ctx=$(mktemp -d); trap "rm -rf '$ctx'" EXIT
  cp "$binary" "$ctx/redis-throttle-rls"
  last=$(grep -n '^FROM ' docker/rls.Dockerfile | tail -n1 | cut -d: -f1)
  { sed -n '/^FROM /q; /^ARG /p' docker/rls.Dockerfile
    tail -n "+$last" docker/rls.Dockerfile | sed 's#^COPY --from=build /out/redis-throttle-rls #COPY redis-throttle-rls #'
  } > "$ctx/Dockerfile"
  grep -q '^COPY redis-throttle-rls ' "$ctx/Dockerfile" && ! grep -q -- '--from=' "$ctx/Dockerfile" \
    || die "docker/rls.Dockerfile's runtime stage no longer copies /out/redis-throttle-rls from the build stage: update this script"
  say "building $tag FROM $base with $binary"
  DOCKER_BUILDKIT=0 timeout 600 docker build --build-arg "BASE_IMAGE=$base" -t "$tag" "$ctx" >"$ctx/log" 2>&1 \
    || { cat "$ctx/log" >&2; die "docker build of $tag failed"; }
}

smoke() {
  local tag=$1 redis=$2 name="rls-smoke-$$" cfg got port http grpc debug
  [ "$(docker image inspect -f '{{json .Config.Entrypoint}}' "$tag")" = '["/bin/ratelimit"]' ] \
    || die "$tag: the entrypoint is not upstream's /bin/ratelimit"
  got=$(docker image inspect -f '{{range $p, $_ := .Config.ExposedPorts}}{{$p}} {{end}}' "$tag")
  [ "$got" = "6070/tcp 8080/tcp 8081/tcp " ] || die "$tag exposes '$got', not upstream's 8080, 8081 and 6070"
  [ "$(docker image inspect -f '{{.Config.User}}' "$tag")" = 65532:65532 ] || die "$tag does not run as 65532 (upstream's nonroot)"
  cfg=$(mktemp -d)
  # (Expanded now: the function's locals are gone when the shell exits.)
  trap "docker rm -f '$name-redis' '$name' >/dev/null 2>&1 || true; docker network rm '$name' >/dev/null 2>&1 || true; rm -rf '$cfg'" EXIT
  mkdir -p "$cfg/config"
  printf 'domain: smoke\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 3}\n' > "$cfg/config/smoke.yaml"
  chmod -R a+rX "$cfg"
  docker network create "$name" >/dev/null
  docker run -d --rm --network "$name" --name "$name-redis" "$redis" >/dev/null || die "docker run $redis failed"
  docker run -d --rm --network "$name" --name "$name" -p 127.0.0.1::8080 -p 127.0.0.1::8081 -p 127.0.0.1::6070 \
    -e REDIS_SOCKET_TYPE=tcp -e REDIS_URL="$name-redis:6379" -e USE_STATSD=false -e LOG_LEVEL=info \
    -e RUNTIME_ROOT=/data -e RUNTIME_SUBDIRECTORY=ratelimit -e RUNTIME_WATCH_ROOT=false \
    -v "$cfg:/data/ratelimit:ro" "$tag" >/dev/null || die "docker run $tag failed"
  port() { docker port "$name" "$1/tcp" | head -n1 | sed 's/.*://'; }
  http=$(port 8080) grpc=$(port 8081) debug=$(port 6070)
  fail() { docker logs "$name" >&2 || true; die "$tag: $*"; }
  for _ in $(seq 1 150); do
    [ "$(curl -s "127.0.0.1:$http/healthcheck" 2>/dev/null)" = OK ] && break
    sleep 0.2
  done
  [ "$(curl -s "127.0.0.1:$http/healthcheck")" = OK ] || fail "/healthcheck never answered OK"
  local body='{"domain":"smoke","descriptors":[{"entries":[{"key":"user","value":"alice"}]}]}' codes=""
  for _ in 1 2 3 4; do
    codes="$codes$(curl -s -o "$cfg/reply" -w '%{http_code}' -d "$body" "127.0.0.1:$http/json") "
  done
  [ "$codes" = "200 200 200 429 " ] || fail "/json answered $codes, not 200 200 200 429"
  grep -q '"overallCode":"OVER_LIMIT"' "$cfg/reply" || fail "the fourth /json reply: $(cat "$cfg/reply")"
  curl -s "127.0.0.1:$debug/rlconfig" | grep -q '^smoke.user: unit=MINUTE requests_per_unit=3' || fail "/rlconfig on 6070: $(curl -s "127.0.0.1:$debug/rlconfig")"
  # gRPC health of service `ratelimit` (HealthCheckRequest{service: "ratelimit"}, gRPC-framed):
  # SERVING is the reply 08 01.
  printf '\x00\x00\x00\x00\x0b\x0a\x09ratelimit' > "$cfg/health"
  got=$(curl -s --http2-prior-knowledge -H 'content-type: application/grpc' -H 'te: trailers' \
    --data-binary @"$cfg/health" "http://127.0.0.1:$grpc/grpc.health.v1.Health/Check" | od -An -tx1 | tr -d ' \n')
  [ "$got" = 00000000020801 ] || fail "gRPC health on 8081 answered '$got', not SERVING"
  say "$tag: /bin/ratelimit on 8080/8081/6070 as user 65532; /healthcheck OK, /json 200 until the limit then 429, /rlconfig, gRPC health SERVING (Redis: $redis)"
}

case "${1:-}" in
  local-source) [ $# -eq 2 ] || die "usage: local-source TAG"; local_source "$2" ;;
  build) [ $# -eq 3 ] || die "usage: build BINARY TAG"; build "$2" "$3" ;;
  smoke) [ $# -eq 3 ] || die "usage: smoke TAG REDIS_IMAGE"; smoke "$2" "$3" ;;
  *) die "usage: docker/rls-image.sh local-source TAG | build BINARY TAG | smoke TAG REDIS_IMAGE" ;;
esac
