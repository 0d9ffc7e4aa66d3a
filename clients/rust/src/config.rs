//! How a client behaves.

use std::time::Duration;

use crate::breaker::BreakerConfig;
use crate::decision::FailurePolicy;

/// How a client behaves; [`Config::default`] suits a service.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// How long a call waits for the server before its failure policy answers.
    pub deadline: Duration,
    pub failure: FailurePolicy,
    /// The most denials the deny cache holds; 0 turns it off.
    pub deny_cache: usize,
    pub breaker: BreakerConfig,
    /// The most keys the `Local` failure policy (and the test kit) hold.
    pub local_keys: usize,
    /// The most bytes the deny cache holds (its entries, keys included); 0 turns it off.
    pub deny_cache_bytes: usize,
    /// How long [`Throttle::connect`](crate::Throttle::connect) may take (connecting and detecting the module or the
    /// twin) before it returns [`Error::Connect`](crate::Error::Connect).
    pub connect_timeout: Duration,
    /// How long a [`Lease`](crate::Lease) is renewed without a sign of life from its guard
    /// ([`Lease::extend`](crate::Lease::extend)); then it is released, so a leaked guard
    /// (`mem::forget`) frees its slot within this time.
    pub lease_max_hold: Duration,
    /// Connections [`Throttle::connect`](crate::Throttle::connect) opens to the server, each call sent on the next in
    /// turn. 1 (the default) multiplexes every call on one connection: the cheapest for the
    /// server, as concurrent calls share its reads and writes. More spread a client's traffic
    /// when one connection's throughput is its limit.
    pub connections: usize,
    /// The server's own timeout: a call unanswered this long counts as its failure toward the
    /// breaker. A `deadline` shorter than this cannot tell a silent server from a burst queued
    /// in this process: such a call gets the failure policy's answer without telling the
    /// breaker, and a `PING` asks the server whether it answers within this time (its silence
    /// opens the breaker; see [`Throttle::is_degraded`](crate::Throttle::is_degraded)).
    pub server_timeout: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            deadline: Duration::from_millis(50),
            failure: FailurePolicy::FailClosed,
            deny_cache: 100_000,
            breaker: BreakerConfig::default(),
            local_keys: 100_000,
            deny_cache_bytes: 32 << 20,
            connect_timeout: Duration::from_secs(5),
            lease_max_hold: Duration::from_secs(600),
            connections: 1,
            server_timeout: Duration::from_millis(250),
        }
    }
}
