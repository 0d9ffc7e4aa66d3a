# The gateway service, redis-throttle-rls (gateway), as an image that replaces
# envoyproxy/ratelimit's by its name alone: the same entrypoint (/bin/ratelimit), ports (8080 HTTP,
# 8081 gRPC, 6070 debug) and environment variables. From a clean clone, with only Docker:
#
#   docker build -f docker/rls.Dockerfile -t redis-throttle-rls .        # or: make docker-rls
#   docker run --rm -p 8081:8081 -e REDIS_SOCKET_TYPE=tcp -e REDIS_URL=redis:6379 \
#     -e USE_STATSD=false -e RUNTIME_ROOT=/data -e RUNTIME_SUBDIRECTORY=ratelimit \
#     -v "$PWD/config:/data/ratelimit/config" redis-throttle-rls
#
# The build stage compiles the service alone (the module's crate and the plots tool are workspace
# members it does not build: empty stand-ins); the runtime stage is a slim Debian of the same
# release (the binary links against the build stage's glibc), running as an unprivileged user as
# upstream's distroless `nonroot` image does. Both are build arguments; without a registry,
# `make docker-rls-local-source` makes both from Debian packages (scripts/docker-image.sh), and
# `make docker-rls-local` puts a binary built on this host into the runtime stage.
ARG RUST_IMAGE=rust:1.95-slim-trixie
ARG BASE_IMAGE=debian:trixie-slim

FROM ${RUST_IMAGE} AS build
WORKDIR /src
# Dependencies first, against empty crates: this layer is rebuilt only when a manifest or the
# lockfile changes, so a source change recompiles only the workspace's own crates.
COPY Cargo.toml Cargo.lock ./
COPY core/Cargo.toml core/
COPY clients/rust/Cargo.toml clients/rust/
COPY gateway/Cargo.toml gateway/
COPY plots/Cargo.toml plots/
RUN mkdir -p src core/src clients/rust/src gateway/src/bin plots/src \
    && touch src/lib.rs core/src/lib.rs clients/rust/src/lib.rs gateway/src/lib.rs \
    && for m in plots/src/main.rs gateway/src/main.rs gateway/src/bin/rls_bench.rs; do echo 'fn main() {}' > "$m"; done \
    && cargo build --release --locked -p redis-throttle-rls --bin redis-throttle-rls \
    && rm -r core/src clients/rust/src gateway/src
COPY core/src core/src
COPY clients/rust/src clients/rust/src
COPY gateway/src gateway/src
# The client crate embeds the Functions twin (its loader's library).
COPY functions/throttle.lua functions/
# COPY keeps the files' times, which can be older than the empty crates': touch them so cargo
# rebuilds. Only the binary leaves this layer (/out).
RUN touch core/src/lib.rs clients/rust/src/lib.rs gateway/src/lib.rs gateway/src/main.rs \
    && cargo build --release --locked -p redis-throttle-rls --bin redis-throttle-rls \
    && mkdir /out && cp target/release/redis-throttle-rls /out/ \
    && rm -r target

FROM ${BASE_IMAGE}
COPY --from=build /out/redis-throttle-rls /bin/ratelimit
RUN ln -s /bin/ratelimit /bin/redis-throttle-rls
USER 65532:65532
EXPOSE 8080 8081 6070
ENTRYPOINT ["/bin/ratelimit"]
