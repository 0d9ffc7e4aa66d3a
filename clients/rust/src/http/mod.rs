//! Behind HTTP (feature `http`; `axum` adds the peer-IP key, the route template and
//! [`RateLimit::into_make_service`]): a `tower` layer that limits each request and answers the way
//! APIs and their clients expect.
//!
//! ```rust,ignore
//! let limits = RateLimit::new(throttle)
//!     .limit(Limit::rate("per-ip", "10/s".parse()?).key(Key::peer_ip()))
//!     .route("/search", [Limit::rate("per-tenant", "10000/h window".parse()?).key(Key::header(tenant))]);
//! axum::serve(listener, limits.into_make_service(router)?).await?;
//! ```
//!
//! - Limits of every route ([`RateLimit::limit`]) and of one route template
//!   ([`RateLimit::route`]); a request's rate limits are decided together, all or nothing
//!   (one `CL.ALL` when there are several), and a refusal names the binding one. On a cluster
//!   the limits of one key share a hash slot (the key is a hash tag) and are decided by one
//!   `CL.ALL`; limits in different slots are decided one slot after another, the units of the
//!   admitting slots given back when a later one refuses (the guide states what that allows).
//! - A configuration the layer would fail on every request does not build ([`ConfigError`]);
//!   a 500 body never holds keys or the server's error text (they go to the log).
//! - Concurrency limits ([`Limit::concurrent`]): a lease per request, released when the response
//!   body ends, fails, or is dropped (a cancelled request).
//! - Shadow limits ([`Limit::shadow`]): decided in calls of their own, reported (the
//!   [`RateLimitReport`] response extension, a `tracing` event and the counter
//!   `throttle_http_shadow_denied_total`), never enforced, absent from the response's fields.
//! - Fields ([`Headers`]), `Retry-After` on every refusal (whole seconds rounded up, at least 1,
//!   plus optional jitter), refusals as RFC 9457 problem details: 429 `quota-exceeded`, 503
//!   `temporary-reduced-capacity` when the server cannot answer and the failure policy refuses.
//!   A degraded admission carries `X-RateLimit-Degraded` (the reason) instead of the fields.
//! - gRPC calls (`content-type: application/grpc`, such as a tonic server's) are refused the way
//!   gRPC clients read it: a trailers-only status ([`Refusal::grpc_response`]:
//!   `RESOURCE_EXHAUSTED`, `UNAVAILABLE`), the fields and `Retry-After` as metadata. The route
//!   of a gRPC call is its method's path (`/package.Service/Method`).

mod body;
mod config;
mod headers;
mod key;
mod service;

pub use body::{LeaseLost, LimitedBody};
pub use config::{ConfigError, Limit, MissingKey, RateLimit, RateLimitLayer};
pub use headers::{Headers, QUOTA_EXCEEDED, Refusal, RefusalKind, TEMPORARY_REDUCED_CAPACITY};
pub use key::{Key, RequestParts, Subject};
pub use service::{Outcome, RateLimitReport, RateLimitService};

#[cfg(test)]
mod tests;
