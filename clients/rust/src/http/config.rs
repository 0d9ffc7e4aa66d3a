//! The layer's configuration: its limits, their keys, and how refusals look; validated into
//! a [`RateLimitLayer`] (what a request then gets is `service`'s).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Response;

use super::headers::{Headers, Refusal, ceil_secs};
use super::key::{self, Key};
use crate::{Policy, Throttle};

/// One limit: a name (its policy name in fields and problem bodies), what it limits, and the
/// key it counts by.
#[derive(Clone, Debug)]
pub struct Limit {
    pub(super) name: String,
    pub(super) kind: Kind,
    pub(super) key: Key,
    pub(super) shadow: bool,
}

#[derive(Clone, Debug)]
pub(super) enum Kind {
    Rate(Policy),
    Concurrent { limit: i64, lease: Duration },
}

impl Limit {
    /// A rate limit. The key defaults to the peer IP with the `axum` feature (the route
    /// template without it); set it with [`Limit::key`].
    pub fn rate(name: impl Into<String>, policy: Policy) -> Limit {
        Limit { name: name.into(), kind: Kind::Rate(policy), key: default_key(), shadow: false }
    }

    /// At most `limit` requests in flight per key, each holding a lease of `lease` (renewed while
    /// the response is being sent, so `lease` only bounds how long a crashed instance holds its
    /// slots). Needs the module (leases are not in the Functions twin).
    pub fn concurrent(name: impl Into<String>, limit: i64, lease: Duration) -> Limit {
        Limit { name: name.into(), kind: Kind::Concurrent { limit, lease }, key: default_key(), shadow: false }
    }

    pub fn key(mut self, key: Key) -> Limit {
        self.key = key;
        self
    }

    /// Decided and reported, never enforced.
    pub fn shadow(mut self) -> Limit {
        self.shadow = true;
        self
    }
}

fn default_key() -> Key {
    #[cfg(feature = "axum")]
    return Key::peer_ip();
    #[cfg(not(feature = "axum"))]
    Key::route()
}

/// What a request with no key for a limit gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MissingKey {
    /// Counted under one key shared by every keyless request of that limit (the default).
    #[default]
    Shared,
    /// Refused with 400 and a problem body naming the limit.
    Refuse,
}

/// A configuration the layer refuses to build with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// A limit's name is not a short token (letters, digits, `-`, `_`, `.`) or is used twice.
    Name(String),
    /// A peer-IP key on a service not served with connect info.
    NeedsConnectInfo,
    /// A concurrency limit on a server without the module.
    LeasesNeedTheModule(String),
    /// Two drafts of the fields that share field names.
    Headers,
    /// `Key::forwarded_for(0)`.
    NoTrustedProxy(String),
    /// More enforced (or shadow) rate limits on one route than one call decides
    /// ([`redis_throttle_core::all::MAX_KEYS`]): the route template, or `*` for every route.
    TooManyLimits(String),
    /// A quota that follows a named time zone on a server running the Functions twin (which
    /// has no time zone database).
    ZoneNeedsTheModule(String),
    /// A concurrency limit outside what `CL.ACQUIRE` accepts (a limit of 1 to 10,000, a lease
    /// of at least 1 ms).
    Concurrency(String),
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigError::Name(n) => {
                write!(f, "limit name {n:?}: names are unique tokens of letters, digits, '-', '_' and '.'")
            }
            ConfigError::NeedsConnectInfo => write!(
                f,
                "a limit keyed by the peer IP needs axum's ConnectInfo<SocketAddr>: serve with RateLimit::into_make_service(router), or with router.into_make_service_with_connect_info::<SocketAddr>() and say so with RateLimit::with_connect_info()"
            ),
            ConfigError::LeasesNeedTheModule(n) => write!(
                f,
                "concurrency limit {n:?}: leases need the module (CL.ACQUIRE); the server runs the Functions twin"
            ),
            ConfigError::Headers => {
                write!(f, "at most one of Headers::DRAFT_6, DRAFT_7 and DRAFT_11: they name their fields alike")
            }
            ConfigError::NoTrustedProxy(n) => write!(
                f,
                "limit {n:?}: Key::forwarded_for needs at least one trusted proxy (without proxies, use Key::peer_ip)"
            ),
            ConfigError::TooManyLimits(route) => write!(
                f,
                "route {route:?}: at most {} enforced and {} shadow rate limits per route",
                redis_throttle_core::all::MAX_KEYS,
                redis_throttle_core::all::MAX_KEYS
            ),
            ConfigError::ZoneNeedsTheModule(n) => write!(
                f,
                "limit {n:?} follows a named time zone, but the server runs the Functions twin, which has no time zone database: give the quota a fixed offset (tz +01:00) or load the module"
            ),
            ConfigError::Concurrency(n) => write!(
                f,
                "concurrency limit {n:?}: the limit is 1 to {} requests in flight and the lease at least 1 ms",
                redis_throttle_core::lease::MAX_LIMIT
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

pub(super) type Respond = dyn Fn(&Refusal) -> Response<Bytes> + Send + Sync;

/// The layer's configuration; [`RateLimit::layer`] validates it into a [`RateLimitLayer`].
pub struct RateLimit {
    throttle: Throttle,
    every: Vec<Limit>,
    routes: Vec<(String, Vec<Limit>)>,
    headers: Headers,
    partition_keys: bool,
    missing: MissingKey,
    jitter: Duration,
    prefix: String,
    connect_info: bool,
    respond: Option<Arc<Respond>>,
}

impl RateLimit {
    pub fn new(throttle: Throttle) -> RateLimit {
        RateLimit {
            throttle,
            every: Vec::new(),
            routes: Vec::new(),
            headers: Headers::default(),
            partition_keys: false,
            missing: MissingKey::Shared,
            jitter: Duration::ZERO,
            prefix: "rl:".into(),
            connect_info: false,
            respond: None,
        }
    }

    /// A limit on every route.
    pub fn limit(mut self, limit: Limit) -> RateLimit {
        self.every.push(limit);
        self
    }

    /// Limits of one route template (axum's `MatchedPath`, `/users/{id}`; the path without
    /// axum), in addition to those of every route. Calls for one template add up; a limit
    /// listed more than once for a route (on every route and again on this one) is one limit.
    pub fn route(mut self, template: impl Into<String>, limits: impl IntoIterator<Item = Limit>) -> RateLimit {
        self.routes.push((template.into(), limits.into_iter().collect()));
        self
    }

    pub fn headers(mut self, headers: Headers) -> RateLimit {
        self.headers = headers;
        self
    }

    /// Adds `pk` (the key, base64) to the draft-11 fields. Off by default: keys such as IP
    /// addresses or API keys may be sensitive.
    pub fn partition_keys(mut self, on: bool) -> RateLimit {
        self.partition_keys = on;
        self
    }

    pub fn missing_key(mut self, rule: MissingKey) -> RateLimit {
        self.missing = rule;
        self
    }

    /// Adds up to `jitter` (whole seconds, uniformly) to each `Retry-After`, so refused clients
    /// do not all come back at the same second.
    pub fn retry_jitter(mut self, jitter: Duration) -> RateLimit {
        self.jitter = jitter;
        self
    }

    /// The prefix of every Redis key (default `rl:`); a key is `<prefix><limit name>:<key>`,
    /// and `<prefix><limit name>` for the shared key of keyless requests.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> RateLimit {
        self.prefix = prefix.into();
        self
    }

    /// States that the service is served with `into_make_service_with_connect_info::<SocketAddr>()`
    /// (needed by [`Key::peer_ip`] through [`RateLimit::layer`]).
    pub fn with_connect_info(mut self) -> RateLimit {
        self.connect_info = true;
        self
    }

    /// Builds refusals with `f` instead of [`Refusal::problem`] (and, for gRPC calls,
    /// [`Refusal::grpc_response`]: `f` sees which in [`Refusal::grpc`]). `Retry-After` and the
    /// rate-limit fields are added to what `f` returns unless it sets them.
    pub fn respond_with(mut self, f: impl Fn(&Refusal) -> Response<Bytes> + Send + Sync + 'static) -> RateLimit {
        self.respond = Some(Arc::new(f));
        self
    }

    /// Validates the configuration into a layer.
    pub fn layer(self) -> Result<RateLimitLayer, ConfigError> {
        if self.headers.drafts() > 1 {
            return Err(ConfigError::Headers);
        }
        let all: Vec<&Limit> = self.every.iter().chain(self.routes.iter().flat_map(|(_, l)| l)).collect();
        let mut names: HashMap<&str, &Limit> = HashMap::new();
        for limit in &all {
            let ok = !limit.name.is_empty()
                && limit.name.len() <= 64
                && limit.name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
            if !ok {
                return Err(ConfigError::Name(limit.name.clone()));
            }
            // One name, one limit: the same `Limit` may be listed on several routes.
            if let Some(other) = names.insert(&limit.name, limit)
                && (format!("{:?}", other.kind) != format!("{:?}", limit.kind)
                    || format!("{:?}", other.key) != format!("{:?}", limit.key)
                    || other.shadow != limit.shadow)
            {
                return Err(ConfigError::Name(limit.name.clone()));
            }
            if limit.key.needs_peer() && !self.connect_info {
                return Err(ConfigError::NeedsConnectInfo);
            }
            if let key::KeyKind::ForwardedFor(0) = limit.key.0 {
                return Err(ConfigError::NoTrustedProxy(limit.name.clone()));
            }
            match limit.kind {
                Kind::Concurrent { .. } if self.throttle.backend() != crate::Backend::Module => {
                    return Err(ConfigError::LeasesNeedTheModule(limit.name.clone()));
                }
                Kind::Concurrent { limit: most, lease }
                    if !(1..=redis_throttle_core::lease::MAX_LIMIT).contains(&most)
                        || lease < Duration::from_millis(1) =>
                {
                    return Err(ConfigError::Concurrency(limit.name.clone()));
                }
                Kind::Rate(ref policy)
                    if policy.named_zone().is_some() && self.throttle.backend() == crate::Backend::Twin =>
                {
                    return Err(ConfigError::ZoneNeedsTheModule(limit.name.clone()));
                }
                _ => {}
            }
        }
        // One plan per route template: the limits of every route, then those of each `route`
        // call for it, each limit once (the same `Limit` listed twice is one limit).
        let mut merged: Vec<(String, Vec<Limit>)> = Vec::new();
        for (template, limits) in &self.routes {
            let at = match merged.iter().position(|(t, _)| t == template) {
                Some(at) => at,
                None => {
                    merged.push((template.clone(), self.every.clone()));
                    merged.len() - 1
                }
            };
            merged[at].1.extend(limits.iter().cloned());
        }
        let plan = |template: &str, limits: Vec<Limit>| {
            let mut once: Vec<Limit> = Vec::with_capacity(limits.len());
            for limit in limits {
                if !once.iter().any(|l| l.name == limit.name) {
                    once.push(limit);
                }
            }
            let plan = Plan::new(once, &self.prefix);
            if plan.rate.len() > redis_throttle_core::all::MAX_KEYS
                || plan.shadow_rate.len() > redis_throttle_core::all::MAX_KEYS
            {
                return Err(ConfigError::TooManyLimits(template.to_string()));
            }
            Ok(plan)
        };
        let default = plan("*", self.every.clone())?;
        let routes = merged
            .into_iter()
            .map(|(t, l)| Ok((t.clone(), plan(&t, l)?)))
            .collect::<Result<HashMap<_, _>, ConfigError>>()?;
        let shared = Shared {
            cluster: self.throttle.is_cluster(),
            throttle: self.throttle,
            default,
            routes,
            headers: self.headers,
            partition_keys: self.partition_keys,
            missing: self.missing,
            jitter: ceil_secs(self.jitter),
            respond: self.respond,
        };
        Ok(RateLimitLayer { shared: Arc::new(shared) })
    }

    /// The router with the layer on every route, served with the peer's address
    /// (`ConnectInfo<SocketAddr>`, which [`Key::peer_ip`] reads): give it to `axum::serve`.
    #[cfg(feature = "axum")]
    pub fn into_make_service(
        self,
        router: axum::Router,
    ) -> Result<
        axum::extract::connect_info::IntoMakeServiceWithConnectInfo<axum::Router, std::net::SocketAddr>,
        ConfigError,
    > {
        let layer = self.with_connect_info().layer()?;
        Ok(router.layer(layer).into_make_service_with_connect_info::<std::net::SocketAddr>())
    }
}

/// A limit with its Redis key prefix, ready to be keyed.
#[derive(Debug)]
pub(super) struct Planned {
    pub(super) limit: Limit,
    pub(super) prefix: Vec<u8>,
}

/// A route's limits by the way they are decided.
#[derive(Debug, Default)]
pub(super) struct Plan {
    pub(super) rate: Vec<Planned>,
    pub(super) shadow_rate: Vec<Planned>,
    pub(super) concurrent: Vec<Planned>,
}

impl Plan {
    fn new(limits: Vec<Limit>, prefix: &str) -> Plan {
        let mut plan = Plan::default();
        for limit in limits {
            let planned = Planned { prefix: format!("{prefix}{}", limit.name).into_bytes(), limit };
            match (&planned.limit.kind, planned.limit.shadow) {
                (Kind::Rate(_), false) => plan.rate.push(planned),
                (Kind::Rate(_), true) => plan.shadow_rate.push(planned),
                (Kind::Concurrent { .. }, _) => plan.concurrent.push(planned),
            }
        }
        plan
    }

    pub(super) fn is_empty(&self) -> bool {
        self.rate.is_empty() && self.shadow_rate.is_empty() && self.concurrent.is_empty()
    }
}

/// A validated configuration, shared by every service the layer makes.
pub(super) struct Shared {
    pub(super) throttle: Throttle,
    /// Calls go to a cluster: keys carry a hash tag, rate limits are decided per hash slot.
    pub(super) cluster: bool,
    pub(super) default: Plan,
    pub(super) routes: HashMap<String, Plan>,
    pub(super) headers: Headers,
    pub(super) partition_keys: bool,
    pub(super) missing: MissingKey,
    pub(super) jitter: u64,
    pub(super) respond: Option<Arc<Respond>>,
}

/// The validated layer.
#[derive(Clone)]
pub struct RateLimitLayer {
    pub(super) shared: Arc<Shared>,
}
