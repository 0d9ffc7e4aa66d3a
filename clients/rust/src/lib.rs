//! `redis-throttle-client`: the caller's half of redis-throttle.
//!
//! - Typed [`Policy`]s, built by constructors that cannot be misread
//!   (`Rate::per_second(20)` is twenty per second, `Quota::per_month(100_000)` a calendar
//!   month's allowance) or parsed from a spec string (`"20/s burst 5"`, `"100000/month quota"`).
//! - A [`Decision`] with `Duration`s at millisecond precision, the binding policy of several, and
//!   its [`Source`]: the server, the local deny cache, or a degraded path with the reason.
//! - Module or Functions twin, detected at connect; a server with neither is an error naming
//!   the loader: [`load_twin`] loads the twin this crate carries ([`twin::TWIN_LIBRARY`]) on a
//!   server or every primary of a cluster, refusing to downgrade.
//! - A bounded deny cache keyed by (policy, key), a per-call deadline with an explicit
//!   [`FailurePolicy`] (fail closed, fail open, or local limiting by `redis-throttle-core`), and a
//!   circuit breaker.
//! - Leases as RAII guards ([`Throttle::acquire`] → [`Lease`]) and reservations for hot keys
//!   ([`Throttle::reserve`] → [`Reservation`]).
//! - [`Throttle::in_memory`]: the test kit, making the module's decisions with a [`ManualClock`].
//!
//! Every algorithm is `redis-throttle-core`'s, the code the module runs.

mod breaker;
mod cache;
mod client;
mod config;
mod dashboard;
mod decision;
mod each;
mod error;
mod held;
#[cfg(feature = "http")]
pub mod http;
mod lease;
mod memory;
mod pace;
pub mod policy;
mod reserve;
mod sentinel;
mod transport;
pub mod twin;
mod wire;

pub use breaker::BreakerConfig;
pub use client::Throttle;
pub use config::Config;
pub use decision::{Decision, FailurePolicy, Numbers, Reason, Source, Verdict};
pub use error::Error;
pub use held::{HeldPolicies, Refresh};
pub use lease::Lease;
pub use memory::{Clock, ManualClock, SystemClock};
pub use pace::{Paced, Wait};
pub use policy::{Policy, PolicyError, Quota, Rate};
pub use reserve::Reservation;
pub use twin::{LoadOptions, TwinError, TwinReport, load_twin, load_twin_with};
pub use wire::Backend;
