#!/usr/bin/env bash
# The servers of the compatibility matrix, from Debian's archives (no container registry needed).
#
#   scripts/servers.sh NAME         installs/unpacks NAME if needed, prints its THROTTLE_SERVER words
#   scripts/servers.sh --cli NAME   the same, prints a matching redis-cli/valkey-cli (THROTTLE_CLI)
#   scripts/servers.sh --all        fetches every server (each source in parallel), prints nothing
#   scripts/servers.sh --rootfs     builds (if needed) and prints the trixie rootfs (docker base)
#   scripts/servers.sh --list       the names
#   scripts/servers.sh --old-glibc  builds (if needed) and prints a Debian bullseye rootfs: glibc
#                                   2.31, older than the 2.33 a module built on bookworm needs
#                                   (scripts/dist-test.py runs a server on its loader and libraries)
#
# NAME: redis-7.0   Redis 7.0.15, bookworm (the host's redis-server; scripts/deps.sh installs it)
#       valkey-8.0  Valkey 8.0.1, bookworm-backports, unpacked with dpkg-deb (runs natively)
#       redis-8.0   Redis 8.0.2, trixie     } one debootstrap'ed minbase rootfs per suite, with
#       valkey-8.1  Valkey 8.1.1, trixie    } both servers, run through the rootfs's own dynamic
#       redis-8.0.6 Redis 8.0.6, sid        } loader (host paths work; sid's builds need glibc
#       valkey-9.1  Valkey 9.1.x, sid       } 2.43, which the sid rootfs brings along)
# A name says the version it promises: redis-8.0.6 is exactly 8.0.6 (redis-8.0 is trixie's 8.0.2),
# valkey-9.1 any 9.1.x. When sid moves past them, the check below says so.
#
# Everything is cached under target/servers/ (SERVERS_DIR) and reused; a half-made folder is
# redone. The Debian mirror is the one in the machine's apt sources (DEBIAN_MIRROR overrides).
# Bookworm's debootstrap (1.0.128) and keyring build the sid rootfs as they are: its `sid` script
# is the one trixie links to, and sid's Release is signed by the bookworm and trixie keys. Should
# sid drop both keys, debootstrap needs a newer debian-archive-keyring (trixie's) via --keyring.
# Progress goes to stderr; stdout carries only the answer.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
SERVERS_DIR="${SERVERS_DIR:-$ROOT/target/servers}"
NAMES="redis-7.0 valkey-8.0 redis-8.0 valkey-8.1 redis-8.0.6 valkey-9.1"

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

check_version() { # WORDS... ; expects `v=$want ` in `--version` ($want may be a pattern: 9.1.*)
  local out
  out=$("$@" --version 2>&1) || die "cannot run $*: $out"
  # shellcheck disable=SC2254 # $want is a pattern on purpose
  case "$out" in *v=$want\ *) ;; *) die "$* is not $want: $out${moved:+ ($moved)}" ;; esac
}

# Work on one cached source is serialised by a lock of its own, so that different sources can be
# fetched at the same time (--all) and each only once. Trixie and valkey-8.0 keep the lock that
# earlier copies of this script take for everything, since they may share SERVERS_DIR.
lock_source() { # NAME (sid, trixie, valkey-8.0)
  local f=".lock-$1"
  case $1 in trixie|valkey-8.0) f=.lock ;; esac
  exec 9>"$SERVERS_DIR/$f"; flock -w 900 9 || die "timed out waiting for another servers.sh ($1)"
}
# Installing with the host's apt (deps.sh, debootstrap): one at a time.
lock_host_apt() {
  exec 8>"$SERVERS_DIR/.lock-host-apt"; flock -w 900 8 || die "timed out waiting for another servers.sh (apt)"
}

redis_70() {
  want=7.0.15
  lock_host_apt
  command -v redis-server >/dev/null 2>&1 || scripts/deps.sh >&2
  local bin; bin=$(command -v redis-server)
  check_version "$bin"
  SERVER="$bin"; CLI=$(command -v redis-cli)
}

valkey_80() {
  want=8.0.1
  local dir="$SERVERS_DIR/valkey-8.0"
  lock_source valkey-8.0
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

# A minbase rootfs of SUITE (trixie, sid) holding both redis-server and valkey-server, made once
# (bullseye: its C library only).
suite_rootfs() { # SUITE
  local suite=$1 dir="$SERVERS_DIR/$1" include=redis-server,valkey-server
  [ "$suite" != bullseye ] || include=
  lock_source "$suite"
  if [ ! -f "$dir/.complete" ]; then
    [ "$(id -u)" = 0 ] || die "debootstrap of the $suite rootfs needs root"
    command -v debootstrap >/dev/null 2>&1 || {
      lock_host_apt
      command -v debootstrap >/dev/null 2>&1 || {
        say "installing debootstrap"; apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
      exec 8>&-; }
    say "debootstrapping a minbase $suite rootfs${include:+ with $include} into $dir (30-60 s)"
    rm -rf "$dir"; mkdir -p "$dir"
    timeout 900 debootstrap --variant=minbase ${include:+--include="$include"} \
      "$suite" "$dir/rootfs" "$(mirror)" >"$dir/debootstrap.log" 2>&1 \
      || { tail -n 20 "$dir/debootstrap.log" >&2; die "debootstrap failed (log: $dir/debootstrap.log)"; }
    # Smaller docker base: no apt lists or package cache.
    rm -rf "$dir/rootfs/var/cache/apt/archives/"*.deb "$dir/rootfs/var/lib/apt/lists/"*
    echo "$suite $(date -u +%Y%m%dT%H%M%SZ) $(mirror)" > "$dir/.complete"
  fi
  ROOTFS="$dir/rootfs"
}

# A rootfs's binary run with the rootfs's own loader and libraries, so host paths keep working:
# prints a one-word wrapper (target/servers/SUITE/bin/NAME) that execs
#   ROOTFS/lib64/ld-linux-x86-64.so.2 --library-path ROOTFS/lib/…:ROOTFS/usr/lib/… ROOTFS/usr/bin/NAME "$@"
# (one word, so that it also works where a single program is expected, e.g. THROTTLE_CLI).
rootfs_run() { # BINARY
  local r=$ROOTFS bin ld; bin="$(dirname "$ROOTFS")/bin"
  [ -x "$r/usr/bin/$1" ] || die "$r/usr/bin/$1 is missing; remove $(dirname "$ROOTFS") and retry"
  # The loader by its multiarch path: bullseye's /lib64 link is absolute (it would name the host's).
  ld="$r/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
  [ -e "$ld" ] || ld="$r/lib64/ld-linux-x86-64.so.2"
  mkdir -p "$bin"
  printf '#!/bin/sh\nexec "%s" --library-path "%s" "%s" "$@"\n' \
    "$ld" "$r/lib/x86_64-linux-gnu:$r/usr/lib/x86_64-linux-gnu" "$r/usr/bin/$1" > "$bin/$1.tmp"
  chmod +x "$bin/$1.tmp" && mv "$bin/$1.tmp" "$bin/$1"
  echo "$bin/$1"
}

from_rootfs() { # SUITE PROGRAM-PREFIX (redis, valkey)
  suite_rootfs "$1"
  SERVER=$(rootfs_run "$2-server"); CLI=$(rootfs_run "$2-cli")
  # shellcheck disable=SC2086
  check_version $SERVER
}

what=server
case "${1:-}" in
  --cli) what=cli; shift ;;
  --rootfs) mkdir -p "$SERVERS_DIR"; suite_rootfs trixie; echo "$ROOTFS"; exit 0 ;;
  --list) echo "$NAMES"; exit 0 ;;
  --old-glibc) mkdir -p "$SERVERS_DIR"; suite_rootfs bullseye; echo "$ROOTFS"; exit 0 ;;
  --all) # Every name at once (and the old-glibc server): those of one source wait for each other on its lock.
    pids=()
    for name in $NAMES --old-glibc; do "$ROOT/scripts/servers.sh" "$name" >/dev/null & pids+=($!); done
    rc=0; for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
    exit $rc ;;
esac
[ $# -eq 1 ] || die "usage: scripts/servers.sh [--cli] NAME (NAME: $NAMES)"
mkdir -p "$SERVERS_DIR"
moved=; sid_moved="sid has moved on: rename the server here and in docs/src/servers.md after testing what sid ships now"
case "$1" in
  redis-7.0) redis_70 ;;
  valkey-8.0) valkey_80 ;;
  redis-8.0) want=8.0.2; from_rootfs trixie redis ;;
  valkey-8.1) want=8.1.1; from_rootfs trixie valkey ;;
  redis-8.0.6) want=8.0.6 moved=$sid_moved; from_rootfs sid redis ;;
  valkey-9.1) want='9.1.*' moved=$sid_moved; from_rootfs sid valkey ;;
  *) die "unknown server '$1' (known: $NAMES)" ;;
esac
if [ "$what" = cli ]; then echo "$CLI"; else echo "$SERVER"; fi
