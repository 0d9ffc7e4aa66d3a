//! `redis-throttle-rls`: a drop-in for envoyproxy/ratelimit, deciding on redis-throttle.
//!
//! - [`settings`]: upstream's environment variables (and ours), refused by name when they
//!   cannot mean anything here.
//! - [`config`]: upstream's YAML, its validation and error texts, descriptor matching; our
//!   per-limit `algorithm`s.
//! - [`source`]: where documents come from (files now, xDS next) and when they reload.
//! - [`service`]: `ShouldRateLimit`, field for field as upstream answers.
//! - [`server`]: start-up, in three parts: the backend (Redis), the configuration (its source
//!   and reloads) and the listeners (gRPC, HTTP, debug, Prometheus).
//! - [`stats`]: upstream's stat names, statsd and Prometheus.
//! - [`local_cache`]: `LOCAL_CACHE_SIZE_IN_BYTES`, keys known over their limit.

pub mod config;
pub mod json;
pub mod local_cache;
pub mod server;
pub mod service;
pub mod settings;
pub mod source;
pub mod stats;
