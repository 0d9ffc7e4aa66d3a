//! `redis-throttle-rls`: a drop-in for envoyproxy/ratelimit, deciding on redis-throttle.
//!
//! - [`settings`]: upstream's environment variables (and ours), refused by name when they
//!   cannot mean anything here.
//! - [`config`]: upstream's YAML, its validation and error texts, descriptor matching; our
//!   per-limit `algorithm`s.
//! - [`source`]: where file documents come from and when they reload.
//! - [`xds`]: the xDS client (`CONFIG_TYPE=GRPC_XDS_SOTW`): resources as documents, ACK/NACK.
//! - [`service`]: `ShouldRateLimit`, field for field as upstream answers.
//! - [`server`]: start-up, in three parts: the backend (Redis), the configuration (its source
//!   and reloads) and the listeners (gRPC, HTTP, debug, Prometheus).
//! - [`stats`]: upstream's stat names, statsd and Prometheus.
//! - [`mapper`]: statsd_exporter's mapping of those names for Prometheus (`PROMETHEUS_MAPPER_YAML`).
//! - [`local_cache`]: `LOCAL_CACHE_SIZE_IN_BYTES`, keys known over their limit.

pub mod config;
pub mod json;
pub mod local_cache;
pub mod mapper;
pub mod server;
pub mod service;
pub mod settings;
pub mod source;
pub mod stats;
pub mod xds;
