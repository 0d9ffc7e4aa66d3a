//! `ShouldRateLimit`: a request's descriptors matched against the configuration, decided on
//! Redis through the client crate (one round trip per hash slot), and answered field for field
//! as envoyproxy/ratelimit answers.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit as PbRateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::{self as pbt, value::Kind};
use redis_throttle_client::policy::Rate;
use redis_throttle_client::{Clock, Decision, Error as ClientError, Policy, Reason, Source, Throttle, Verdict};

use crate::config::{Algorithm, Entry, Limit, Matched, RateLimitConfig, Unit, override_key};
use crate::local_cache::LocalCache;
use crate::settings::{FailureMode, Settings};
use crate::stats::Stats;

/// Why a request got no response (a gRPC error, as upstream's panics become errors).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServiceError {
    /// The request or the service's state (no domain, no configuration…): upstream's
    /// `service_error`, gRPC `UNKNOWN`.
    Service(String),
    /// Redis answered with an error: upstream's `redis_error`, gRPC `UNKNOWN`.
    Redis(String),
    /// Redis failed (an I/O error, no answer within `REDIS_TIMEOUT`, the breaker open after
    /// such failures) and `FAILURE_MODE=error`: gRPC `UNAVAILABLE`, so that Envoy's
    /// `failure_mode_deny` decides.
    Unavailable(String),
    /// A deadline (`DECISION_DEADLINE`, or the caller's gRPC deadline) passed before Redis
    /// answered and `FAILURE_MODE=error`: gRPC `DEADLINE_EXCEEDED` (Redis may well be answering:
    /// the wait was too long, not Redis down).
    Deadline(String),
}

impl std::fmt::Display for ServiceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServiceError::Service(t)
            | ServiceError::Redis(t)
            | ServiceError::Unavailable(t)
            | ServiceError::Deadline(t) => f.write_str(t),
        }
    }
}

/// The parts of the settings a decision reads.
#[derive(Debug, Clone)]
pub struct Options {
    pub cache_key_prefix: String,
    pub near_limit_ratio: f32,
    pub all_or_nothing: bool,
    pub headers: Option<(String, String, String)>,
    pub global_shadow_mode: bool,
    pub global_quota_mode: bool,
    pub dynamic_metadata: bool,
    pub failure_mode: FailureMode,
    /// `DECISION_DEADLINE`, when set.
    pub decision_deadline: Option<std::time::Duration>,
    /// `REDIS_TIMEOUT`: how long Redis may stay silent before that counts as its failure.
    pub redis_timeout: std::time::Duration,
    /// `EXPIRATION_JITTER_MAX_SECONDS`.
    pub expiration_jitter_max_seconds: u64,
    /// `LOCAL_CACHE_SIZE_IN_BYTES` (0: no local cache).
    pub local_cache_bytes: usize,
}

impl Options {
    pub fn from_settings(s: &Settings) -> Options {
        Options {
            cache_key_prefix: s.cache_key_prefix.clone(),
            near_limit_ratio: s.near_limit_ratio,
            all_or_nothing: s.stop_cache_key_increment_when_overlimit,
            headers: s
                .response_headers_enabled
                .then(|| (s.header_limit.clone(), s.header_remaining.clone(), s.header_reset.clone())),
            global_shadow_mode: s.global_shadow_mode,
            global_quota_mode: s.global_quota_mode,
            dynamic_metadata: s.response_dynamic_metadata,
            failure_mode: s.failure_mode,
            decision_deadline: s.decision_deadline,
            redis_timeout: s.redis.timeout,
            expiration_jitter_max_seconds: s.expiration_jitter_max_seconds,
            local_cache_bytes: s.local_cache_size_in_bytes,
        }
    }
}

impl Default for Options {
    fn default() -> Options {
        Options {
            cache_key_prefix: String::new(),
            near_limit_ratio: 0.8,
            all_or_nothing: false,
            headers: None,
            global_shadow_mode: false,
            global_quota_mode: false,
            dynamic_metadata: false,
            failure_mode: FailureMode::Error,
            decision_deadline: None,
            redis_timeout: std::time::Duration::from_secs(10),
            expiration_jitter_max_seconds: 0,
            local_cache_bytes: 0,
        }
    }
}

/// The service: the configuration in force, the client, the clock and the stats.
pub struct Service {
    pub options: Options,
    pub stats: Arc<Stats>,
    pub throttle: Throttle,
    clock: Arc<dyn Clock>,
    config: RwLock<Option<Arc<RateLimitConfig>>>,
    /// `LOCAL_CACHE_SIZE_IN_BYTES`: keys known over their limit.
    local_cache: Option<Arc<LocalCache>>,
    /// Limits Envoy's descriptor overrides asked for, by stats key and limit.
    overrides: Mutex<HashMap<(String, u32, i32), Arc<Limit>>>,
    /// The service's own counters, looked up once (every request counts one).
    counters: Counters,
}

struct Counters {
    total_requests: Arc<crate::stats::Counter>,
    service_error: Arc<crate::stats::Counter>,
    redis_error: Arc<crate::stats::Counter>,
    global_shadow_mode: Arc<crate::stats::Counter>,
}

/// One descriptor's limit and what it sends.
struct Planned {
    matched: Matched,
    hits: u64,
    negative: bool,
    /// The descriptor's own `hits_addend` (a charge for what was used), not the request's.
    own_addend: bool,
}

/// The client a request's decisions wait on: the service's, or a view bounded by the caller's
/// own deadline (`caller`), so that an error can say which deadline passed.
#[derive(Clone, Copy)]
struct Waiting<'a> {
    throttle: &'a Throttle,
    caller: bool,
}

/// How a descriptor's hits reach its limiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Charge {
    /// Admitted or refused; a refused take counts nothing (our algorithms, and a fixed window
    /// under `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`).
    Take,
    /// Counted whatever the limit says (`DEBIT`): over when the hits overdraw.
    Debit,
    /// `is_negative_hits`: given back.
    Refund,
}

/// One descriptor's call.
struct Send {
    policy: Policy,
    key: Vec<u8>,
    quantity: i64,
    charge: Charge,
    fixed: bool,
}

/// One call of a round trip: its descriptor, what it sends, and whether it is the peek that
/// reads what remained before a debit.
struct Asked<'a> {
    at: usize,
    policy: &'a Policy,
    key: &'a [u8],
    quantity: i64,
    debit: bool,
    peek: bool,
}

impl<'a> Asked<'a> {
    fn new(at: usize, s: &'a Send, quantity: i64, debit: bool) -> Asked<'a> {
        Asked { at, policy: &s.policy, key: &s.key, quantity, debit, peek: false }
    }
}

/// What decided one descriptor.
enum Outcome {
    /// The local cache knew it over its limit (nothing sent).
    Cached,
    Decided {
        decision: Decision,
        /// Whether its hits were counted.
        charged: bool,
        /// What remained before its hits, when a reply said (a refused take's, or a peek's).
        before: Option<i64>,
    },
}

impl Service {
    pub fn new(options: Options, stats: Arc<Stats>, throttle: Throttle, clock: Arc<dyn Clock>) -> Service {
        let counters = Counters {
            total_requests: stats.counter("ratelimit_server.ShouldRateLimit.total_requests"),
            service_error: stats.counter("ratelimit.service.call.should_rate_limit.service_error"),
            redis_error: stats.counter("ratelimit.service.call.should_rate_limit.redis_error"),
            global_shadow_mode: stats.counter("ratelimit.service.global_shadow_mode"),
        };
        let local_cache = (options.local_cache_bytes > 0).then(|| {
            let cache = Arc::new(LocalCache::new(options.local_cache_bytes));
            // Upstream's freecache gauges, set when the stats are read.
            let gauges: Vec<_> = [
                "entryCount",
                "lookupCount",
                "hitCount",
                "missCount",
                "evacuateCount",
                "expiredCount",
                "overwriteCount",
                "averageAccessTime",
            ]
            .iter()
            .map(|name| stats.gauge(&format!("ratelimit.localcache.{name}")))
            .collect();
            let c = cache.clone();
            stats.on_refresh(move || {
                let load = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
                let values = [
                    c.len() as u64,
                    load(&c.lookups),
                    load(&c.hits),
                    load(&c.misses),
                    load(&c.evacuated),
                    load(&c.expired),
                    load(&c.overwritten),
                    c.average_access_time(),
                ];
                for (g, v) in gauges.iter().zip(values) {
                    g.set(v);
                }
            });
            cache
        });
        Service {
            options,
            stats,
            throttle,
            clock,
            config: RwLock::new(None),
            overrides: Mutex::new(HashMap::new()),
            local_cache,
            counters,
        }
    }

    /// The configuration in force, if one loaded.
    pub fn config(&self) -> Option<Arc<RateLimitConfig>> {
        self.config.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Puts a loaded configuration in force.
    pub fn set_config(&self, config: RateLimitConfig) {
        *self.config.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(config));
    }

    fn now_secs(&self) -> i64 {
        self.clock.now().as_nanos().div_euclid(1_000_000_000)
    }

    fn override_limit(
        &self,
        domain: &str,
        entries: &[Entry<'_>],
        rpu: u32,
        unit: i32,
    ) -> Result<Arc<Limit>, ServiceError> {
        let unit_of = Unit::from_proto(unit).ok_or_else(|| {
            ServiceError::Service(format!("the descriptor's limit override has an unknown unit ({unit})"))
        })?;
        let key = override_key(domain, entries);
        let mut map = self.overrides.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() > 10_000 {
            map.clear();
        }
        if let Some(l) = map.get(&(key.clone(), rpu, unit)) {
            return Ok(l.clone());
        }
        let limit = Arc::new(
            Limit::from_override(key.clone(), self.stats.limit(&key), rpu, unit_of)
                .map_err(|e| ServiceError::Service(e.to_string()))?,
        );
        map.insert((key, rpu, unit), limit.clone());
        Ok(limit)
    }

    /// The cache key of a descriptor's limit: upstream's (`prefix` + domain + `_` + each
    /// `key_value_`, then the window's start for a fixed window), or, for our algorithms, the
    /// algorithm's name instead of the window.
    fn cache_key(&self, domain: &str, d: &RateLimitDescriptor, m: &Matched, now: i64) -> Vec<u8> {
        let mut k = String::with_capacity(64);
        k.push_str(&self.options.cache_key_prefix);
        k.push_str(domain);
        k.push('_');
        for (i, e) in d.entries.iter().enumerate() {
            k.push_str(&e.key);
            k.push('_');
            match m.share.as_ref().and_then(|s| s.get(i)).and_then(Option::as_ref) {
                Some(pattern) => k.push_str(pattern),
                None => k.push_str(&e.value),
            }
            k.push('_');
        }
        let limit = &m.limit;
        match (limit.algorithm, limit.unit) {
            (Algorithm::FixedWindow, Some(unit)) => {
                let divider = unit.divider();
                k.push_str(&(now.div_euclid(divider) * divider).to_string());
            }
            (other, _) => k.push_str(other.key_suffix()),
        }
        k.into_bytes()
    }

    /// A gRPC call: counted in `ratelimit_server.ShouldRateLimit.total_requests` and timed in
    /// `.response_time`, as upstream's gRPC interceptor does (its `/json` handler calls the
    /// service directly, and so counts in neither).
    ///
    /// `caller_deadline`: what is left of the caller's gRPC deadline (`grpc-timeout`), if it set
    /// one: Redis is waited for no longer than that, then `FAILURE_MODE` answers.
    pub async fn should_rate_limit_grpc(
        &self,
        request: &RateLimitRequest,
        caller_deadline: Option<std::time::Duration>,
    ) -> Result<RateLimitResponse, ServiceError> {
        let started = std::time::Instant::now();
        self.counters.total_requests.inc(1);
        let result = self.should_rate_limit_within(request, caller_deadline).await;
        self.stats.response_time.record(started.elapsed());
        result
    }

    /// A decision (gRPC's or `/json`'s), its errors counted as upstream counts them.
    pub async fn should_rate_limit(&self, request: &RateLimitRequest) -> Result<RateLimitResponse, ServiceError> {
        self.should_rate_limit_within(request, None).await
    }

    async fn should_rate_limit_within(
        &self,
        request: &RateLimitRequest,
        caller_deadline: Option<std::time::Duration>,
    ) -> Result<RateLimitResponse, ServiceError> {
        // The caller's deadline, when shorter than ours, bounds the wait for Redis.
        let shorter;
        let throttle = match caller_deadline {
            Some(d) if d < self.throttle.deadline() => {
                shorter = self.throttle.within(d);
                Waiting { throttle: &shorter, caller: true }
            }
            _ => Waiting { throttle: &self.throttle, caller: false },
        };
        let result = self.decide(request, throttle).await;
        match &result {
            Err(ServiceError::Service(_)) => self.counters.service_error.inc(1),
            Err(ServiceError::Redis(_) | ServiceError::Unavailable(_) | ServiceError::Deadline(_)) => {
                self.counters.redis_error.inc(1)
            }
            Ok(_) => {}
        }
        result
    }

    async fn decide(
        &self,
        request: &RateLimitRequest,
        waiting: Waiting<'_>,
    ) -> Result<RateLimitResponse, ServiceError> {
        if request.domain.is_empty() {
            return Err(ServiceError::Service("rate limit domain must not be empty".into()));
        }
        if request.descriptors.is_empty() {
            return Err(ServiceError::Service("rate limit descriptor list must not be empty".into()));
        }
        let config = self.config().ok_or_else(|| ServiceError::Service("no rate limit configuration loaded".into()))?;
        let domain = request.domain.as_str();
        let n = request.descriptors.len();

        // Upstream's constructLimitsToCheck: each descriptor's limit, unlimited ones set aside,
        // then every limit another matched limit replaces dropped.
        let mut planned: Vec<Option<Planned>> = Vec::with_capacity(n);
        let mut unlimited = vec![false; n];
        let mut replacing: HashSet<&str> = HashSet::new();
        let mut found: Vec<Option<Matched>> = Vec::with_capacity(n);
        for d in &request.descriptors {
            let entries: Vec<Entry<'_>> = d.entries.iter().map(|e| Entry { key: &e.key, value: &e.value }).collect();
            // An override on an unknown domain limits nothing (upstream's GetLimit looks the
            // domain up first, and counts `domain_not_found`).
            let matched = match &d.limit {
                Some(o) if config.has_domain(domain) => Some(Matched {
                    limit: self.override_limit(domain, &entries, o.requests_per_unit, o.unit)?,
                    share: None,
                }),
                _ => config.get_limit(&self.stats, domain, &entries),
            };
            found.push(matched);
        }
        for (i, m) in found.iter().enumerate() {
            if let Some(m) = m {
                replacing.extend(m.limit.replaces.iter().map(String::as_str));
                if m.limit.unlimited {
                    unlimited[i] = true;
                }
            }
        }
        for (i, (d, m)) in request.descriptors.iter().zip(found.iter()).enumerate() {
            let keep = m
                .as_ref()
                .filter(|m| !unlimited[i] && (m.limit.name.is_empty() || !replacing.contains(m.limit.name.as_str())));
            planned.push(keep.map(|m| {
                // Upstream's GetHitsAddends: the descriptor's own hits_addend (0 included), else
                // the request's, at least 1.
                let hits = match &d.hits_addend {
                    Some(v) => v.value,
                    None => u64::from(request.hits_addend.max(1)),
                };
                Planned { matched: m.clone(), hits, negative: d.is_negative_hits, own_addend: d.hits_addend.is_some() }
            }));
        }

        let now = self.now_secs();
        // Every limit counts its hits (refunds give back, they are no hits).
        for p in planned.iter().flatten() {
            if !p.negative {
                p.matched.limit.stats.total_hits.inc(p.hits);
            }
        }
        let instant = std::time::Instant::now();
        let mut sends: Vec<Option<Send>> = Vec::with_capacity(n);
        let mut cached = vec![false; n];
        for (i, (d, p)) in request.descriptors.iter().zip(&planned).enumerate() {
            let Some(p) = p else {
                sends.push(None);
                continue;
            };
            let Some(policy) = self.policy_of(&p.matched.limit, d, &p.matched, domain, now) else {
                sends.push(None);
                continue;
            };
            let key = self.cache_key(domain, d, &p.matched, now);
            if let Some(cache) = &self.local_cache
                && !p.negative
                && cache.over(&key, p.hits, instant)
            {
                cached[i] = true;
            }
            let q = i64::try_from(p.hits).unwrap_or(i64::MAX);
            let fixed = p.matched.limit.algorithm == Algorithm::FixedWindow;
            let charge = if p.negative {
                Charge::Refund
            } else if p.own_addend || (fixed && !self.options.all_or_nothing) {
                // A descriptor's own hits_addend is a charge for what was used (Envoy's
                // check-then-charge token quotas): counted whatever the limit says, on every
                // algorithm. A fixed window counts every hit as upstream's does.
                Charge::Debit
            } else {
                Charge::Take
            };
            sends.push(Some(Send { policy, key, quantity: if p.negative { -q } else { q }, charge, fixed }));
        }
        let decided = self.send(waiting, &sends, &cached).await?;
        let mut response = RateLimitResponse::default();
        let mut min_remaining = u32::MAX;
        let mut minimum: Option<usize> = None;
        let mut passed = Vec::new();
        let (mut failed_rate, mut failed_quota, mut total_quota) = (0, 0, 0);
        for i in 0..n {
            if unlimited[i] {
                response.statuses.push(DescriptorStatus {
                    code: Code::Ok as i32,
                    limit_remaining: u32::MAX,
                    ..Default::default()
                });
                continue;
            }
            let Some(p) = &planned[i] else {
                response.statuses.push(DescriptorStatus { code: Code::Ok as i32, ..Default::default() });
                passed.push(i);
                continue;
            };
            let limit = &p.matched.limit;
            let status = self.status(limit, p, decided[i].as_ref(), now);
            if self.options.headers.is_some() && status.limit_remaining < min_remaining {
                minimum = Some(i);
                min_remaining = status.limit_remaining;
            }
            let quota = self.options.global_quota_mode || limit.quota_mode;
            if status.code == Code::OverLimit as i32 {
                if quota {
                    failed_quota += 1;
                } else {
                    failed_rate += 1;
                    minimum = Some(i);
                    min_remaining = 0;
                }
            } else {
                passed.push(i);
            }
            if quota {
                total_quota += 1;
            }
            response.statuses.push(status);
        }
        let mut overall = Code::Ok;
        if failed_rate > 0 || (total_quota > 0 && total_quota == failed_quota) {
            overall = Code::OverLimit;
        }
        if let (Some((limit_h, remaining_h, reset_h)), Some(m)) = (&self.options.headers, minimum) {
            let s = &response.statuses[m];
            let rpu = s.current_limit.as_ref().map_or(0, |l| l.requests_per_unit);
            let reset = s.duration_until_reset.as_ref().map_or(0, |d| d.seconds);
            response.response_headers_to_add = vec![
                header(limit_h, rpu.to_string()),
                header(remaining_h, s.limit_remaining.to_string()),
                header(reset_h, reset.to_string()),
            ];
        }
        if overall == Code::OverLimit && self.options.global_shadow_mode {
            overall = Code::Ok;
            self.counters.global_shadow_mode.inc(1);
        }
        if self.options.dynamic_metadata {
            response.dynamic_metadata = Some(metadata(request, &passed, &planned));
        }
        response.overall_code = overall as i32;
        Ok(response)
    }

    /// A fixed window's policy with `EXPIRATION_JITTER_MAX_SECONDS`: its window (and so its
    /// key's life) longer by up to that many seconds, the same for a key every time (spread by
    /// key). The key names its window's start, so the decisions do not change.
    fn policy_of(&self, limit: &Limit, d: &RateLimitDescriptor, m: &Matched, domain: &str, now: i64) -> Option<Policy> {
        let policy = limit.policy?;
        let jitter = self.options.expiration_jitter_max_seconds;
        let (Algorithm::FixedWindow, Some(unit), true) = (limit.algorithm, limit.unit, jitter > 0) else {
            return Some(policy);
        };
        // FNV-1a of the key: stable, cheap, spread.
        let key = self.cache_key(domain, d, m, now);
        let hash = key.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        let extra = hash % jitter;
        let window = std::time::Duration::from_secs(unit.divider().unsigned_abs().saturating_add(extra));
        Policy::counter(Rate::per(i64::from(limit.requests_per_unit), window)).ok().or(Some(policy))
    }

    /// Sends every descriptor's call as the counting mode says: each on its own (one round trip
    /// per hash slot), or all or nothing (`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`).
    async fn send(
        &self,
        waiting: Waiting<'_>,
        sends: &[Option<Send>],
        cached: &[bool],
    ) -> Result<Vec<Option<Outcome>>, ServiceError> {
        let n = sends.len();
        let mut out: Vec<Option<Outcome>> = (0..n).map(|_| None).collect();
        let any_cached = cached.iter().any(|&c| c);
        let mut each: Vec<Asked<'_>> = Vec::new();
        let mut all: Vec<usize> = Vec::new();
        for (i, s) in sends.iter().enumerate() {
            let Some(s) = s else { continue };
            if cached[i] {
                out[i] = Some(Outcome::Cached);
                continue;
            }
            match s.charge {
                // Upstream's stop-increment: once one key is known over, no other is counted.
                Charge::Take | Charge::Debit if self.options.all_or_nothing && any_cached => {
                    each.push(Asked::new(i, s, 0, false));
                }
                Charge::Take if self.options.all_or_nothing => all.push(i),
                Charge::Debit => {
                    if s.quantity > 1 {
                        // What remained before the hits (for upstream's near/over stats).
                        each.push(Asked { peek: true, ..Asked::new(i, s, 0, false) });
                    }
                    each.push(Asked::new(i, s, s.quantity, true));
                }
                Charge::Take | Charge::Refund => each.push(Asked::new(i, s, s.quantity, false)),
            }
        }
        if all.len() == 1 {
            let i = all[0];
            if let Some(s) = &sends[i] {
                each.push(Asked::new(i, s, s.quantity, s.fixed));
            }
            all.clear();
        }
        let mut before: Vec<Option<i64>> = vec![None; n];
        if !each.is_empty() {
            let calls: Vec<(&Policy, &[u8], i64)> = each.iter().map(|a| (a.policy, a.key, a.quantity)).collect();
            let debits: Vec<bool> = each.iter().map(|a| a.debit).collect();
            let decisions = self.each(waiting, &calls, &debits).await?;
            for (a, d) in each.iter().zip(decisions) {
                let (i, q, debit, peek) = (a.at, a.quantity, a.debit, a.peek);
                self.check_degraded(waiting, &d)?;
                if peek {
                    before[i] = Some(d.remaining);
                    continue;
                }
                let charged = q > 0 && !d.is_degraded() && (debit || d.allowed());
                let known = if charged { before[i] } else { Some(d.remaining) };
                out[i] = Some(Outcome::Decided { decision: d, charged, before: known });
            }
        }
        if !all.is_empty() {
            let calls: Vec<(&Policy, &[u8], i64)> = all
                .iter()
                .filter_map(|&i| sends[i].as_ref().map(|s| (&s.policy, s.key.as_slice(), s.quantity)))
                .collect();
            let d = waiting.throttle.check_all_slots(&calls).await.map_err(client_error)?;
            self.check_degraded(waiting, &d)?;
            let refused = !d.allowed();
            // A degraded decision (fail open or closed) carries one verdict for every limit.
            let numbers = if d.each.len() == calls.len() { d.each.clone() } else { vec![d.numbers(); calls.len()] };
            let mut over_fixed = Vec::new();
            for ((&i, n), &(_, _, q)) in all.iter().zip(numbers).zip(&calls) {
                let mut one = Decision { each: Vec::new(), binding: 0, source: d.source.clone(), ..d.clone() };
                one.verdict = n.verdict;
                one.limit = n.limit;
                one.reset_after = n.reset_after;
                one.remaining = n.remaining;
                if refused && n.verdict == Verdict::Allowed && q > 0 && !d.is_degraded() {
                    // Another descriptor refused: nothing was charged here.
                    one.remaining = n.remaining.saturating_add(q).min(n.limit);
                }
                let charged = !refused && !d.is_degraded() && q > 0;
                if refused
                    && n.verdict != Verdict::Allowed
                    && !d.is_degraded()
                    && sends[i].as_ref().is_some_and(|s| s.fixed)
                {
                    over_fixed.push(i);
                }
                let known = if charged { None } else { Some(one.remaining) };
                out[i] = Some(Outcome::Decided { decision: one, charged, before: known });
            }
            // Upstream's stop-increment still counts the keys that went over (only the others
            // stay as they were): their hits are charged now.
            if !over_fixed.is_empty() {
                let calls: Vec<(&Policy, &[u8], i64)> = over_fixed
                    .iter()
                    .filter_map(|&i| sends[i].as_ref().map(|s| (&s.policy, s.key.as_slice(), s.quantity)))
                    .collect();
                let debits = vec![true; calls.len()];
                let decisions = self.each(waiting, &calls, &debits).await?;
                for (&i, d) in over_fixed.iter().zip(decisions) {
                    if let Some(Outcome::Decided { decision, charged, .. }) = &mut out[i]
                        && !d.is_degraded()
                    {
                        *charged = true;
                        decision.remaining = d.remaining;
                    }
                }
            }
        }
        if let Some(cache) = &self.local_cache {
            let now = std::time::Instant::now();
            for (s, o) in sends.iter().zip(&out) {
                if let (Some(s), Some(Outcome::Decided { decision, .. })) = (s, o)
                    && let Verdict::Denied { retry_after } = decision.verdict
                    && matches!(decision.source, Source::Server)
                    && s.quantity >= 0
                {
                    // Past a fixed window's limit every hit is over until the window ends (its
                    // key changes then); elsewhere, hits as many as were refused, until then.
                    let hits = if s.fixed { 0 } else { s.quantity.unsigned_abs() };
                    cache.insert(&s.key, hits, now + retry_after, now);
                }
            }
        }
        Ok(out)
    }

    /// Each call decided on its own (debits marked), one round trip per hash slot.
    async fn each(
        &self,
        waiting: Waiting<'_>,
        calls: &[(&Policy, &[u8], i64)],
        debits: &[bool],
    ) -> Result<Vec<Decision>, ServiceError> {
        let debiting: Vec<Option<Policy>> = calls.iter().zip(debits).map(|(c, &d)| d.then(|| c.0.debiting())).collect();
        let calls: Vec<(&Policy, &[u8], i64)> =
            calls.iter().zip(&debiting).map(|(&(p, k, q), d)| (d.as_ref().unwrap_or(p), k, q)).collect();
        waiting.throttle.check_each(&calls).await.map_err(client_error)
    }

    /// A degraded decision: with `FAILURE_MODE=error` the request fails with an error that says
    /// what failed (Envoy's `failure_mode_deny` then decides); otherwise the failure policy's
    /// answer stands.
    fn check_degraded(&self, waiting: Waiting<'_>, d: &Decision) -> Result<(), ServiceError> {
        let Source::Degraded { reason, .. } = &d.source else { return Ok(()) };
        if self.options.failure_mode != FailureMode::Error {
            return Ok(());
        }
        Err(match reason {
            Reason::Timeout if waiting.caller => ServiceError::Deadline(format!(
                "the caller's gRPC deadline (grpc-timeout, {:?} left) passed before Redis answered (FAILURE_MODE=error)",
                waiting.throttle.deadline()
            )),
            Reason::Timeout => match self.options.decision_deadline {
                Some(deadline) => ServiceError::Deadline(format!(
                    "DECISION_DEADLINE ({deadline:?}) passed before Redis answered (FAILURE_MODE=error)"
                )),
                None => ServiceError::Unavailable(format!(
                    "redis did not answer within REDIS_TIMEOUT ({:?}) (FAILURE_MODE=error)",
                    self.options.redis_timeout
                )),
            },
            Reason::Connection(e) => ServiceError::Unavailable(format!("redis unreachable: {e} (FAILURE_MODE=error)")),
            Reason::BreakerOpen => ServiceError::Unavailable(
                "redis failed and is not asked until it answers again (circuit breaker open; FAILURE_MODE=error)"
                    .into(),
            ),
        })
    }

    /// One limited descriptor's status, and its stats counted as upstream counts them.
    fn status(&self, limit: &Limit, p: &Planned, outcome: Option<&Outcome>, now: i64) -> DescriptorStatus {
        let current = PbRateLimit {
            name: limit.name.clone(),
            requests_per_unit: limit.requests_per_unit,
            unit: limit.unit.map_or(0, Unit::proto),
        };
        let hits = if p.negative { 0 } else { p.hits };
        let stats = &limit.stats;
        let (over, remaining, wait) = match outcome {
            // `requests_per_unit: 0`: every hit is over (nothing is sent).
            None => {
                if hits > 0 {
                    stats.over_limit.inc(hits);
                }
                (hits > 0, 0i64, None)
            }
            Some(Outcome::Cached) => {
                stats.over_limit.inc(hits);
                stats.over_limit_with_local_cache.inc(hits);
                (true, 0, None)
            }
            Some(Outcome::Decided { decision: d, charged, before }) => {
                let threshold = u64::try_from(d.limit.max(0)).unwrap_or(0);
                let remaining = d.remaining.clamp(0, d.limit.max(0));
                let over = !d.allowed();
                let left = |r: i64| u64::try_from(r.clamp(0, d.limit.max(0))).unwrap_or(0);
                // Upstream's before/after the hits: from what remained before them where a reply
                // said; a charge that overdrew without it was at or past the limit before (exact
                // for one hit: larger debits send a peek first).
                let before = match (before, charged, over) {
                    (Some(r), _, _) => threshold - left(*r),
                    (None, true, false) => (threshold - left(remaining)).saturating_sub(hits),
                    (None, true, true) => threshold,
                    (None, false, _) => threshold - left(remaining),
                };
                let after = before.saturating_add(hits);
                let near = (threshold as f32 * self.options.near_limit_ratio).floor() as u64;
                if over {
                    if before >= threshold {
                        stats.over_limit.inc(hits);
                    } else {
                        stats.over_limit.inc(after - threshold);
                        stats.near_limit.inc(threshold - near.max(before));
                    }
                    if limit.shadow_mode {
                        stats.shadow_mode.inc(if before >= threshold { hits } else { after - threshold });
                    }
                } else if !p.negative {
                    if after > near {
                        stats.near_limit.inc(if before >= near { hits } else { after - near });
                    }
                    stats.within_limit.inc(hits);
                }
                let wait = match d.verdict {
                    Verdict::Denied { retry_after } => Some(retry_after),
                    _ => None,
                };
                (over, remaining, wait.or(Some(d.reset_after)))
            }
        };
        if over && limit.shadow_mode && matches!(outcome, Some(Outcome::Cached)) {
            stats.shadow_mode.inc(hits);
        }
        let duration = match (limit.algorithm, limit.unit) {
            (Algorithm::FixedWindow, Some(unit)) => {
                let divider = unit.divider();
                Some(divider - now.rem_euclid(divider))
            }
            _ => wait.map(|w| i64::try_from(w.as_millis().div_ceil(1000)).unwrap_or(i64::MAX)),
        };
        let code = if over && !limit.shadow_mode { Code::OverLimit } else { Code::Ok };
        DescriptorStatus {
            code: code as i32,
            current_limit: Some(current),
            limit_remaining: if over { 0 } else { u32::try_from(remaining.max(0)).unwrap_or(u32::MAX) },
            duration_until_reset: duration.map(|s| pbt::Duration { seconds: s, nanos: 0 }),
            quota: None,
        }
    }
}

fn client_error(e: ClientError) -> ServiceError {
    match e {
        ClientError::Server(e) => ServiceError::Redis(e.to_string()),
        other => ServiceError::Service(other.to_string()),
    }
}

fn header(key: &str, value: String) -> HeaderValue {
    HeaderValue { key: key.to_string(), value, ..Default::default() }
}

fn string(s: impl Into<String>) -> pbt::Value {
    pbt::Value { kind: Some(Kind::StringValue(s.into())) }
}

fn number(n: f64) -> pbt::Value {
    pbt::Value { kind: Some(Kind::NumberValue(n)) }
}

fn list(values: Vec<pbt::Value>) -> pbt::Value {
    pbt::Value { kind: Some(Kind::ListValue(pbt::ListValue { values })) }
}

/// A JSON value as a protobuf `Value`.
pub fn json_to_value(v: &serde_json::Value) -> pbt::Value {
    let kind = match v {
        serde_json::Value::Null => Kind::NullValue(0),
        serde_json::Value::Bool(b) => Kind::BoolValue(*b),
        serde_json::Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(0.0)),
        serde_json::Value::String(s) => Kind::StringValue(s.clone()),
        serde_json::Value::Array(a) => {
            Kind::ListValue(pbt::ListValue { values: a.iter().map(json_to_value).collect() })
        }
        serde_json::Value::Object(o) => {
            Kind::StructValue(pbt::Struct { fields: o.iter().map(|(k, v)| (k.clone(), json_to_value(v))).collect() })
        }
    };
    pbt::Value { kind: Some(kind) }
}

/// Merges `src` into `dest` as upstream does: maps merge recursively, an existing key stays.
fn merge(dest: &mut pbt::Struct, src: &serde_json::Map<String, serde_json::Value>) {
    for (k, v) in src {
        match dest.fields.get_mut(k) {
            Some(pbt::Value { kind: Some(Kind::StructValue(d)) }) => {
                if let serde_json::Value::Object(o) = v {
                    merge(d, o);
                }
            }
            Some(_) => {}
            None => {
                dest.fields.insert(k.clone(), json_to_value(v));
            }
        }
    }
}

/// `RESPONSE_DYNAMIC_METADATA`: the domain, each descriptor (`key=value` entries, its limit
/// override and hits_addend), the request's hits_addend, and the `metadata` of the limits that
/// passed, merged.
fn metadata(request: &RateLimitRequest, passed: &[usize], planned: &[Option<Planned>]) -> pbt::Struct {
    let mut fields = std::collections::BTreeMap::new();
    fields.insert("domain".to_string(), string(request.domain.clone()));
    let descriptors = request
        .descriptors
        .iter()
        .map(|d| {
            let mut f = std::collections::BTreeMap::new();
            f.insert(
                "entries".to_string(),
                list(d.entries.iter().map(|e| string(format!("{}={}", e.key, e.value))).collect()),
            );
            if let Some(l) = &d.limit {
                f.insert(
                    "limit".to_string(),
                    string(format!(
                        "requests_per_unit:{} unit:{}",
                        l.requests_per_unit,
                        Unit::from_proto(l.unit).map_or("UNKNOWN", Unit::name)
                    )),
                );
            }
            if let Some(h) = &d.hits_addend {
                f.insert("hitsAddend".to_string(), number(h.value as f64));
            }
            pbt::Value { kind: Some(Kind::StructValue(pbt::Struct { fields: f.into_iter().collect() })) }
        })
        .collect();
    fields.insert("descriptors".to_string(), list(descriptors));
    if request.hits_addend != 0 {
        fields.insert("hitsAddend".to_string(), number(f64::from(request.hits_addend)));
    }
    let mut merged = pbt::Struct::default();
    for &i in passed {
        if let Some(Some(p)) = planned.get(i)
            && let Some(m) = &p.matched.limit.metadata
        {
            merge(&mut merged, m);
        }
    }
    if !merged.fields.is_empty() {
        fields.insert("metadata".to_string(), pbt::Value { kind: Some(Kind::StructValue(merged)) });
    }
    pbt::Struct { fields: fields.into_iter().collect() }
}
