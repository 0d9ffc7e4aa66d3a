#!/usr/bin/env bash
# make dist: the release artifacts, in dist/ (git-ignored), for version V (the root Cargo.toml's):
#
#   redis-throttle-V-x86_64-linux-gnu.tar.gz   } the module (libredis_throttle.so, for glibc 2.17 or
#   redis-throttle-V-aarch64-linux-gnu.tar.gz  } later), the twin (throttle.lua), LICENSE, README.md
#   redis-throttle-js-V.tgz                      npm pack of clients/node
#   redis_throttle-V.tar.gz                      the Python sdist, and the wheel built from it
#   redis_throttle-V-py3-none-any.whl
#   SHA256SUMS                                   sha256sum of each, `sha256sum -c SHA256SUMS` checks
#
# The modules are built with cargo-zigbuild (zig links against glibc 2.17's symbol versions and
# cross-compiles to aarch64 without Docker or a cross toolchain) in TARGET_DIR/zig, cargo's own
# incremental target folder: a second `make dist` rebuilds nothing that did not change. The tools
# (cargo-zigbuild, ziglang and build from PyPI, in TARGET_DIR/dist-tools; the aarch64 standard
# library) are installed by `scripts/deps.sh dist`, which `make dist` runs first.
# Release profile as Cargo.toml's, without debug info (CARGO_PROFILE_RELEASE_DEBUG/STRIP): the
# module keeps its symbols, at a third of the size. The archives are reproducible: files sorted,
# owned by 0:0, dated at the last commit (or SOURCE_DATE_EPOCH), gzip without a time stamp.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
mkdir -p "${CARGO_TARGET_DIR:-target}"
TARGET_DIR=$(cd "${CARGO_TARGET_DIR:-target}" && pwd)
TOOLS="$TARGET_DIR/dist-tools"
DIST="$ROOT/dist"
GLIBC=2.17
ARCHES="x86_64 aarch64"
say() { echo "dist: $*" >&2; }
die() { echo "dist: $*" >&2; exit 1; }

version=$(sed -n '/^\[package\]/,/^\[/ s/^version *= *"\(.*\)"/\1/p' Cargo.toml)
[ -n "$version" ] || die "no [package] version in Cargo.toml"
[ -x "$TOOLS/bin/cargo-zigbuild" ] && [ -x "$TOOLS/bin/python" ] || die "no $TOOLS: run scripts/deps.sh dist (make dist does)"
# The archives' date, never exported: the cc crate reruns build scripts when SOURCE_DATE_EPOCH changes.
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
t0=$SECONDS
step() { say "$1 ($((SECONDS - t0)) s)"; }

# Everything is written to dist.tmp, then moved: a failed run never leaves a partial dist/.
out="$DIST.tmp"
rm -rf "$out"; mkdir -p "$out"
logs="$TARGET_DIR/dist-logs"; mkdir -p "$logs"
run_logged() { # NAME COMMAND...: output in a log, shown when the command fails
  local name=$1; shift
  "$@" >"$logs/$name.log" 2>&1 || { tail -n 60 "$logs/$name.log" >&2; die "$name failed (log: $logs/$name.log)"; }
}

# 1. The modules: both targets in one cargo run (build scripts and proc macros are compiled once).
step "building libredis_throttle.so for $ARCHES (glibc $GLIBC) with cargo zigbuild in $TARGET_DIR/zig"
targets=(); for arch in $ARCHES; do targets+=(--target "$arch-unknown-linux-gnu.$GLIBC"); done
# From TARGET_DIR/zig, not from the checkout: zig reports its lib folder relative to the current
# folder when it lies below it, and cargo-zigbuild passes that relative path on to bindgen, which
# runs in the redis-module crate's folder and then finds no C headers ('sys/types.h' not found).
mkdir -p "$TARGET_DIR/zig"
(cd "$TARGET_DIR/zig" && PATH="$TOOLS/bin:$PATH" CARGO_TARGET_DIR="$TARGET_DIR/zig" \
  CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_STRIP=debuginfo \
  run_logged zigbuild cargo zigbuild --manifest-path "$ROOT/Cargo.toml" --release --locked --lib -p redis-throttle "${targets[@]}")

# 2. One tarball per target: the module, the twin, LICENSE and the README on loading them.
stage="$TARGET_DIR/dist-stage"
for arch in $ARCHES; do
  name="redis-throttle-$version-$arch-linux-gnu"
  rm -rf "${stage:?}/$name"; mkdir -p "$stage/$name"
  install -m 0755 "$TARGET_DIR/zig/$arch-unknown-linux-gnu/release/libredis_throttle.so" "$stage/$name/"
  install -m 0644 functions/throttle.lua LICENSE "$stage/$name/"
  sed -e "s/@VERSION@/$version/g" -e "s/@ARCH@/$arch/g" -e "s/@GLIBC@/$GLIBC/g" scripts/dist-README.md > "$stage/$name/README.md"
  chmod 0644 "$stage/$name/README.md"
  touch -d "@$epoch" "$stage/$name" "$stage/$name"/*
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" -C "$stage" -cf - "$name" \
    | gzip -n -9 > "$out/$name.tar.gz"
done
step "module tarballs written"

# 3. The npm package, as `npm pack` makes it (its prepare script builds dist/ and copies the twin).
(cd clients/node && { [ node_modules/.package-lock.json -nt package-lock.json ] || run_logged npm-ci npm ci --no-audit --no-fund; })
(cd clients/node && run_logged npm-pack npm pack --pack-destination "$out")
step "npm tarball written"

# 4. The Python sdist, then the wheel built from that sdist (so the sdist is proven complete).
run_logged python-build "$TOOLS/bin/python" -m build --outdir "$out" clients/python
step "Python sdist and wheel written"

# 5. Checksums, then the folder is published.
(cd "$out" && find . -maxdepth 1 -type f -printf '%f\n' | LC_ALL=C sort | xargs sha256sum > "$TARGET_DIR/SHA256SUMS.tmp")
mv "$TARGET_DIR/SHA256SUMS.tmp" "$out/SHA256SUMS"
rm -rf "$DIST"; mv "$out" "$DIST"
say "dist/ for $version in $((SECONDS - t0)) s:"
(cd "$DIST" && ls -l --time-style=+ | awk 'NR > 1 { printf "  %-48s %9d bytes\n", $NF, $5 }') >&2
