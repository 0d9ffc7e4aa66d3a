#!/usr/bin/env bash
# Images of the module (docker/Dockerfile), with or without a container registry.
#
#   scripts/docker-image.sh source RUST_IMAGE REDIS_IMAGE TAG
#                                   docker build of docker/Dockerfile from this checkout: the module is
#                                   compiled in the build stage (FROM RUST_IMAGE), the runtime is REDIS_IMAGE;
#                                   an empty RUST_IMAGE/REDIS_IMAGE keeps the Dockerfile's default
#   scripts/docker-image.sh local-source TAG
#                                   `source` with LOCAL_BUILDER and LOCAL_BASE (below): no registry needed
#   scripts/docker-image.sh build BASE TAG MODULE
#                                   the fast path: the Dockerfile's runtime stage FROM BASE, with MODULE (a
#                                   libredis_throttle.so built on this host) as the only context
#   scripts/docker-image.sh local-base
#                                   imports the trixie rootfs of scripts/servers.sh (Debian's Redis 8.0.2) as
#                                   LOCAL_BASE (default redis-throttle-base:trixie), unless that image already
#                                   holds this very rootfs; prints its name
#   scripts/docker-image.sh local-builder
#                                   LOCAL_BUILDER (default redis-throttle-builder:trixie): LOCAL_BASE plus gcc and
#                                   libclang from Debian and the Rust toolchain this host builds with (RUST_SYSROOT,
#                                   default `rustc --print sysroot`), unless it is already that; prints its name.
#                                   BUILDER_BASE replaces LOCAL_BASE (scripts/docker-arm64.sh: an arm64 one)
#   scripts/docker-image.sh smoke TAG
#                                   `docker run -p 127.0.0.1::6379 TAG`, then the README's CL.THROTTLE from the host
#
# DOCKER_PLATFORM (e.g. linux/arm64) is passed to `docker build --platform` by `source` and
# `local-builder`; SOURCE_TIMEOUT (seconds, default 3600) bounds `source`.
# `source` uses BuildKit when buildx is installed (DOCKER_BUILDKIT decides if set), the rest the classic
# builder; never a pull: FROM must name an image the engine has, or one a registry serves.
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "docker-image.sh: $*" >&2; exit 1; }
say() { echo "docker-image.sh: $*" >&2; }
LOCAL_BASE="${LOCAL_BASE:-redis-throttle-base:trixie}"
LOCAL_BUILDER="${LOCAL_BUILDER:-redis-throttle-builder:trixie}"

# The classic builder unless BuildKit is available (buildx) or DOCKER_BUILDKIT says otherwise.
builder_env() {
  if [ -z "${DOCKER_BUILDKIT:-}" ] && ! docker buildx version >/dev/null 2>&1; then export DOCKER_BUILDKIT=0; fi
}

source_build() {
  local rust=$1 redis=$2 tag=$3 log=target/docker-source.log t0=$SECONDS
  local args=(${DOCKER_PLATFORM:+--platform "$DOCKER_PLATFORM"})
  [ -z "$rust" ] || args+=(--build-arg "RUST_IMAGE=$rust")
  [ -z "$redis" ] || args+=(--build-arg "REDIS_IMAGE=$redis")
  builder_env
  mkdir -p target
  say "building $tag from source: build stage FROM ${rust:-its default RUST_IMAGE}, runtime FROM ${redis:-its default REDIS_IMAGE} (log: $log)"
  # The steps as they start; cargo's output only in the log, or below when the build fails.
  set +e
  timeout "${SOURCE_TIMEOUT:-3600}" docker build -f docker/Dockerfile "${args[@]}" -t "$tag" . 2>&1 \
    | tee "$log" | grep --line-buffered -E '^(Step [0-9]+/[0-9]+ : |#[0-9]+ \[)' >&2
  local rc=${PIPESTATUS[0]}
  set -e
  if [ "$rc" != 0 ]; then
    tail -n 60 "$log" >&2
    die "docker build of $tag from source failed (log: $log; without a registry, both bases must be local images: make docker-local-source)"
  fi
  say "built $tag from source in $((SECONDS - t0)) s ($(docker image inspect -f '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1/1e6}'))"
}

# The Dockerfile's runtime stage alone (its global ARGs and everything from its last FROM on),
# taking the module from the build context instead of the build stage: one definition of the image.
runtime_dockerfile() {
  local last
  last=$(grep -n '^FROM ' docker/Dockerfile | tail -n1 | cut -d: -f1)
  sed -n '/^FROM /q; /^ARG /p' docker/Dockerfile
  tail -n "+$last" docker/Dockerfile | sed 's#^COPY --from=build /out/libredis_throttle.so #COPY libredis_throttle.so #'
}

build() {
  local base=$1 tag=$2 module=$3
  [ -f "$module" ] || die "no module at $module: run cargo build --release --lib (make docker-local does)"
  ctx=$(mktemp -d); trap 'rm -rf "$ctx" "$ctx.log"' EXIT
  cp "$module" "$ctx/libredis_throttle.so"
  runtime_dockerfile > "$ctx/Dockerfile"
  grep -q '^COPY libredis_throttle.so ' "$ctx/Dockerfile" && ! grep -q -- '--from=' "$ctx/Dockerfile" \
    || die "docker/Dockerfile's runtime stage no longer copies /out/libredis_throttle.so from the build stage: update runtime_dockerfile"
  say "building $tag FROM $base with the module built on this host"
  if ! DOCKER_BUILDKIT=0 timeout 600 docker build --build-arg "REDIS_IMAGE=$base" -t "$tag" "$ctx" >"$ctx.log" 2>&1; then
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

# Debian trixie's own rustc (1.85) is older than the lockfile's crates allow (backtrace and time
# need 1.88): the builder carries the toolchain this host builds with, on LOCAL_BASE (so the
# module's glibc is the runtime's), with gcc and libclang from Debian. Cargo in it trusts the
# host's CA bundle (HOST_CA_BUNDLE), so it reaches crates.io wherever the host does, also through a
# TLS-inspecting proxy whose CA only the host knows.
local_builder() {
  local base sysroot stamp have ca="${HOST_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
  base=${BUILDER_BASE:-$(local_base)}
  sysroot="${RUST_SYSROOT:-$(rustc --print sysroot 2>/dev/null)}" \
    || die "no Rust toolchain on this host (rustc --print sysroot); set RUST_SYSROOT"
  [ -x "$sysroot/bin/cargo" ] && [ -x "$sysroot/bin/rustc" ] || die "$sysroot has no bin/cargo and bin/rustc"
  [ -f "$ca" ] || ca=
  # The base's name (its Debian release), not its id: a rootfs debootstrapped afresh (a clean
  # checkout) is another image of the same release, and keeping the builder keeps the engine's
  # cached dependency layer of docker/Dockerfile. Then the toolchain's compiler-driver library
  # (its name carries a per-release hash) and the CA bundle. `docker rmi` the builder to remake it.
  stamp="$base-$(basename "$(ls "$sysroot"/lib/librustc_driver-*.so)" .so | cut -d- -f2)"
  [ -z "$ca" ] || stamp="$stamp-$(sha256sum "$ca" | cut -c1-12)"
  have=$(docker image inspect -f '{{ index .Config.Labels "throttle.builder" }}' "$LOCAL_BUILDER" 2>/dev/null || true)
  if [ "$have" != "$stamp" ]; then
    say "making $LOCAL_BUILDER: $base + gcc, libclang (Debian) + the Rust toolchain in $sysroot"
    local log=target/docker-builder.log files=()
    ctx=$(mktemp -d); trap 'rm -rf "$ctx"' EXIT
    { cat <<EOD
ARG BASE
FROM \${BASE}
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \\
      ca-certificates gcc libc6-dev libclang-dev && rm -rf /var/lib/apt/lists/*
COPY rust /usr/local/rust
ENV PATH=/usr/local/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
EOD
      [ -z "$ca" ] || printf 'COPY host-ca.crt /usr/local/share/host-ca.crt\nENV CARGO_HTTP_CAINFO=/usr/local/share/host-ca.crt\n'
      printf 'RUN cargo --version && rustc --version\nLABEL throttle.builder=%s\n' "$stamp"
    } > "$ctx/Dockerfile"
    [ -z "$ca" ] || { cp "$ca" "$ctx/host-ca.crt"; files+=(host-ca.crt); }
    mkdir -p target
    # The context: that Dockerfile and the toolchain's compiler, cargo and standard library
    # (rust/bin, rust/lib), streamed without a copy; no docs, no rustup.
    if ! tar -c -C "$ctx" Dockerfile "${files[@]}" -C "$sysroot" --transform 's,^\(bin\|lib\)/,rust/\1/,' bin/cargo bin/rustc lib \
         | DOCKER_BUILDKIT=0 timeout 3600 docker build ${DOCKER_PLATFORM:+--platform "$DOCKER_PLATFORM"} \
             --build-arg "BASE=$base" -t "$LOCAL_BUILDER" - >"$log" 2>&1; then
      tail -n 40 "$log" >&2
      die "docker build of $LOCAL_BUILDER failed (log: $log)"
    fi
  fi
  echo "$LOCAL_BUILDER"
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
  # The README's first call, on a fresh server.
  reply=$(redis-cli -p "$port" CL.THROTTLE user123 15 30 60 | tr '\n' ' ')
  [ "$reply" = "0 16 15 -1 2 " ] || { docker logs "$id" >&2 || true; die "$tag: CL.THROTTLE from the host answered '$reply'"; }
  # The image says the workspace's version (scripts/versions.py checks the Dockerfile's label).
  local want label
  want=$(sed -n '/^\[package\]/,/^\[/ s/^version *= *"\(.*\)"/\1/p' Cargo.toml)
  label=$(docker image inspect -f '{{ index .Config.Labels "org.opencontainers.image.version" }}' "$tag")
  [ "$label" = "$want" ] || die "$tag: its label org.opencontainers.image.version is '$label', the workspace version $want"
  say "$tag: docker run -p works, CL.THROTTLE answers from the host ($reply), version $label"
}

case "${1:-}" in
  source) [ $# -eq 4 ] || die "usage: source RUST_IMAGE REDIS_IMAGE TAG"; source_build "$2" "$3" "$4" ;;
  local-source) [ $# -eq 2 ] || die "usage: local-source TAG"
                builder=$(local_builder); base=$(local_base); source_build "$builder" "$base" "$2" ;;
  build) [ $# -eq 4 ] || die "usage: build BASE TAG MODULE"; build "$2" "$3" "$4" ;;
  local-base) local_base ;;
  local-builder) local_builder ;;
  smoke) [ $# -eq 2 ] || die "usage: smoke TAG"; smoke "$2" ;;
  *) die "usage: scripts/docker-image.sh source RUST_IMAGE REDIS_IMAGE TAG | local-source TAG | build BASE TAG MODULE | local-base | local-builder | smoke TAG" ;;
esac
