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
mod headers;
mod key;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request, Response, StatusCode};

pub use body::{LeaseLost, LimitedBody};
pub use headers::{Headers, QUOTA_EXCEEDED, Refusal, RefusalKind, TEMPORARY_REDUCED_CAPACITY};
pub use key::{Key, RequestParts, Subject};

use crate::{Decision, Error, Lease, Numbers, Policy, Reason, Source, Throttle, Verdict};
use headers::{Entry, ceil_secs, window_secs};
use key::KeyError;
use redis::cluster_routing::Slot;

/// One limit: a name (its policy name in fields and problem bodies), what it limits, and the
/// key it counts by.
#[derive(Clone, Debug)]
pub struct Limit {
    name: String,
    kind: Kind,
    key: Key,
    shadow: bool,
}

#[derive(Clone, Debug)]
enum Kind {
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

type Respond = dyn Fn(&Refusal) -> Response<Bytes> + Send + Sync;

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
struct Planned {
    limit: Limit,
    prefix: Vec<u8>,
}

/// A route's limits by the way they are decided.
#[derive(Debug, Default)]
struct Plan {
    rate: Vec<Planned>,
    shadow_rate: Vec<Planned>,
    concurrent: Vec<Planned>,
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

    fn is_empty(&self) -> bool {
        self.rate.is_empty() && self.shadow_rate.is_empty() && self.concurrent.is_empty()
    }
}

struct Shared {
    throttle: Throttle,
    /// Calls go to a cluster: keys carry a hash tag, rate limits are decided per hash slot.
    cluster: bool,
    default: Plan,
    routes: HashMap<String, Plan>,
    headers: Headers,
    partition_keys: bool,
    missing: MissingKey,
    jitter: u64,
    respond: Option<Arc<Respond>>,
}

/// One hash slot's rate limits (indices into the request's keyed limits) and their decision.
struct Group {
    limits: Vec<usize>,
    decision: Decision,
}

/// A request's rate limits decided: the groups decided, in order (all admitting, or the last
/// one denying, the ones before it given back), and each limit's numbers (`None`: not decided,
/// or its refund failed).
struct Decided {
    groups: Vec<Group>,
    numbers: Vec<Option<Numbers>>,
    /// Each limit's `HELD` bound (the key's expiry read with the taking call), when its units
    /// may be given back: only a bounded refund is ever sent.
    held: Vec<Option<i64>>,
}

impl Decided {
    fn denying(&self) -> Option<&Group> {
        self.groups.last().filter(|g| !g.decision.allowed())
    }

    /// The binding limit (an index into the keyed limits): the denying one, else the one with
    /// the fewest remaining.
    fn binding(&self) -> Option<usize> {
        let of = |g: &Group| g.limits.get(g.decision.binding.min(g.limits.len().saturating_sub(1))).copied();
        match self.denying() {
            Some(g) => of(g),
            None => self.groups.iter().min_by_key(|g| g.decision.remaining).and_then(of),
        }
    }

    /// The first reason a group was decided without the server.
    fn degraded(&self) -> Option<&Reason> {
        self.groups.iter().find_map(|g| match &g.decision.source {
            Source::Degraded { reason, .. } => Some(reason),
            _ => None,
        })
    }
}

/// Units the server took for a request whose rate limits are not all decided yet: dropped with
/// units left (the request's future was dropped between two slots), it gives them back from a
/// task of its own.
struct Taken {
    throttle: Throttle,
    /// The limit's index among the request's, its policy, its key and its `HELD` bound.
    units: Vec<(usize, Policy, Vec<u8>, i64)>,
}

impl Drop for Taken {
    fn drop(&mut self) {
        let units = std::mem::take(&mut self.units);
        if units.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let throttle = self.throttle.clone();
        runtime.spawn(async move {
            for (_, policy, key, held) in units {
                if let Err(e) = throttle.refund_held(&policy, &key, 1, held).await {
                    tracing::warn!(error = %e, "redis-throttle: a cancelled request's rate units could not be given back");
                }
            }
        });
    }
}

/// What the layer decided for a request, in the response's extensions (shadow limits included).
#[derive(Debug, Clone, Default)]
pub struct RateLimitReport {
    pub outcomes: Vec<Outcome>,
}

/// One limit's decision.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub policy: String,
    pub shadow: bool,
    pub allowed: bool,
    pub limit: i64,
    pub remaining: i64,
    pub degraded: bool,
}

/// The validated layer.
#[derive(Clone)]
pub struct RateLimitLayer {
    shared: Arc<Shared>,
}

impl<S> tower_layer::Layer<S> for RateLimitLayer {
    type Service = RateLimitService<S>;
    fn layer(&self, inner: S) -> RateLimitService<S> {
        RateLimitService { inner, shared: self.shared.clone() }
    }
}

/// The service the layer wraps around a route.
#[derive(Clone)]
pub struct RateLimitService<S> {
    inner: S,
    shared: Arc<Shared>,
}

/// What to do with a request.
enum Admission {
    Refuse(Response<Bytes>),
    Pass { fields: http::HeaderMap, leases: Vec<Lease>, report: RateLimitReport },
}

impl<S, ReqB, ResB> tower_service::Service<Request<ReqB>> for RateLimitService<S>
where
    S: tower_service::Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send,
    ReqB: Send + 'static,
    ResB: http_body::Body<Data = Bytes>,
{
    type Response = Response<LimitedBody<ResB>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqB>) -> Self::Future {
        let shared = self.shared.clone();
        // The clone that was made ready is the one that serves this request.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let admission = shared.admit(&parts).await;
            let request = Request::from_parts(parts, body);
            match admission {
                Admission::Refuse(response) => Ok(response.map(LimitedBody::full)),
                Admission::Pass { fields, leases, report } => {
                    let mut response = inner.call(request).await?;
                    for (name, value) in &fields {
                        response.headers_mut().entry(name).or_insert_with(|| value.clone());
                    }
                    response.extensions_mut().insert(report);
                    Ok(response.map(|body| LimitedBody::new(body, leases)))
                }
            }
        })
    }
}

fn route_of(request: &http::request::Parts) -> &str {
    #[cfg(feature = "axum")]
    if let Some(matched) = request.extensions.get::<axum::extract::MatchedPath>() {
        return matched.as_str();
    }
    request.uri.path()
}

static DEGRADED: HeaderName = HeaderName::from_static("x-ratelimit-degraded");

fn reason_word(reason: &Reason) -> &'static str {
    match reason {
        Reason::Timeout => "timeout",
        Reason::Connection(_) => "connection",
        Reason::BreakerOpen => "breaker-open",
    }
}

/// A small, fast, non-cryptographic random number (for jitter).
fn random(bound: u64) -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static STATE: AtomicU64 = AtomicU64::new(0x9e37_79b9_7f4a_7c15);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos().into());
    let mut z = STATE.fetch_add(0x9e37_79b9_7f4a_7c15 ^ nanos, Ordering::Relaxed);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) % bound.saturating_add(1)
}

impl Shared {
    fn keyed<'p>(
        &self,
        planned: &'p [Planned],
        parts: &RequestParts<'_>,
    ) -> Result<Vec<(&'p Limit, Vec<u8>)>, Refusal> {
        let mut out = Vec::with_capacity(planned.len());
        for p in planned {
            let key = match p.limit.key.extract(parts) {
                // On a cluster the key is a hash tag: the limits of one key share a slot.
                Ok(Some(value)) if self.cluster => [p.prefix.as_slice(), b":{", &value, b"}"].concat(),
                Ok(Some(value)) => [p.prefix.as_slice(), b":", &value].concat(),
                Ok(None) if self.missing == MissingKey::Shared => p.prefix.clone(),
                Ok(None) => {
                    return Err(Refusal {
                        kind: RefusalKind::NoKey,
                        status: StatusCode::BAD_REQUEST,
                        violated: vec![p.limit.name.clone()],
                        retry_after: None,
                        detail: Some(format!(
                            "the request has no key for the rate limit {:?} ({:?})",
                            p.limit.name, p.limit.key
                        )),
                        grpc: false,
                    });
                }
                Err(KeyError::NoConnectInfo) => {
                    tracing::error!(limit = %p.limit.name, "redis-throttle: {}", ConfigError::NeedsConnectInfo);
                    return Err(error_refusal());
                }
            };
            out.push((&p.limit, key));
        }
        Ok(out)
    }

    /// The rate limits' hash-slot groups (indices into `keyed`), in the order of their first
    /// limit: one group on a single server, one per slot on a cluster.
    fn slot_groups(&self, keyed: &[(&Limit, Vec<u8>)]) -> Vec<Vec<usize>> {
        if !self.cluster {
            return vec![(0..keyed.len()).collect()];
        }
        let mut groups: Vec<(Slot, Vec<usize>)> = Vec::new();
        for (i, (_, key)) in keyed.iter().enumerate() {
            let slot = Slot::for_key(key);
            match groups.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, group)) => group.push(i),
                None => groups.push((slot, vec![i])),
            }
        }
        groups.into_iter().map(|(_, group)| group).collect()
    }

    /// Decides rate limits together: one call per hash slot (CL.ALL for several limits), the
    /// slots one after another in the order of their first limit. The first slot that denies
    /// ends it, and the units the slots before it took are given back (a refund each); a slot
    /// whose call fails gives them back too, and so does a request dropped between two slots
    /// (its client went away): the refunds are then sent from a task of their own. Units that
    /// may be given back (several slots, or `refundable`: the route has a concurrency limit)
    /// are taken with their `HELD` bound ([`Throttle::check_held`]), so that every refund is
    /// bounded: never more than the limiter still holds of them.
    async fn decide(&self, keyed: &[(&Limit, Vec<u8>)], refundable: bool) -> Result<Option<Decided>, Error> {
        if keyed.is_empty() {
            return Ok(None);
        }
        let mut decided =
            Decided { groups: Vec::new(), numbers: vec![None; keyed.len()], held: vec![None; keyed.len()] };
        let mut taken = Taken { throttle: self.throttle.clone(), units: Vec::new() };
        let groups = self.slot_groups(keyed);
        let bounded = refundable || groups.len() > 1;
        for limits in groups {
            let calls: Vec<(&Policy, &[u8], u32)> = limits
                .iter()
                .filter_map(|&i| match &keyed[i].0.kind {
                    Kind::Rate(p) => Some((p, keyed[i].1.as_slice(), 1)),
                    Kind::Concurrent { .. } => None,
                })
                .collect();
            let result = match (calls.as_slice(), bounded) {
                ([], _) => continue,
                ([(p, k, _)], false) => self.throttle.check(p, k).await.map(|d| (d, Vec::new())),
                (_, false) => self.throttle.check_all(&calls).await.map(|d| (d, Vec::new())),
                ([(p, k, _)], true) => self.throttle.check_held(p, k, 1).await.map(|(d, held)| (d, vec![held])),
                (_, true) => self.throttle.check_all_held(&calls).await,
            };
            let (decision, held) = match result {
                Ok(d) => d,
                Err(e) => {
                    self.give_back(&mut taken, &mut decided).await;
                    return Err(e);
                }
            };
            let each = if decision.each.is_empty() { vec![decision.numbers()] } else { decision.each.clone() };
            for (&i, n) in limits.iter().zip(each) {
                decided.numbers[i] = Some(n);
            }
            let allowed = decision.allowed();
            // The rate limits of the group, in the order of `calls` (and so of `held`).
            let rates = limits.iter().copied().filter(|&i| matches!(keyed[i].0.kind, Kind::Rate(_)));
            for (i, held) in rates.zip(held) {
                decided.held[i] = held;
                if let (true, Source::Server, Kind::Rate(policy), Some(held)) =
                    (allowed, &decision.source, &keyed[i].0.kind, held)
                {
                    taken.units.push((i, *policy, keyed[i].1.clone(), held));
                }
            }
            decided.groups.push(Group { limits, decision });
            if !allowed {
                self.give_back(&mut taken, &mut decided).await;
                break;
            }
        }
        taken.units.clear(); // admitted: the units are the request's
        Ok(Some(decided))
    }

    /// Gives back the units the server took for the admitting groups (a later one denied, or
    /// failed): one bounded refund per limit, through [`Throttle::refund_held`], each sent at
    /// most once. Each limit's numbers become the refund's (none when it fails: the unit stays
    /// taken, never more).
    async fn give_back(&self, taken: &mut Taken, decided: &mut Decided) {
        while let Some((i, policy, key, held)) = taken.units.pop() {
            match self.throttle.refund_held(&policy, &key, 1, held).await {
                Ok(d) if d.source == Source::Server => {
                    if let Some(n) = &mut decided.numbers[i] {
                        (n.remaining, n.reset_after) = (d.remaining, d.reset_after);
                    }
                }
                Ok(_) => decided.numbers[i] = None,
                Err(e) => {
                    tracing::warn!(error = %e, "redis-throttle: a refused request's rate units could not be given back");
                    decided.numbers[i] = None;
                }
            }
        }
    }

    async fn admit(&self, request: &http::request::Parts) -> Admission {
        let route = route_of(request);
        let plan = self.routes.get(route).unwrap_or(&self.default);
        if plan.is_empty() {
            return Admission::Pass {
                fields: http::HeaderMap::new(),
                leases: Vec::new(),
                report: RateLimitReport::default(),
            };
        }
        let grpc = headers::is_grpc(&request.headers);
        let parts = RequestParts {
            method: &request.method,
            uri: &request.uri,
            headers: &request.headers,
            extensions: &request.extensions,
            route,
        };
        let keyed = (|| {
            Ok((
                self.keyed(&plan.rate, &parts)?,
                self.keyed(&plan.shadow_rate, &parts)?,
                self.keyed(&plan.concurrent, &parts)?,
            ))
        })();
        let (rate, shadow, concurrent) = match keyed {
            Ok(k) => k,
            Err(refusal) => return Admission::Refuse(self.refuse(refusal, grpc, &[], None)),
        };
        // A route with a concurrency limit may give its rate units back: read their bounds then.
        let (enforced, shadowed) =
            tokio::join!(self.decide(&rate, !concurrent.is_empty()), self.decide(&shadow, false));
        let mut report = RateLimitReport::default();
        let mut entries: Vec<Entry<'_>> = Vec::new();
        let mut binding = None;

        if let Some(decided) = shadowed.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "redis-throttle: a shadow limit could not be decided");
            None
        }) {
            self.report_shadow(&shadow, &decided, &mut report);
        }
        let decided = match enforced {
            Ok(d) => d,
            Err(e) => {
                tracing::error!(error = %e, "redis-throttle: the rate limit could not be decided");
                return Admission::Refuse(self.refuse(error_refusal(), grpc, &[], None));
            }
        };
        let mut degraded: Option<&Reason> = None;
        if let Some(d) = &decided {
            let binding_limit = d.binding();
            for (i, ((limit, key), n)) in rate.iter().zip(&d.numbers).enumerate() {
                let (Kind::Rate(policy), Some(n)) = (&limit.kind, n) else { continue };
                report.outcomes.push(Outcome {
                    policy: limit.name.clone(),
                    shadow: false,
                    allowed: n.verdict == Verdict::Allowed,
                    limit: n.limit,
                    remaining: n.remaining,
                    degraded: d.degraded().is_some(),
                });
                if binding_limit == Some(i) {
                    binding = Some(entries.len());
                }
                entries.push(Entry {
                    name: &limit.name,
                    limit: n.limit,
                    window: Some(window_secs(policy)),
                    remaining: n.remaining,
                    reset_after: n.reset_after,
                    key,
                });
            }
            if let Some(reason) = d.degraded() {
                degraded = Some(reason);
                entries.clear(); // no numbers to show: the server was not asked
            }
            if let Some(denying) = d.denying() {
                let name = binding_limit.and_then(|i| rate.get(i)).map_or_else(String::new, |(l, _)| l.name.clone());
                return Admission::Refuse(self.refusal(&denying.decision, name, grpc, &entries, binding));
            }
        }

        // Concurrency: a lease each, enforced ones refusing, shadow ones reporting.
        let mut leases = Vec::new();
        for (limit, key) in &concurrent {
            let Kind::Concurrent { limit: most, lease } = limit.kind else { continue };
            match self.throttle.acquire(key, most, lease).await {
                Ok(Ok(held)) => {
                    report.outcomes.push(Outcome {
                        policy: limit.name.clone(),
                        shadow: limit.shadow,
                        allowed: true,
                        limit: most,
                        remaining: held.remaining(),
                        degraded: false,
                    });
                    if !limit.shadow {
                        entries.push(Entry {
                            name: &limit.name,
                            limit: most,
                            window: None,
                            remaining: held.remaining(),
                            reset_after: Duration::ZERO,
                            key,
                        });
                    }
                    leases.push(held);
                }
                Ok(Err(d)) if limit.shadow => {
                    shadow_denied(&limit.name, key);
                    report.outcomes.push(Outcome {
                        policy: limit.name.clone(),
                        shadow: true,
                        allowed: false,
                        limit: most,
                        remaining: 0,
                        degraded: d.is_degraded(),
                    });
                }
                Ok(Err(d)) => {
                    drop(leases);
                    if let Some(decided) = &decided {
                        self.refund_rate(&rate, decided).await;
                    }
                    if !d.is_degraded() {
                        entries.push(Entry {
                            name: &limit.name,
                            limit: most,
                            window: None,
                            remaining: 0,
                            reset_after: Duration::ZERO,
                            key,
                        });
                    }
                    let binding = entries.len().checked_sub(1);
                    return Admission::Refuse(self.refusal(&d, limit.name.clone(), grpc, &entries, binding));
                }
                Err(e) => {
                    tracing::error!(error = %e, limit = %limit.name, "redis-throttle: the concurrency limit could not be decided");
                    return Admission::Refuse(self.refuse(error_refusal(), grpc, &[], None));
                }
            }
        }
        let mut fields = http::HeaderMap::new();
        if let Some(reason) = degraded {
            fields.insert(DEGRADED.clone(), HeaderValue::from_static(reason_word(reason)));
        }
        headers::write(&mut fields, self.headers, &entries, binding, self.partition_keys);
        Admission::Pass { fields, leases, report }
    }

    /// A request a concurrency limit refused was not served: the units its rate limits took are
    /// given back (only what the server took; a degraded decision took nothing there), each
    /// bounded by its `held` (`HELD`: never more than the limiter still holds of it; none
    /// without one).
    async fn refund_rate(&self, rate: &[(&Limit, Vec<u8>)], decided: &Decided) {
        for group in decided.groups.iter().filter(|g| g.decision.allowed() && g.decision.source == Source::Server) {
            for &i in &group.limits {
                let (Some((limit, key)), Some(Some(held))) = (rate.get(i), decided.held.get(i)) else { continue };
                let Kind::Rate(policy) = &limit.kind else { continue };
                if let Err(e) = self.throttle.refund_held(policy, key, 1, *held).await {
                    tracing::warn!(error = %e, limit = %limit.name, "redis-throttle: a refused request's rate units could not be refunded");
                }
            }
        }
    }

    fn report_shadow(&self, keyed: &[(&Limit, Vec<u8>)], d: &Decided, report: &mut RateLimitReport) {
        // All or nothing among the shadow limits: the one that would have refused is the binding one.
        let refusing = d.denying().and_then(|_| d.binding());
        for (i, ((limit, key), n)) in keyed.iter().zip(&d.numbers).enumerate() {
            let Some(n) = n else { continue };
            let denied = refusing == Some(i);
            if denied {
                shadow_denied(&limit.name, key);
            }
            let allowed = n.verdict == Verdict::Allowed && !denied;
            report.outcomes.push(Outcome {
                policy: limit.name.clone(),
                shadow: true,
                allowed,
                limit: n.limit,
                remaining: n.remaining,
                degraded: d.degraded().is_some(),
            });
        }
    }

    /// A refusal for a denying (or failing-closed) decision.
    fn refusal(
        &self,
        d: &Decision,
        name: String,
        grpc: bool,
        entries: &[Entry<'_>],
        binding: Option<usize>,
    ) -> Response<Bytes> {
        let wait = match d.verdict {
            Verdict::Denied { retry_after } => retry_after,
            // Never admitted as asked: come back no sooner than a full window.
            _ => d.reset_after.max(Duration::from_secs(1)),
        };
        let retry_after = Some(ceil_secs(wait).max(1) + if self.jitter > 0 { random(self.jitter) } else { 0 });
        let refusal = if d.is_degraded() {
            Refusal {
                kind: RefusalKind::ReducedCapacity,
                status: StatusCode::SERVICE_UNAVAILABLE,
                violated: vec![name],
                retry_after,
                detail: None,
                grpc: false,
            }
        } else {
            Refusal {
                kind: RefusalKind::QuotaExceeded,
                status: StatusCode::TOO_MANY_REQUESTS,
                violated: vec![name],
                retry_after,
                detail: None,
                grpc: false,
            }
        };
        self.refuse(refusal, grpc, entries, binding)
    }

    fn refuse(
        &self,
        mut refusal: Refusal,
        grpc: bool,
        entries: &[Entry<'_>],
        binding: Option<usize>,
    ) -> Response<Bytes> {
        refusal.grpc = grpc;
        let mut response = match &self.respond {
            Some(f) => f(&refusal),
            None if grpc => refusal.grpc_response(),
            None => refusal.problem(),
        };
        let mut fields = http::HeaderMap::new();
        if let Some(secs) = refusal.retry_after {
            fields.insert(http::header::RETRY_AFTER, secs.into());
        }
        headers::write(&mut fields, self.headers, entries, binding, self.partition_keys);
        for (name, value) in &fields {
            response.headers_mut().entry(name).or_insert_with(|| value.clone());
        }
        response
    }
}

/// The layer could not decide: a 500 that says only that (keys and the server's error text,
/// which can hold them, go to the log).
fn error_refusal() -> Refusal {
    Refusal {
        kind: RefusalKind::Error,
        status: StatusCode::INTERNAL_SERVER_ERROR,
        violated: Vec::new(),
        retry_after: None,
        detail: Some("the rate limit cannot be decided".into()),
        grpc: false,
    }
}

fn shadow_denied(name: &str, key: &[u8]) {
    tracing::info!(limit = %name, key = %String::from_utf8_lossy(key), "redis-throttle: shadow limit would have refused");
    metrics::counter!("throttle_http_shadow_denied_total", "policy" => name.to_string()).increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ManualClock;

    /// A route that answers 200.
    #[derive(Clone)]
    struct Ok200;

    impl tower_service::Service<Request<()>> for Ok200 {
        type Response = Response<String>;
        type Error = std::convert::Infallible;
        type Future = std::future::Ready<Result<Response<String>, std::convert::Infallible>>;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, _: Request<()>) -> Self::Future {
            std::future::ready(Ok(Response::new("ok".into())))
        }
    }

    async fn call(layer: &RateLimitLayer, headers: &[(&'static str, &'static str)]) -> Response<LimitedBody<String>> {
        use tower_layer::Layer as _;
        use tower_service::Service as _;
        let mut request = Request::get("/").body(()).unwrap();
        for (k, v) in headers {
            request.headers_mut().insert(*k, HeaderValue::from_static(v));
        }
        layer.layer(Ok200).call(request).await.unwrap()
    }

    fn throttle() -> Throttle {
        Throttle::in_memory(ManualClock::at_unix_ms(1_000_000_000_000), crate::Config::default())
    }

    #[tokio::test]
    async fn keyless_requests_custom_refusals_and_jitter() {
        let key = Key::header(HeaderName::from_static("x-key"));
        let limit = Limit::rate("tight", Policy::parse("1/h").unwrap()).key(key);
        // Keyless requests refused when asked.
        let layer = RateLimit::new(throttle()).limit(limit.clone()).missing_key(MissingKey::Refuse).layer().unwrap();
        let r = call(&layer, &[]).await;
        assert_eq!(r.status(), 400);
        assert_eq!(r.headers()["content-type"], "application/problem+json");
        assert_eq!(call(&layer, &[("x-key", "a")]).await.status(), 200);

        // A custom refusal keeps Retry-After (with jitter: 3600 to 3610 s) and the fields.
        let layer = RateLimit::new(throttle())
            .limit(limit)
            .retry_jitter(Duration::from_secs(10))
            .respond_with(|refusal| {
                let mut r = Response::new(Bytes::from(format!("slow down: {}", refusal.violated.join(","))));
                *r.status_mut() = StatusCode::IM_A_TEAPOT;
                r
            })
            .layer()
            .unwrap();
        assert_eq!(call(&layer, &[("x-key", "a")]).await.status(), 200);
        let r = call(&layer, &[("x-key", "a")]).await;
        assert_eq!(r.status(), 418);
        let retry: u64 = r.headers()["retry-after"].to_str().unwrap().parse().unwrap();
        assert!((3600..=3610).contains(&retry), "{retry}");
        assert_eq!(r.headers()["ratelimit"], "\"tight\";r=0;t=3600");
        if let LimitedBody::Full { data } = r.into_body() {
            assert_eq!(data.unwrap(), "slow down: tight");
        }
    }

    #[tokio::test]
    async fn grpc_calls_are_refused_with_a_grpc_status() {
        let limit = Limit::rate("per-key", Policy::parse("1/h").unwrap()).key(Key::route());
        let layer = RateLimit::new(throttle()).limit(limit).layer().unwrap();
        let grpc = [("content-type", "application/grpc")];
        assert_eq!(call(&layer, &grpc).await.status(), 200);
        let r = call(&layer, &grpc).await;
        assert_eq!(
            (r.status(), &r.headers()["grpc-status"], &r.headers()["content-type"]),
            (StatusCode::OK, &HeaderValue::from_static("8"), &HeaderValue::from_static("application/grpc"))
        );
        assert_eq!(
            (&r.headers()["retry-after"], &r.headers()["ratelimit"]),
            (&HeaderValue::from_static("3600"), &HeaderValue::from_static("\"per-key\";r=0;t=3600"))
        );
        // The same limit refuses a plain HTTP request with a problem document.
        let r = call(&layer, &[]).await;
        assert_eq!(
            (r.status(), &r.headers()["content-type"]),
            (StatusCode::TOO_MANY_REQUESTS, &HeaderValue::from_static("application/problem+json"))
        );
    }

    #[test]
    fn configurations_that_cannot_work_do_not_build() {
        let limit = Limit::rate("a", Policy::parse("1/s").unwrap()).key(Key::route());
        let build = |r: RateLimit| r.layer().err();
        assert_eq!(
            build(RateLimit::new(throttle()).limit(limit.clone()).headers(Headers::DRAFT_6 | Headers::DRAFT_11)),
            Some(ConfigError::Headers)
        );
        assert_eq!(
            build(RateLimit::new(throttle()).limit(Limit::rate("a b", Policy::parse("1/s").unwrap()))),
            Some(ConfigError::Name("a b".into()))
        );
        let other = Limit::rate("a", Policy::parse("2/s").unwrap()).key(Key::route());
        assert_eq!(
            build(RateLimit::new(throttle()).limit(limit.clone()).route("/x", [other])),
            Some(ConfigError::Name("a".into())),
            "one name, two limits"
        );
        assert_eq!(
            build(RateLimit::new(throttle()).limit(limit.clone()).route("/x", [limit.clone()])),
            None,
            "the same limit on two routes"
        );
        assert!(matches!(
            build(
                RateLimit::new(throttle())
                    .limit(Limit::rate("a", Policy::parse("1/s").unwrap()).key(Key::forwarded_for(0)))
            ),
            Some(ConfigError::NoTrustedProxy(_))
        ));
        assert!(matches!(
            build(
                RateLimit::new(throttle()).limit(Limit::concurrent("c", 1, Duration::from_secs(1)).key(Key::route()))
            ),
            Some(ConfigError::LeasesNeedTheModule(_))
        ));
    }
}
