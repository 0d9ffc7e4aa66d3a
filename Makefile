# redis-throttle: `make run` builds the module and serves it; `make test` runs every test.
PORT ?= 6379
MODULE := target/release/libredis_throttle.so

.PHONY: all build run test bench deps clean fuzz

all: build

deps:
	@scripts/deps.sh

build: deps
	cargo build --release --lib

# A local redis-server with the module loaded, in the foreground.
run: build
	redis-server --port $(PORT) --save "" --appendonly no --loadmodule $(abspath $(MODULE))

# Unit and property tests of the algorithms, then integration tests against real servers.
test: build
	cargo test --workspace

# Fuzzing (cargo-fuzz, libFuzzer): each target for FUZZ_SECONDS seconds.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= parse gcra counter bucket window
fuzz:
	scripts/fuzz.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)

bench: build
	bench/run.sh

clean:
	cargo clean
