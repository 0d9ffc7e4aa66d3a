#!/usr/bin/env bash
# Makes a Docker engine reachable: does nothing when `docker info` answers; otherwise (as root)
# installs docker.io from Debian when dockerd is missing, starts dockerd in the background
# (published ports bound to 127.0.0.1 only; log in target/dockerd.log) and waits for it.
# `--check` only reports (exit 0: reachable, 1: not) and changes nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

reachable() { timeout 10 docker info >/dev/null 2>&1; }

if [ "${1:-}" = "--check" ]; then
  command -v docker >/dev/null 2>&1 && reachable
  exit
fi
reachable && exit 0

if [ "$(id -u)" != 0 ]; then
  echo "docker-engine: no Docker engine answers and this is not root: start one (e.g. sudo dockerd &) or set DOCKER_HOST" >&2
  exit 1
fi
if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
  echo "docker-engine: installing docker.io from Debian" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
fi
if [ -n "${DOCKER_HOST:-}" ]; then
  echo "docker-engine: DOCKER_HOST=$DOCKER_HOST does not answer; unset it to use a local dockerd" >&2
  exit 1
fi
mkdir -p target
echo "docker-engine: starting dockerd (log: target/dockerd.log)" >&2
# setsid: the daemon outlives this script and the make that ran it.
setsid dockerd --ip 127.0.0.1 >target/dockerd.log 2>&1 < /dev/null &
pid=$!
for _ in $(seq 1 120); do
  if reachable; then echo "docker-engine: dockerd (pid $pid) is up" >&2; exit 0; fi
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "docker-engine: dockerd exited; its log:" >&2; tail -n 30 target/dockerd.log >&2; exit 1
  fi
  sleep 0.5
done
echo "docker-engine: dockerd did not answer within 60 s; its log:" >&2
tail -n 30 target/dockerd.log >&2
exit 1
