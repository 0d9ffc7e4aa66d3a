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
use redis_throttle_client::{Clock, Decision, Error as ClientError, Throttle, Verdict};

use crate::config::{Algorithm, Entry, Limit, Matched, RateLimitConfig, Unit, override_key};
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
    /// Redis could not answer within the deadline and `FAILURE_MODE=error`: gRPC `UNAVAILABLE`,
    /// so that Envoy's `failure_mode_deny` decides.
    Unavailable(String),
}

impl std::fmt::Display for ServiceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServiceError::Service(t) | ServiceError::Redis(t) | ServiceError::Unavailable(t) => f.write_str(t),
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
}

impl Service {
    pub fn new(options: Options, stats: Arc<Stats>, throttle: Throttle, clock: Arc<dyn Clock>) -> Service {
        let counters = Counters {
            total_requests: stats.counter("ratelimit_server.ShouldRateLimit.total_requests"),
            service_error: stats.counter("ratelimit.service.call.should_rate_limit.service_error"),
            redis_error: stats.counter("ratelimit.service.call.should_rate_limit.redis_error"),
            global_shadow_mode: stats.counter("ratelimit.service.global_shadow_mode"),
        };
        Service {
            options,
            stats,
            throttle,
            clock,
            config: RwLock::new(None),
            overrides: Mutex::new(HashMap::new()),
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
    pub async fn should_rate_limit_grpc(&self, request: &RateLimitRequest) -> Result<RateLimitResponse, ServiceError> {
        let started = std::time::Instant::now();
        self.counters.total_requests.inc(1);
        let result = self.should_rate_limit(request).await;
        self.stats.response_time.record(started.elapsed());
        result
    }

    /// A decision (gRPC's or `/json`'s), its errors counted as upstream counts them.
    pub async fn should_rate_limit(&self, request: &RateLimitRequest) -> Result<RateLimitResponse, ServiceError> {
        let result = self.decide(request).await;
        match &result {
            Err(ServiceError::Service(_)) => self.counters.service_error.inc(1),
            Err(ServiceError::Redis(_) | ServiceError::Unavailable(_)) => self.counters.redis_error.inc(1),
            Ok(_) => {}
        }
        result
    }

    async fn decide(&self, request: &RateLimitRequest) -> Result<RateLimitResponse, ServiceError> {
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
            let matched = match &d.limit {
                Some(o) => Some(Matched {
                    limit: self.override_limit(domain, &entries, o.requests_per_unit, o.unit)?,
                    share: None,
                }),
                None => config.get_limit(&self.stats, domain, &entries),
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
                Planned { matched: m.clone(), hits, negative: d.is_negative_hits }
            }));
        }

        let now = self.now_secs();
        // Every limit counts its hits (refunds give back, they are no hits).
        for p in planned.iter().flatten() {
            if !p.negative {
                p.matched.limit.stats.total_hits.inc(p.hits);
            }
        }
        let keys: Vec<Option<Vec<u8>>> = request
            .descriptors
            .iter()
            .zip(&planned)
            .map(|(d, p)| {
                p.as_ref()
                    .filter(|p| p.matched.limit.policy.is_some())
                    .map(|p| self.cache_key(domain, d, &p.matched, now))
            })
            .collect();
        let mut calls = Vec::new();
        let mut call_of: Vec<Option<usize>> = vec![None; n];
        for (i, (p, key)) in planned.iter().zip(&keys).enumerate() {
            if let (Some(p), Some(key)) = (p, key)
                && let Some(policy) = &p.matched.limit.policy
            {
                let q = i64::try_from(p.hits).unwrap_or(i64::MAX);
                call_of[i] = Some(calls.len());
                calls.push((policy, key.as_slice(), if p.negative { -q } else { q }));
            }
        }
        let mut all_denied = false;
        let decisions: Vec<Decision> = if calls.is_empty() {
            Vec::new()
        } else if self.options.all_or_nothing && calls.len() > 1 {
            let d = self.throttle.check_all_slots(&calls).await.map_err(client_error)?;
            all_denied = !d.allowed();
            if d.is_degraded() {
                self.degraded(&d)?;
            }
            // A degraded decision (fail open or closed) carries one verdict for every limit.
            let each = if d.each.len() == calls.len() { d.each.clone() } else { vec![d.numbers(); calls.len()] };
            each.into_iter()
                .map(|numbers| Decision {
                    verdict: numbers.verdict,
                    limit: numbers.limit,
                    remaining: numbers.remaining,
                    reset_after: numbers.reset_after,
                    source: d.source.clone(),
                    binding: 0,
                    each: Vec::new(),
                })
                .collect()
        } else {
            let each = self.throttle.check_each(&calls).await.map_err(client_error)?;
            for d in &each {
                if d.is_degraded() {
                    self.degraded(d)?;
                }
            }
            each
        };

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
            let status = self.status(
                limit,
                p,
                call_of[i].map(|c| &decisions[c]),
                calls.get(call_of[i].unwrap_or(usize::MAX)).map(|c| c.2),
                all_denied,
                now,
            );
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

    /// A degraded decision: with `FAILURE_MODE=error` the request fails (Envoy's
    /// `failure_mode_deny` then decides); otherwise the failure policy's answer stands.
    fn degraded(&self, d: &Decision) -> Result<(), ServiceError> {
        if self.options.failure_mode == FailureMode::Error {
            return Err(ServiceError::Unavailable(format!("redis unavailable: {:?}", d.source)));
        }
        Ok(())
    }

    /// One limited descriptor's status, and its stats counted as upstream counts them.
    fn status(
        &self,
        limit: &Limit,
        p: &Planned,
        decision: Option<&Decision>,
        quantity: Option<i64>,
        all_denied: bool,
        now: i64,
    ) -> DescriptorStatus {
        let current = PbRateLimit {
            name: limit.name.clone(),
            requests_per_unit: limit.requests_per_unit,
            unit: limit.unit.map_or(0, Unit::proto),
        };
        let hits = p.hits;
        let (over, threshold, before, after, cached, remaining, wait) = match decision {
            // `requests_per_unit: 0`: every hit is over (nothing is sent).
            None => (hits > 0 && !p.negative, 0u64, 0u64, if p.negative { 0 } else { hits }, false, 0i64, None),
            Some(d) => {
                let threshold = u64::try_from(d.limit.max(0)).unwrap_or(0);
                let mut remaining = d.remaining.clamp(0, d.limit.max(0));
                let over = !d.allowed();
                if !over && all_denied && quantity.is_some_and(|q| q > 0) {
                    // Decided all or nothing and another descriptor refused: nothing was charged.
                    remaining = remaining.saturating_add(quantity.unwrap_or(0)).min(d.limit);
                }
                let used = threshold.saturating_sub(u64::try_from(remaining).unwrap_or(0));
                let charged = !over && !all_denied && !p.negative;
                let (before, after) = if charged {
                    (used.saturating_sub(hits), used)
                } else {
                    (used, used.saturating_add(if p.negative { 0 } else { hits }))
                };
                let wait = match d.verdict {
                    Verdict::Denied { retry_after } => Some(retry_after),
                    _ => None,
                };
                (
                    over,
                    threshold,
                    before,
                    after,
                    matches!(d.source, redis_throttle_client::Source::DenyCache),
                    remaining,
                    wait.or(Some(d.reset_after)),
                )
            }
        };
        let stats = &limit.stats;
        let near = (threshold as f32 * self.options.near_limit_ratio).floor() as u64;
        if over {
            if cached {
                stats.over_limit.inc(hits);
                stats.over_limit_with_local_cache.inc(hits);
            } else if before >= threshold {
                stats.over_limit.inc(hits);
            } else {
                stats.over_limit.inc(after - threshold);
                stats.near_limit.inc(threshold - near.max(before));
            }
        } else if !p.negative {
            if after > near {
                stats.near_limit.inc(if before >= near { hits } else { after - near });
            }
            stats.within_limit.inc(hits);
        }
        let duration = match (limit.algorithm, limit.unit) {
            (Algorithm::FixedWindow, Some(unit)) => {
                let divider = unit.divider();
                Some(divider - now.rem_euclid(divider))
            }
            _ => wait.map(|w| i64::try_from(w.as_millis().div_ceil(1000)).unwrap_or(i64::MAX)),
        };
        let mut code = if over { Code::OverLimit } else { Code::Ok };
        if over && limit.shadow_mode {
            code = Code::Ok;
            stats.shadow_mode.inc(if cached || before >= threshold { hits } else { after - threshold });
        }
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
