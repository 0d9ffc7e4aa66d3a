#!/usr/bin/env bash
# Proves the README's setup on a machine that has none of the build's system dependencies: a
# minimal Debian chroot (debootstrap --variant=minbase: no C compiler, no libclang, no redis)
# with this machine's Rust toolchain bind-mounted and `make` added (minbase lacks it), where
# it runs `make build` and `make test` on the committed tree (git archive HEAD), from a fresh
# target folder. The container tests print "NOT RUN" there (no Docker engine): expected.
#
#   scripts/fresh-machine.sh [ROOTFS]     (as root; default ROOTFS: a temporary folder, removed after)
#
# Env: SUITE (default bookworm), MIRROR (default: the first URI of this machine's apt sources).
# A ROOTFS that already holds a system is reused (no second debootstrap), the tree refreshed.
set -euo pipefail
die() { echo "fresh-machine: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root (debootstrap, chroot and bind mounts need it)"
command -v debootstrap >/dev/null || die "debootstrap is missing: apt-get install -y debootstrap"
repo=$(cd "$(dirname "$0")/.." && pwd)
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
mkdir -p "$root/root/.cargo" "$root/root/.rustup"
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mount --make-rslave "$root/dev" # unmounting our copy must never unmount the host's /dev/pts
mount --bind "${CARGO_HOME:-$HOME/.cargo}" "$root/root/.cargo"
mount --bind "${RUSTUP_HOME:-$HOME/.rustup}" "$root/root/.rustup"
rm -rf "$root/src"
mkdir -p "$root/src"
git -C "$repo" archive HEAD | tar -x -C "$root/src"
echo "fresh-machine: system ready in $((SECONDS - t0)) s; tree $(git -C "$repo" rev-parse --short HEAD)" >&2

chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
  PATH=/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  bash -euo pipefail -c '
    for what in cc redis-server make; do
      if command -v "$what" >/dev/null; then echo "fresh-machine: $what is already here: not a fresh machine" >&2; exit 1; fi
    done
    if compgen -G "/usr/lib/llvm-*/lib/libclang*.so*" >/dev/null; then echo "fresh-machine: libclang is already here" >&2; exit 1; fi
    echo "fresh-machine: no cc, redis-server, make or libclang; installing make (the README assumes it)" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq make >/dev/null
    cd /src
    start=$SECONDS; make build; echo "fresh-machine: make build passed in $((SECONDS - start)) s" >&2
    start=$SECONDS; make test; echo "fresh-machine: make test passed in $((SECONDS - start)) s" >&2
  '
echo "fresh-machine: all passed in $((SECONDS - t0)) s" >&2
