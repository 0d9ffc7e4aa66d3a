#!/usr/bin/env bash
# docker/Dockerfile built for linux/arm64 on an amd64 host, without a registry, under emulation
# (qemu-user-static through binfmt_misc), then checked like the amd64 image. Slow (the Rust build
# runs emulated): a one-off check, not part of CI. As root, on Debian:
#
#   make docker-arm64 [ARM64_IMAGE=…]     (or scripts/docker-arm64.sh [TAG]; default TAG redis-throttle:arm64)
#
# 1. registers qemu-aarch64 with binfmt_misc (flag F, so it also works inside containers),
#    installing qemu-user-static when missing;
# 2. debootstraps an arm64 Debian trixie rootfs with redis-server (SERVERS_DIR/trixie-arm64) and
#    loads it as the linux/arm64 image redis-throttle-base:trixie-arm64;
# 3. fetches the aarch64 build of the host's Rust toolchain with rustup into SERVERS_DIR/rustup-arm64
#    and makes the builder redis-throttle-builder:trixie-arm64 from the two (docker-image.sh);
# 4. builds TAG from source with `docker build --platform linux/arm64`, prints what it is, checks
#    `docker run -p` (the README's CL.THROTTLE) and runs the container tests against it.
set -euo pipefail
cd "$(dirname "$0")/.."
SERVERS_DIR="${SERVERS_DIR:-$(pwd)/target/servers}"
export SERVERS_DIR
TAG="${1:-redis-throttle:arm64}"
BASE=redis-throttle-base:trixie-arm64
BUILDER=redis-throttle-builder:trixie-arm64
die() { echo "docker-arm64: $*" >&2; exit 1; }
say() { echo "docker-arm64: $*" >&2; }
[ "$(id -u)" = 0 ] || die "needs root (binfmt_misc, debootstrap)"
scripts/docker-engine.sh

binfmt=/proc/sys/fs/binfmt_misc
[ -f "$binfmt/register" ] || mount -t binfmt_misc binfmt_misc "$binfmt"
if [ ! -f /usr/lib/binfmt.d/qemu-aarch64.conf ]; then
  say "installing qemu-user-static"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user-static >/dev/null
fi
if [ ! -f "$binfmt/qemu-aarch64" ]; then
  # Debian's entry names the static interpreter with flags OPF: F opens it now, so containers
  # (which do not have it) can run arm64 binaries too.
  cat /usr/lib/binfmt.d/qemu-aarch64.conf > "$binfmt/register"
fi
grep -q '^flags: .*F' "$binfmt/qemu-aarch64" || die "qemu-aarch64 is registered without flag F: containers cannot use it"

rootfs="$SERVERS_DIR/trixie-arm64"
if [ ! -f "$rootfs/.complete" ]; then
  # The mirror the amd64 trixie rootfs of scripts/servers.sh was made from.
  mirror=$(awk '$1 == "deb" {print $2; exit}' "$(scripts/servers.sh --rootfs)/etc/apt/sources.list")
  say "debootstrapping an arm64 trixie rootfs with redis-server into $rootfs (emulated: a few minutes)"
  rm -rf "$rootfs"; mkdir -p "$rootfs"
  timeout 3600 debootstrap --arch=arm64 --variant=minbase --include=redis-server trixie "$rootfs/rootfs" "$mirror" \
    >"$rootfs/debootstrap.log" 2>&1 || { tail -n 20 "$rootfs/debootstrap.log" >&2; die "debootstrap failed"; }
  rm -rf "$rootfs/rootfs/var/cache/apt/archives/"*.deb "$rootfs/rootfs/var/lib/apt/lists/"*
  echo "trixie arm64 $(date -u +%Y%m%dT%H%M%SZ) $mirror" > "$rootfs/.complete"
fi
stamp=$(sha256sum "$rootfs/.complete" | cut -c1-16)
if [ "$(docker image inspect -f '{{ index .Config.Labels "throttle.rootfs" }}' "$BASE" 2>/dev/null || true)" != "$stamp" ]; then
  # Not `docker import --platform linux/arm64`: Debian's engine (20.10) records the host's
  # architecture whatever it is told, and the classic builder then refuses the image. A one-layer
  # image archive whose config says arm64 is what `docker load` takes as it is.
  say "loading $rootfs/rootfs as $BASE (linux/arm64)"
  img=$(mktemp -d); trap 'rm -rf "$img"' EXIT
  tar -C "$rootfs/rootfs" -cf "$img/layer.tar" .
  printf '{"architecture":"arm64","os":"linux","config":{"Cmd":["redis-server"],"Labels":{"throttle.rootfs":"%s"}},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
    "$stamp" "$(sha256sum "$img/layer.tar" | cut -d' ' -f1)" > "$img/config.json"
  printf '[{"Config":"config.json","RepoTags":["%s"],"Layers":["layer.tar"]}]' "$BASE" > "$img/manifest.json"
  tar -C "$img" -c manifest.json config.json layer.tar | docker load >/dev/null
  rm -rf "$img"
fi
[ "$(docker image inspect -f '{{.Architecture}}' "$BASE")" = arm64 ] || die "$BASE is not an arm64 image"

version=$(rustc -V | awk '{print $2}')
toolchain="$version-aarch64-unknown-linux-gnu"
rustup_home="$SERVERS_DIR/rustup-arm64"
if [ ! -x "$rustup_home/toolchains/$toolchain/bin/cargo" ]; then
  say "fetching Rust $toolchain into $rustup_home"
  RUSTUP_HOME="$rustup_home" rustup toolchain install "$toolchain" --profile minimal --force-non-host --no-self-update >&2
fi

BUILDER_BASE=$BASE LOCAL_BUILDER=$BUILDER RUST_SYSROOT="$rustup_home/toolchains/$toolchain" DOCKER_PLATFORM=linux/arm64 \
  scripts/docker-image.sh local-builder >/dev/null
DOCKER_PLATFORM=linux/arm64 SOURCE_TIMEOUT=14400 scripts/docker-image.sh source "$BUILDER" "$BASE" "$TAG"

module=$(mktemp); trap 'rm -f "$module"' EXIT
id=$(docker create "$TAG"); docker cp "$id:/usr/local/lib/redis/modules/libredis_throttle.so" "$module"; docker rm "$id" >/dev/null
say "$TAG: image $(docker image inspect -f '{{.Os}}/{{.Architecture}}' "$TAG"); module: $(file -b "$module" | cut -d, -f1-2)"
say "$TAG: $(docker run --rm --entrypoint redis-server "$TAG" --version)"
scripts/docker-image.sh smoke "$TAG"
scripts/container-tests.sh --image "$TAG"
