#!/usr/bin/env bash
# Proves the README's setup on a machine that has none of the build's system dependencies: a
# minimal Debian chroot (debootstrap --variant=minbase: no C compiler, libclang, redis, python3,
# curl, or procps's kill and ps) with this machine's Rust toolchain and `make` added (minbase
# lacks it), where it runs `make run` (until its server answers CL.THROTTLE), `make test` and
# `make docs` on a committed tree (git archive), from a fresh target folder and a cargo home of
# its own (a copy of this machine's crate cache; mdbook is installed there, not here). Prints
# each step's time at the end, passed or not. The container tests print "NOT RUN" there (no
# Docker engine): expected.
#
#   scripts/fresh-machine.sh [ROOTFS]     (as root; default ROOTFS: a temporary folder, removed after)
#
# Env: REF (the commit to test, default HEAD), SUITE (default bookworm), MIRROR (default: the
# first URI of this machine's apt sources), STEPS (default "run test docs": make targets run in
# that order). A ROOTFS that already holds a system is reused (no second debootstrap), the tree
# refreshed; the packages a previous run installed stay, so only a new ROOTFS is a fresh machine.
set -euo pipefail
die() { echo "fresh-machine: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root (debootstrap, chroot and bind mounts need it)"
if ! command -v debootstrap >/dev/null; then
  echo "fresh-machine: installing debootstrap" >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; } \
    || die "debootstrap is missing and apt-get could not install it"
fi
repo=$(cd "$(dirname "$0")/.." && pwd)
ref=$(git -C "$repo" rev-parse --verify "${REF:-HEAD}^{commit}") || die "no commit ${REF:-HEAD}"
steps=${STEPS:-run test docs}
suite=${SUITE:-bookworm}
mirror=${MIRROR:-$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)}
mirror=${mirror:-http://deb.debian.org/debian}
keep=${1:+yes}
root=${1:-$(mktemp -d /tmp/fresh-machine.XXXXXX)}

# Everything mounted under the rootfs, deepest first.
mounted() { awk -v r="$root/" 'index($2, r) == 1 { print $2 }' /proc/self/mounts | sort -r; }
cleanup() {
  local m
  for m in $(mounted); do umount "$m" 2>/dev/null || umount -l "$m"; done
  # Never remove while anything is still mounted: the toolchain is bind-mounted read-write.
  if [ -n "$(mounted)" ]; then echo "fresh-machine: still mounted under $root; left in place" >&2; return; fi
  if [ -z "$keep" ]; then rm -rf --one-file-system "$root"; fi
}
trap cleanup EXIT

t0=$SECONDS
if [ ! -x "$root/bin/bash" ]; then
  echo "fresh-machine: debootstrap --variant=minbase $suite from $mirror" >&2
  debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$root.debootstrap.log" 2>&1 \
    || die "debootstrap failed (log: $root.debootstrap.log)"
  rm -f "$root.debootstrap.log"
fi
# Packages installed in a chroot must not start daemons (a redis on 6379 would outlive us).
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod +x "$root/usr/sbin/policy-rc.d"
cp /etc/resolv.conf "$root/etc/resolv.conf"
# A machine whose egress re-signs TLS (a proxy's own CA in SSL_CERT_FILE) lends that bundle, or
# cargo cannot download what the crate cache lacks (mdbook); a machine on the open internet
# needs none (cargo carries its own roots).
ca_env=()
if [ -r "${SSL_CERT_FILE:-}" ]; then
  cp "$SSL_CERT_FILE" "$root/etc/host-ca-bundle.crt"
  ca_env=(SSL_CERT_FILE=/etc/host-ca-bundle.crt CARGO_HTTP_CAINFO=/etc/host-ca-bundle.crt PIP_CERT=/etc/host-ca-bundle.crt NODE_EXTRA_CA_CERTS=/etc/host-ca-bundle.crt)
fi
# A cargo home of its own: rustup's proxies (cargo, rustc, …: links to the rustup binary) and a
# copy of the crate cache, so that nothing cargo installs there (mdbook) lands on this machine.
# The toolchains (RUSTUP_HOME) are bind-mounted.
host_cargo=${CARGO_HOME:-$HOME/.cargo}
[ -x "$host_cargo/bin/rustup" ] || die "no rustup in $host_cargo/bin (the toolchain is lent to the chroot through it)"
mkdir -p "$root/root/.cargo/bin" "$root/root/.rustup"
cp -f "$host_cargo/bin/rustup" "$root/root/.cargo/bin/rustup"
for tool in "$host_cargo"/bin/*; do
  if [ "$(readlink "$tool")" = rustup ]; then ln -sfn rustup "$root/root/.cargo/bin/$(basename "$tool")"; fi
done
rm -rf "$root/root/.cargo/registry"
if [ -d "$host_cargo/registry" ]; then cp -a "$host_cargo/registry" "$root/root/.cargo/"; fi
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mount --make-rslave "$root/dev" # unmounting our copy must never unmount the host's /dev/pts
mount --bind "${RUSTUP_HOME:-$HOME/.rustup}" "$root/root/.rustup"
rm -rf "$root/src"
mkdir -p "$root/src"
git -C "$repo" archive "$ref" | tar -x -C "$root/src"
echo "fresh-machine: system ready in $((SECONDS - t0)) s; tree $(git -C "$repo" rev-parse --short "$ref"); steps: $steps" >&2

# CARGO_INCREMENTAL=0: a one-off build gains nothing from incremental caches, which would take
# about a third of its target folder's disk.
chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 STEPS="$steps" CARGO_INCREMENTAL=0 ${ca_env[@]+"${ca_env[@]}"} \
  PATH=/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  bash -euo pipefail -c '
    # What the README must not assume: every program below is installed by the project (or,
    # for kill, ps and curl, needed by nothing make build/test/docs run).
    for what in cc redis-server redis-cli make python3 kill ps curl mdbook; do
      if command -v "$what" >/dev/null && [ "$(type -t "$what")" = file ]; then
        echo "fresh-machine: $what is already here: not a fresh machine" >&2; exit 1
      fi
    done
    if compgen -G "/usr/lib/llvm-*/lib/libclang*.so*" >/dev/null; then echo "fresh-machine: libclang is already here" >&2; exit 1; fi
    echo "fresh-machine: no cc, redis, make, python3, kill, ps, curl, mdbook or libclang; installing make (the README assumes it)" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq make >/dev/null
    cd /src
    timings=()
    report() {
      local rc=$?
      echo "fresh-machine: timings" >&2
      printf "  %s\n" "${timings[@]}" >&2
      exit $rc
    }
    trap report EXIT
    # `make run` serves in the foreground: it passes when its server answers a command of the
    # module, and is then shut down.
    run_step() {
      [ "$1" = run ] || { make "$1"; return; }
      make run PORT=6391 &
      local served=$! ok=no
      for _ in $(seq 1800); do
        kill -0 "$served" 2>/dev/null || break
        if [ "$(redis-cli -p 6391 CL.THROTTLE fresh-machine 1 1 1 2>/dev/null | head -1)" = 0 ]; then ok=yes; break; fi
        sleep 1
      done
      redis-cli -p 6391 shutdown nosave >/dev/null 2>&1 || true
      wait "$served" || true
      [ $ok = yes ]
    }
    for step in $STEPS; do
      start=$SECONDS
      echo "fresh-machine: make $step" >&2
      if run_step "$step"; then
        timings+=("$(printf "make %-6s passed in %5d s" "$step" $((SECONDS - start)))")
      else
        timings+=("$(printf "make %-6s FAILED after %5d s" "$step" $((SECONDS - start)))")
        exit 1
      fi
    done
    if [[ " $STEPS " == *" docs "* ]]; then
      test -s target/book/index.html || { echo "fresh-machine: make docs left no target/book/index.html" >&2; exit 1; }
    fi
  '
echo "fresh-machine: all passed in $((SECONDS - t0)) s" >&2
