//! What the layer does with a request: keys its limits, decides them (one `CL.ALL` per hash
//! slot, leases for concurrency limits), and answers with the fields or a refusal.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request, Response, StatusCode};
use redis::cluster_routing::Slot;

use super::body::LimitedBody;
use super::config::{ConfigError, Kind, Limit, MissingKey, Planned, RateLimitLayer, Shared};
use super::headers::{self, Entry, Refusal, RefusalKind, ceil_secs, window_secs};
use super::key::{KeyError, RequestParts};
use crate::{Decision, Error, Lease, Numbers, Policy, Reason, Source, Throttle, Verdict};

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
