#!/usr/bin/env bash
# Images of the module (docker/Dockerfile), with or without a container registry.
#
#   scripts/docker-image.sh build BASE TAG MODULE   docker build of docker/Dockerfile FROM BASE, with
#                                                   MODULE (a built libredis_throttle.so) as the only context
#   scripts/docker-image.sh local-base              imports the trixie rootfs of scripts/servers.sh (Debian's
#                                                   Redis 8.0.2) as LOCAL_BASE (default redis-throttle-base:trixie),
#                                                   unless that image already holds this very rootfs; prints its name
#   scripts/docker-image.sh smoke TAG               `docker run -p 127.0.0.1::6379 TAG`, then CL.THROTTLE from the host
#
# Classic builder, never a pull: FROM must name an image the engine has, or one a registry serves.
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "docker-image.sh: $*" >&2; exit 1; }
say() { echo "docker-image.sh: $*" >&2; }
LOCAL_BASE="${LOCAL_BASE:-redis-throttle-base:trixie}"

build() {
  local base=$1 tag=$2 module=$3
  [ -f "$module" ] || die "no module at $module: run cargo build --release --lib (make docker does)"
  ctx=$(mktemp -d); trap 'rm -rf "$ctx" "$ctx.log"' EXIT
  cp "$module" "$ctx/libredis_throttle.so"
  say "building $tag FROM $base"
  if ! DOCKER_BUILDKIT=0 timeout 600 docker build -f docker/Dockerfile --build-arg "BASE=$base" -t "$tag" "$ctx" >"$ctx.log" 2>&1; then
    cat "$ctx.log" >&2
    die "docker build of $tag FROM $base failed (without a registry, FROM must be a local image: make docker-local)"
  fi
}

local_base() {
  local rootfs stamp have
  rootfs=$(scripts/servers.sh --rootfs)
  stamp=$(sha256sum "$(dirname "$rootfs")/.complete" | cut -c1-16)
  have=$(docker image inspect -f '{{ index .Config.Labels "throttle.rootfs" }}' "$LOCAL_BASE" 2>/dev/null || true)
  if [ "$have" != "$stamp" ]; then
    say "importing $rootfs as $LOCAL_BASE"
    tar -C "$rootfs" -c . | timeout 600 docker import \
      --change "LABEL throttle.rootfs=$stamp" --change 'CMD ["redis-server"]' - "$LOCAL_BASE" >/dev/null \
      || die "docker import of $rootfs failed"
  fi
  echo "$LOCAL_BASE"
}

smoke() {
  local tag=$1 port reply
  id=$(docker run -d --rm -p 127.0.0.1::6379 "$tag") || die "docker run $tag failed"
  trap 'docker rm -f "$id" >/dev/null 2>&1 || true' EXIT
  port=$(docker port "$id" 6379/tcp | head -n1 | sed 's/.*://')
  [ -n "$port" ] || die "no published port for $tag"
  for _ in $(seq 1 100); do
    [ "$(redis-cli -p "$port" PING 2>/dev/null)" = PONG ] && break
    sleep 0.2
  done
  reply=$(redis-cli -p "$port" CL.THROTTLE smoke 4 1 10 | tr '\n' ' ')
  [ "$reply" = "0 5 4 -1 10 " ] || { docker logs "$id" >&2 || true; die "$tag: CL.THROTTLE from the host answered '$reply'"; }
  say "$tag: docker run -p works, CL.THROTTLE answers from the host ($reply)"
}

case "${1:-}" in
  build) [ $# -eq 4 ] || die "usage: build BASE TAG MODULE"; build "$2" "$3" "$4" ;;
  local-base) local_base ;;
  smoke) [ $# -eq 2 ] || die "usage: smoke TAG"; smoke "$2" ;;
  *) die "usage: scripts/docker-image.sh build BASE TAG MODULE | local-base | smoke TAG" ;;
esac
