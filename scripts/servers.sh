#!/usr/bin/env bash
# The servers of the compatibility matrix, from Debian's archives (no container registry needed).
#
#   scripts/servers.sh NAME         installs/unpacks NAME if needed, prints its THROTTLE_SERVER words
#   scripts/servers.sh --cli NAME   the same, prints a matching redis-cli/valkey-cli (THROTTLE_CLI)
#   scripts/servers.sh --rootfs     builds (if needed) and prints the trixie rootfs (docker base)
#   scripts/servers.sh --list       the names
#
# NAME: redis-7.0  Redis 7.0.15, bookworm (the host's redis-server; scripts/deps.sh installs it)
#       valkey-8.0 Valkey 8.0.1, bookworm-backports, unpacked with dpkg-deb (runs natively)
#       redis-8.0  Redis 8.0.2, trixie      } one debootstrap'ed minbase trixie rootfs, run through
#       valkey-8.1 Valkey 8.1.1, trixie     } the rootfs's own dynamic loader (host paths work)
#
# Everything is cached under target/servers/ (SERVERS_DIR) and reused; a half-made folder is
# redone. The Debian mirror is the one in the machine's apt sources (DEBIAN_MIRROR overrides).
# Progress goes to stderr; stdout carries only the answer.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
SERVERS_DIR="${SERVERS_DIR:-$ROOT/target/servers}"
NAMES="redis-7.0 valkey-8.0 redis-8.0 valkey-8.1"

die() { echo "servers.sh: $*" >&2; exit 1; }
say() { echo "servers.sh: $*" >&2; }

mirror() {
  if [ -n "${DEBIAN_MIRROR:-}" ]; then echo "$DEBIAN_MIRROR"; return; fi
  local m
  m=$( { grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}';
         grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list | sed -E 's/\[[^]]*\]//' | awk '{print $2}'; } \
       | grep -v -- '-security' | grep -E '/debian/?$' | head -n1 || true)
  [ -n "$m" ] || die "no Debian mirror in /etc/apt/sources*; set DEBIAN_MIRROR=http://deb.debian.org/debian"
  echo "${m%/}"
}

# apt-get with a private sources list and state, never touching the system's apt.
private_apt() { # SUITE apt-get-args...
  local suite=$1; shift
  local d="$SERVERS_DIR/apt/$suite"
  mkdir -p "$d/lists/partial" "$d/cache/archives/partial"
  local keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  [ -f "$keyring" ] || die "missing $keyring (apt-get install debian-archive-keyring)"
  echo "deb [signed-by=$keyring] $(mirror) $suite main" > "$d/sources.list"
  apt-get -q -o Dir::Etc::SourceList="$d/sources.list" -o Dir::Etc::SourceParts=/dev/null \
    -o Dir::State::Lists="$d/lists" -o Dir::Cache="$d/cache" -o Dir::State::Status=/dev/null \
    -o APT::Sandbox::User=root "$@"
}

check_version() { # WORDS... ; expects $want in `--version`
  local out
  out=$("$@" --version 2>&1) || die "cannot run $*: $out"
  case "$out" in *"v=$want"*) ;; *) die "$* is not $want: $out" ;; esac
}

redis_70() {
  want=7.0.15
  command -v redis-server >/dev/null 2>&1 || scripts/deps.sh >&2
  local bin; bin=$(command -v redis-server)
  check_version "$bin"
  SERVER="$bin"; CLI=$(command -v redis-cli)
}

valkey_80() {
  want=8.0.1
  local dir="$SERVERS_DIR/valkey-8.0"
  if [ ! -f "$dir/.complete" ]; then
    say "fetching Valkey 8.0.1 from bookworm-backports into $dir"
    rm -rf "$dir"; mkdir -p "$dir/debs"
    private_apt bookworm-backports update -qq >&2
    (cd "$dir/debs" && private_apt bookworm-backports download -qq \
        valkey-server=8.0.1+dfsg1-1~bpo12+1 valkey-tools=8.0.1+dfsg1-1~bpo12+1 >&2)
    for deb in "$dir"/debs/*.deb; do dpkg-deb -x "$deb" "$dir/root"; done
    touch "$dir/.complete"
  fi
  local bin="$dir/root/usr/bin/valkey-server"
  [ -x "$bin" ] || die "$bin is missing; remove $dir and retry"
  if ldd "$bin" | grep -q 'not found'; then
    die "$bin needs libraries this host lacks: $(ldd "$bin" | grep 'not found' | tr -s ' \t' ' ')"
  fi
  check_version "$bin"
  SERVER="$bin"; CLI="$dir/root/usr/bin/valkey-cli"
}

trixie_rootfs() {
  local dir="$SERVERS_DIR/trixie"
  if [ ! -f "$dir/.complete" ]; then
    [ "$(id -u)" = 0 ] || die "debootstrap of the trixie rootfs needs root"
    command -v debootstrap >/dev/null 2>&1 || {
      say "installing debootstrap"; apt-get update -qq >&2
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
    say "debootstrapping a minbase trixie rootfs with redis-server and valkey-server into $dir (about a minute)"
    rm -rf "$dir"; mkdir -p "$dir"
    timeout 900 debootstrap --variant=minbase --include=redis-server,valkey-server \
      trixie "$dir/rootfs" "$(mirror)" >"$dir/debootstrap.log" 2>&1 \
      || { tail -n 20 "$dir/debootstrap.log" >&2; die "debootstrap failed (log: $dir/debootstrap.log)"; }
    # Smaller docker base: no apt lists or package cache.
    rm -rf "$dir/rootfs/var/cache/apt/archives/"*.deb "$dir/rootfs/var/lib/apt/lists/"*
    echo "trixie $(date -u +%Y%m%dT%H%M%SZ) $(mirror)" > "$dir/.complete"
  fi
  ROOTFS="$dir/rootfs"
}

# A trixie binary run with the rootfs's own loader and libraries, so host paths keep working:
# prints a one-word wrapper (target/servers/trixie/bin/NAME) that execs
#   ROOTFS/lib64/ld-linux-x86-64.so.2 --library-path ROOTFS/lib/…:ROOTFS/usr/lib/… ROOTFS/usr/bin/NAME "$@"
# (one word, so that it also works where a single program is expected, e.g. THROTTLE_CLI).
trixie_run() { # BINARY
  local r=$ROOTFS bin; bin="$(dirname "$ROOTFS")/bin"
  [ -x "$r/usr/bin/$1" ] || die "$r/usr/bin/$1 is missing; remove $(dirname "$ROOTFS") and retry"
  mkdir -p "$bin"
  printf '#!/bin/sh\nexec "%s" --library-path "%s" "%s" "$@"\n' \
    "$r/lib64/ld-linux-x86-64.so.2" "$r/lib/x86_64-linux-gnu:$r/usr/lib/x86_64-linux-gnu" "$r/usr/bin/$1" > "$bin/$1.tmp"
  chmod +x "$bin/$1.tmp" && mv "$bin/$1.tmp" "$bin/$1"
  echo "$bin/$1"
}

redis_80() {
  want=8.0.2; trixie_rootfs
  SERVER=$(trixie_run redis-server); CLI=$(trixie_run redis-cli)
  # shellcheck disable=SC2086
  check_version $SERVER
}

valkey_81() {
  want=8.1.1; trixie_rootfs
  SERVER=$(trixie_run valkey-server); CLI=$(trixie_run valkey-cli)
  # shellcheck disable=SC2086
  check_version $SERVER
}

what=server
case "${1:-}" in
  --cli) what=cli; shift ;;
  --rootfs) mkdir -p "$SERVERS_DIR"; exec 9>"$SERVERS_DIR/.lock"; flock -w 900 9 || die "lock timeout"
            trixie_rootfs; echo "$ROOTFS"; exit 0 ;;
  --list) echo "$NAMES"; exit 0 ;;
esac
[ $# -eq 1 ] || die "usage: scripts/servers.sh [--cli] NAME (NAME: $NAMES)"
mkdir -p "$SERVERS_DIR"
exec 9>"$SERVERS_DIR/.lock"
flock -w 900 9 || die "timed out waiting for another servers.sh"
case "$1" in
  redis-7.0) redis_70 ;;
  valkey-8.0) valkey_80 ;;
  redis-8.0) redis_80 ;;
  valkey-8.1) valkey_81 ;;
  *) die "unknown server '$1' (known: $NAMES)" ;;
esac
if [ "$what" = cli ]; then echo "$CLI"; else echo "$SERVER"; fi
