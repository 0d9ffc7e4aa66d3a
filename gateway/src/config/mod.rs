//! The rate limit configuration: envoyproxy/ratelimit's YAML (domains, nested descriptors,
//! `value` wildcards, `rate_limit {unit, requests_per_unit, unlimited, name, replaces}`,
//! `shadow_mode`, `quota_mode`, `detailed_metric`, `value_to_metric`, `share_threshold`,
//! `metadata`), its validation and error texts, and the lookup of a request's descriptor. Our
//! additions live inside `rate_limit`: `algorithm`, `burst`, `time_zone`, `precision`.
//!
//! The model knows nothing of where its documents come from ([`crate::source`]): files today,
//! xDS next, each hands [`load`] a list of named documents.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use redis_throttle_client::policy::{Per, Quota, Rate};
use redis_throttle_client::{Policy, PolicyError};
use serde_norway::Value;

use crate::stats::{LimitStats, Stats};

/// A configuration error: the document's name, then what is wrong (upstream's texts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

fn error(name: &str, text: impl std::fmt::Display) -> ConfigError {
    ConfigError(format!("{name}: {text}"))
}

/// The units of `rate_limit.unit`, with upstream's epoch-aligned meanings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Year,
}

impl Unit {
    /// The proto enum's name (`SECOND` …).
    pub fn name(self) -> &'static str {
        match self {
            Unit::Second => "SECOND",
            Unit::Minute => "MINUTE",
            Unit::Hour => "HOUR",
            Unit::Day => "DAY",
            Unit::Week => "WEEK",
            Unit::Month => "MONTH",
            Unit::Year => "YEAR",
        }
    }

    /// The proto enum's number.
    pub fn proto(self) -> i32 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 2,
            Unit::Hour => 3,
            Unit::Day => 4,
            Unit::Month => 5,
            Unit::Year => 6,
            Unit::Week => 7,
        }
    }

    pub fn from_proto(n: i32) -> Option<Unit> {
        Some(match n {
            1 => Unit::Second,
            2 => Unit::Minute,
            3 => Unit::Hour,
            4 => Unit::Day,
            5 => Unit::Month,
            6 => Unit::Year,
            7 => Unit::Week,
            _ => return None,
        })
    }

    /// A unit name as upstream reads it (any case); `UNKNOWN` is not a unit.
    pub fn parse(text: &str) -> Option<Unit> {
        Some(match text.to_ascii_uppercase().as_str() {
            "SECOND" => Unit::Second,
            "MINUTE" => Unit::Minute,
            "HOUR" => Unit::Hour,
            "DAY" => Unit::Day,
            "WEEK" => Unit::Week,
            "MONTH" => Unit::Month,
            "YEAR" => Unit::Year,
            _ => return None,
        })
    }

    /// Seconds per window: upstream's divider (a month is 30 days, a year 365; windows start at
    /// multiples of it since the Unix epoch, so a WEEK starts on a Thursday).
    pub fn divider(self) -> i64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3600,
            Unit::Day => 86_400,
            Unit::Week => 604_800,
            Unit::Month => 2_592_000,
            Unit::Year => 31_536_000,
        }
    }
}

/// How a limit counts (`rate_limit.algorithm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Upstream's: epoch-aligned fixed windows (`CL.COUNTER` on the window's key).
    FixedWindow,
    /// At most `requests_per_unit` in any span of one unit (`CL.WINDOW`).
    SlidingWindow,
    /// GCRA (`CL.THROTTLE`): `requests_per_unit` per unit, `burst` at once.
    Gcra,
    /// A bucket of `burst` tokens refilled by `requests_per_unit` every unit (`CL.BUCKET`).
    TokenBucket,
    /// Calendar periods in `time_zone` (`CL.QUOTA`): real months and days.
    Calendar,
}

impl Algorithm {
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingWindow => "sliding_window",
            Algorithm::Gcra => "gcra",
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::Calendar => "calendar",
        }
    }

    fn parse(text: &str) -> Option<Algorithm> {
        Some(match text {
            "fixed_window" => Algorithm::FixedWindow,
            "sliding_window" => Algorithm::SlidingWindow,
            "gcra" => Algorithm::Gcra,
            "token_bucket" => Algorithm::TokenBucket,
            "calendar" => Algorithm::Calendar,
            _ => return None,
        })
    }

    /// The suffix of a key that counts with this algorithm (fixed windows end with the window's
    /// start instead, as upstream's keys do): a key never changes hands between algorithms.
    pub fn key_suffix(self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "",
            Algorithm::SlidingWindow => "sliding",
            Algorithm::Gcra => "gcra",
            Algorithm::TokenBucket => "bucket",
            Algorithm::Calendar => "calendar",
        }
    }
}

/// Above this, an exact sliding window (`CL.WINDOW`'s log) would be refused by the module: such
/// limits count per bucket of `precision` (default: a hundredth of the unit).
pub const EXACT_WINDOW_MAX: u32 = 100_000;

/// A configured limit.
#[derive(Debug)]
pub struct Limit {
    /// The stats key (`domain.key_value.subkey`).
    pub full_key: String,
    pub stats: Arc<LimitStats>,
    pub requests_per_unit: u32,
    /// `None` only for an unlimited descriptor without a unit.
    pub unit: Option<Unit>,
    pub name: String,
    pub unlimited: bool,
    pub shadow_mode: bool,
    pub quota_mode: bool,
    pub detailed_metric: bool,
    pub replaces: Vec<String>,
    pub algorithm: Algorithm,
    /// What decides it; `None` when nothing is sent (unlimited, or `requests_per_unit: 0`).
    pub policy: Option<Policy>,
    /// `metadata`, as JSON (for the response's dynamic metadata).
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
}

impl Limit {
    /// The limit an Envoy descriptor's `limit` override asks for (a fixed window, as upstream).
    pub fn from_override(
        full_key: String,
        stats: Arc<LimitStats>,
        requests_per_unit: u32,
        unit: Unit,
    ) -> Result<Limit, PolicyError> {
        let policy = policy_for(Algorithm::FixedWindow, requests_per_unit, unit, None, None, None)?;
        Ok(Limit {
            full_key,
            stats,
            requests_per_unit,
            unit: Some(unit),
            name: String::new(),
            unlimited: false,
            shadow_mode: false,
            quota_mode: false,
            detailed_metric: false,
            replaces: Vec::new(),
            algorithm: Algorithm::FixedWindow,
            policy,
            metadata: None,
        })
    }

    /// A copy of this limit counted under another stats key (detailed metrics).
    fn restated(&self, full_key: String, stats: Arc<LimitStats>) -> Limit {
        Limit {
            full_key,
            stats,
            requests_per_unit: self.requests_per_unit,
            unit: self.unit,
            name: self.name.clone(),
            unlimited: self.unlimited,
            shadow_mode: self.shadow_mode,
            quota_mode: self.quota_mode,
            detailed_metric: self.detailed_metric,
            replaces: self.replaces.clone(),
            algorithm: self.algorithm,
            policy: self.policy,
            metadata: self.metadata.clone(),
        }
    }
}

/// The policy that decides `requests_per_unit` per `unit` with `algorithm` (`None` for 0,
/// upstream's block-list idiom: nothing to ask, every hit is over the limit).
pub fn policy_for(
    algorithm: Algorithm,
    rpu: u32,
    unit: Unit,
    burst: Option<u32>,
    zone: Option<&str>,
    precision: Option<Duration>,
) -> Result<Option<Policy>, PolicyError> {
    if rpu == 0 {
        return Ok(None);
    }
    let count = i64::from(rpu);
    let period = Duration::from_secs(unit.divider().unsigned_abs());
    let rate = Rate::per(count, period);
    let policy = match algorithm {
        Algorithm::FixedWindow => Policy::counter(rate)?,
        Algorithm::SlidingWindow => match precision {
            Some(p) => Policy::window_with_precision(rate, p)?,
            None if rpu > EXACT_WINDOW_MAX => {
                Policy::window_with_precision(rate, (period / 100).max(Duration::from_millis(1)))?
            }
            None => Policy::window(rate)?,
        },
        Algorithm::Gcra => Policy::throttle_with_burst(rate, i64::from(burst.unwrap_or(rpu)))?,
        Algorithm::TokenBucket => Policy::bucket(rate, i64::from(burst.unwrap_or(rpu)))?,
        Algorithm::Calendar => {
            let per = match unit {
                Unit::Minute => Per::Minute,
                Unit::Hour => Per::Hour,
                Unit::Day => Per::Day,
                Unit::Week => Per::Week,
                Unit::Month => Per::Month,
                Unit::Year => Per::Year,
                Unit::Second => {
                    return Err(PolicyError::Invalid(
                        "a calendar limit counts per minute, hour, day, week, month or year, not per second".into(),
                    ));
                }
            };
            let mut quota = Quota::per(count, per);
            if let Some(zone) = zone {
                quota = quota.tz(zone)?;
            }
            Policy::quota(quota)?
        }
    };
    Ok(Some(policy))
}

#[derive(Debug, Default)]
struct Descriptor {
    children: HashMap<String, Descriptor>,
    /// Every wildcard child's key (`key_val*ue`) and its parts split on `*`, in load order.
    wildcards: Vec<(String, Vec<String>)>,
    limit: Option<Arc<Limit>>,
    value_to_metric: bool,
    share_threshold: bool,
    /// The child's own key when `share_threshold` applies to it.
    wildcard_pattern: Option<String>,
}

/// A loaded configuration: every domain's descriptor tree.
#[derive(Debug, Default)]
pub struct RateLimitConfig {
    domains: HashMap<String, Descriptor>,
}

/// A descriptor as a request sends it.
pub struct Entry<'a> {
    pub key: &'a str,
    pub value: &'a str,
}

/// What a descriptor matched: its limit (possibly restated under a detailed stats key) and,
/// per entry, the wildcard pattern that stands for the entry's value in the cache key
/// (`share_threshold`).
#[derive(Debug, Clone)]
pub struct Matched {
    pub limit: Arc<Limit>,
    pub share: Option<Vec<Option<String>>>,
}

/// Whether `value` matches `parts` (a pattern split on `*`; each `*` matches any run).
fn wildcard_match(parts: &[String], value: &str) -> bool {
    if parts.len() == 1 {
        return parts[0] == value;
    }
    let (first, last) = (&parts[0], &parts[parts.len() - 1]);
    if !value.starts_with(first.as_str()) || !value.ends_with(last.as_str()) {
        return false;
    }
    let fixed: usize = parts.iter().map(String::len).sum();
    if value.len() < fixed {
        return false;
    }
    let mut rest = &value[first.len()..value.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part.as_str()) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}

impl RateLimitConfig {
    pub fn is_empty(&self) -> bool {
        self.domains.is_empty()
    }

    pub fn has_domain(&self, domain: &str) -> bool {
        self.domains.contains_key(domain)
    }

    /// Every limit, one line each, sorted (the debug port's `/rlconfig`).
    pub fn dump(&self) -> String {
        fn walk(d: &Descriptor, out: &mut Vec<String>) {
            if let Some(l) = &d.limit {
                let unit = l.unit.map_or("UNKNOWN", Unit::name);
                let mut line = format!(
                    "{}: unit={} requests_per_unit={}, shadow_mode: {}, quota_mode: {}",
                    l.full_key, unit, l.requests_per_unit, l.shadow_mode, l.quota_mode
                );
                if l.algorithm != Algorithm::FixedWindow {
                    let _ = write!(line, ", algorithm: {}", l.algorithm.name());
                    if let Some(p) = &l.policy {
                        let _ = write!(line, " ({p})");
                    }
                }
                out.push(line);
            }
            for child in d.children.values() {
                walk(child, out);
            }
        }
        let mut lines = Vec::new();
        for d in self.domains.values() {
            walk(d, &mut lines);
        }
        lines.sort();
        lines.iter().map(|l| format!("{l}\n")).collect()
    }

    /// The limit of one request descriptor, as upstream's `GetLimit` finds it: the most specific
    /// match at each level (`key_value`, then a wildcard in load order, then `key`), a limit only
    /// at the request's last entry. `None` for an unknown domain (counted as `domain_not_found`)
    /// or a descriptor that matches no limit.
    pub fn get_limit(&self, stats: &Stats, domain: &str, entries: &[Entry<'_>]) -> Option<Matched> {
        let Some(root) = self.domains.get(domain) else {
            stats
                .counter(&format!("ratelimit.service.rate_limit.{}.domain_not_found", crate::stats::sanitize(domain)))
                .inc(1);
            return None;
        };
        let mut level = &root.children;
        let mut prev = root;
        let mut limit: Option<Arc<Limit>> = None;
        let mut detailed = String::from(domain);
        let mut enhanced = String::from(domain);
        let mut share: HashMap<usize, String> = HashMap::new();
        for (i, entry) in entries.iter().enumerate() {
            let mut final_key = format!("{}_{}", entry.key, entry.value);
            detailed.push('.');
            detailed.push_str(&final_key);
            let mut next = level.get(&final_key);
            let mut wildcard_key: Option<&str> = None;
            if next.is_none() {
                for (key, parts) in &prev.wildcards {
                    if wildcard_match(parts, &final_key) {
                        next = level.get(key);
                        wildcard_key = Some(key);
                        break;
                    }
                }
            }
            let by_value = next.is_some();
            if next.is_none() {
                final_key = entry.key.to_string();
                next = level.get(&final_key);
            }
            if let (Some(key), Some(n)) = (wildcard_key, next)
                && n.share_threshold
                && let Some(pattern) = &n.wildcard_pattern
            {
                let _ = key;
                share.insert(i, pattern.strip_prefix(&format!("{}_", entry.key)).unwrap_or(pattern).to_string());
            }
            enhanced.push('.');
            match next {
                Some(n) => {
                    let value: Option<String> = if let Some(key) = wildcard_key {
                        if let Some(p) = share.get(&i) {
                            Some(p.clone())
                        } else if n.value_to_metric {
                            Some(entry.value.to_string())
                        } else {
                            Some(key.strip_prefix(&format!("{}_", entry.key)).unwrap_or(key).to_string())
                        }
                    } else if by_value || n.value_to_metric {
                        Some(entry.value.to_string())
                    } else {
                        None
                    };
                    enhanced.push_str(entry.key);
                    if let Some(v) = value.filter(|v| !v.is_empty()) {
                        enhanced.push('_');
                        enhanced.push_str(&v);
                    }
                }
                None => enhanced.push_str(entry.key),
            }
            if let Some(n) = next
                && let Some(l) = &n.limit
                && i == entries.len() - 1
            {
                limit = Some(l.clone());
            }
            match next {
                Some(n) if !n.children.is_empty() => {
                    level = &n.children;
                    prev = n;
                }
                _ => break,
            }
        }
        let limit = limit?;
        let share_vec =
            (!share.is_empty()).then(|| (0..entries.len()).map(|i| share.get(&i).cloned()).collect::<Vec<_>>());
        let limit = if limit.detailed_metric {
            let key = match &share_vec {
                Some(patterns) => {
                    let mut k = String::from(domain);
                    for (i, e) in entries.iter().enumerate() {
                        k.push('.');
                        k.push_str(e.key);
                        match patterns.get(i).and_then(Option::as_ref) {
                            Some(p) => {
                                k.push('_');
                                k.push_str(p);
                            }
                            None if !e.value.is_empty() => {
                                k.push('_');
                                k.push_str(e.value);
                            }
                            None => {}
                        }
                    }
                    k
                }
                None => detailed,
            };
            let stats_of = stats.limit(&key);
            Arc::new(limit.restated(key, stats_of))
        } else if enhanced != limit.full_key {
            let stats_of = stats.limit(&enhanced);
            Arc::new(limit.restated(enhanced, stats_of))
        } else {
            limit
        };
        Some(Matched { limit, share: share_vec })
    }
}

/// The stats key of an Envoy override: `domain.key_value.key2_value2`.
pub fn override_key(domain: &str, entries: &[Entry<'_>]) -> String {
    let mut k = String::new();
    for e in entries {
        if !k.is_empty() {
            k.push('.');
        }
        k.push_str(e.key);
        if !e.value.is_empty() {
            k.push('_');
            k.push_str(e.value);
        }
    }
    format!("{domain}.{k}")
}

/// The keys a document may use (upstream's, then ours inside `rate_limit`).
const VALID_KEYS: &[&str] = &[
    "domain",
    "key",
    "value",
    "descriptors",
    "rate_limit",
    "unit",
    "requests_per_unit",
    "unlimited",
    "shadow_mode",
    "quota_mode",
    "name",
    "replaces",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
];

/// Our keys: valid only in a `rate_limit` map (elsewhere a limit would silently run as a fixed
/// window, so they are errors there).
const RATE_LIMIT_KEYS: &[&str] = &["algorithm", "burst", "time_zone", "precision"];

/// A YAML scalar as text (for error messages and string fields).
fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Null => Some(String::new()),
        Value::Tagged(t) => scalar_text(&t.value),
        _ => None,
    }
}

/// Upstream's key check: every key a string and a known key, every list a list of maps, every
/// leaf a string, an integer, a boolean or empty (`metadata` is not checked).
fn validate_keys(name: &str, map: &serde_norway::Mapping, in_rate_limit: bool) -> Result<(), ConfigError> {
    for (k, v) in map {
        let Value::String(key) = k else {
            return Err(error(
                name,
                format!(
                    "config error, key is not of type string: {}",
                    scalar_text(k).unwrap_or_else(|| format!("{k:?}"))
                ),
            ));
        };
        if RATE_LIMIT_KEYS.contains(&key.as_str()) {
            if !in_rate_limit {
                return Err(error(
                    name,
                    format!(
                        "config error, '{key}' is valid only inside rate_limit (where it says how the limit counts)"
                    ),
                ));
            }
        } else if !VALID_KEYS.contains(&key.as_str()) {
            return Err(error(name, format!("config error, unknown key '{key}'")));
        }
        if key == "metadata" {
            continue;
        }
        match v {
            Value::Sequence(items) => {
                for item in items {
                    let Value::Mapping(m) = item else {
                        return Err(error(
                            name,
                            format!(
                                "config error, yaml file contains list of type other than map: {}",
                                scalar_text(item).unwrap_or_else(|| format!("{item:?}"))
                            ),
                        ));
                    };
                    validate_keys(name, m, false)?;
                }
            }
            Value::Mapping(m) => validate_keys(name, m, key == "rate_limit")?,
            Value::String(_) | Value::Bool(_) | Value::Null => {}
            Value::Number(n) if n.is_i64() || n.is_u64() => {}
            _ => return Err(error(name, "error checking config")),
        }
    }
    Ok(())
}

fn get<'v>(map: &'v serde_norway::Mapping, key: &str) -> Option<&'v Value> {
    map.get(key).filter(|v| !v.is_null())
}

fn string_field(name: &str, map: &serde_norway::Mapping, key: &str) -> Result<String, ConfigError> {
    match get(map, key) {
        None => Ok(String::new()),
        Some(v @ (Value::String(_) | Value::Number(_) | Value::Bool(_))) => Ok(scalar_text(v).unwrap_or_default()),
        Some(other) => Err(error(name, format!("error loading config file: {key} must be a string, got {other:?}"))),
    }
}

fn bool_field(name: &str, map: &serde_norway::Mapping, key: &str) -> Result<bool, ConfigError> {
    match get(map, key) {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(error(
            name,
            format!(
                "error loading config file: {key} must be true or false, got {}",
                scalar_text(other).unwrap_or_default()
            ),
        )),
    }
}

fn u32_field(name: &str, map: &serde_norway::Mapping, key: &str) -> Result<Option<u32>, ConfigError> {
    match get(map, key) {
        None => Ok(None),
        Some(Value::Number(n)) if n.as_u64().is_some_and(|v| v <= u64::from(u32::MAX)) => {
            Ok(n.as_u64().and_then(|v| u32::try_from(v).ok()))
        }
        Some(other) => Err(error(
            name,
            format!(
                "error loading config file: {key} must be an integer from 0 to 4294967295, got {}",
                scalar_text(other).unwrap_or_default()
            ),
        )),
    }
}

/// A YAML value as JSON (for `metadata`; keys become strings).
fn to_json(v: &Value) -> serde_json::Value {
    match v {
        Value::Null => serde_json::Value::Null,
        Value::Bool(b) => serde_json::Value::Bool(*b),
        Value::Number(n) => {
            n.as_f64().and_then(serde_json::Number::from_f64).map_or(serde_json::Value::Null, serde_json::Value::Number)
        }
        Value::String(s) => serde_json::Value::String(s.clone()),
        Value::Sequence(items) => serde_json::Value::Array(items.iter().map(to_json).collect()),
        Value::Mapping(m) => {
            serde_json::Value::Object(m.iter().map(|(k, v)| (scalar_text(k).unwrap_or_default(), to_json(v))).collect())
        }
        Value::Tagged(t) => to_json(&t.value),
    }
}

/// A duration such as `1s`, `250ms`, `1m`, `1h` (for `precision`).
fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (n, unit) = text.split_at(split);
    let n: u64 = n.parse().ok()?;
    Some(match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n.checked_mul(60)?),
        "h" => Duration::from_secs(n.checked_mul(3600)?),
        _ => return None,
    })
}

/// A YAML syntax error in upstream's shape (go-yaml's `yaml: line N: what`), the parser's own
/// words after it (its trailing position dropped: the line leads).
fn yaml_error(e: &serde_norway::Error) -> String {
    let text = e.to_string();
    match e.location() {
        Some(at) => {
            let what = text.split(" at line ").next().unwrap_or(&text);
            format!("yaml: line {}: {what}", at.line())
        }
        None => format!("yaml: {text}"),
    }
}

/// One document, parsed and its keys checked: upstream's `ConfigFileContentToYaml`.
pub fn parse_document(name: &str, content: &str) -> Result<Value, ConfigError> {
    let root: Value = serde_norway::from_str(content)
        .map_err(|e| error(name, format!("error loading config file: {}", yaml_error(&e))))?;
    match &root {
        Value::Mapping(m) => validate_keys(name, m, false)?,
        Value::Null => {}
        other => {
            return Err(error(
                name,
                format!(
                    "error loading config file: the document must be a map, got {}",
                    scalar_text(other).unwrap_or_else(|| format!("{other:?}"))
                ),
            ));
        }
    }
    Ok(root)
}

struct Loader<'s> {
    stats: &'s Stats,
}

impl Loader<'_> {
    fn descriptors(
        &self,
        name: &str,
        parent: &mut Descriptor,
        parent_key: &str,
        list: Option<&Value>,
    ) -> Result<(), ConfigError> {
        let items = match list {
            None | Some(Value::Null) => return Ok(()),
            Some(Value::Sequence(items)) => items,
            Some(other) => {
                return Err(error(
                    name,
                    format!(
                        "error loading config file: descriptors must be a list, got {}",
                        scalar_text(other).unwrap_or_default()
                    ),
                ));
            }
        };
        for item in items {
            let Value::Mapping(d) = item else { continue };
            let key = string_field(name, d, "key")?;
            if key.is_empty() {
                return Err(error(name, "descriptor has empty key"));
            }
            let value = string_field(name, d, "value")?;
            let final_key = if value.is_empty() { key.clone() } else { format!("{key}_{value}") };
            let new_parent_key = format!("{parent_key}{final_key}");
            if parent.children.contains_key(&final_key) {
                return Err(error(name, format!("duplicate descriptor composite key '{new_parent_key}'")));
            }
            let shadow_mode = bool_field(name, d, "shadow_mode")?;
            let quota_mode = bool_field(name, d, "quota_mode")?;
            let detailed_metric = bool_field(name, d, "detailed_metric")?;
            let value_to_metric = bool_field(name, d, "value_to_metric")?;
            let share_threshold = bool_field(name, d, "share_threshold")?;
            let metadata = match get(d, "metadata") {
                None => None,
                Some(Value::Mapping(m)) if m.is_empty() => None,
                Some(v @ Value::Mapping(_)) => match to_json(v) {
                    serde_json::Value::Object(o) => Some(o),
                    _ => None,
                },
                Some(other) => {
                    return Err(error(
                        name,
                        format!(
                            "error parsing metadata: metadata must be a map, got {}",
                            scalar_text(other).unwrap_or_default()
                        ),
                    ));
                }
            };
            let limit = match get(d, "rate_limit") {
                None => None,
                Some(Value::Mapping(r)) => Some(Arc::new(self.rate_limit(
                    name,
                    r,
                    &new_parent_key,
                    shadow_mode,
                    quota_mode,
                    detailed_metric,
                    metadata.clone(),
                )?)),
                Some(other) => {
                    return Err(error(
                        name,
                        format!(
                            "error loading config file: rate_limit must be a map, got {}",
                            scalar_text(other).unwrap_or_default()
                        ),
                    ));
                }
            };
            if share_threshold && !final_key.contains('*') {
                return Err(error(
                    name,
                    format!(
                        "share_threshold can only be used with wildcard values (containing '*'), but found key '{final_key}'"
                    ),
                ));
            }
            if final_key.contains('*') {
                parent.wildcards.push((final_key.clone(), final_key.split('*').map(str::to_string).collect()));
            }
            let mut child = Descriptor {
                limit,
                value_to_metric,
                share_threshold,
                wildcard_pattern: (share_threshold && final_key.contains('*')).then(|| final_key.clone()),
                ..Descriptor::default()
            };
            self.descriptors(name, &mut child, &format!("{new_parent_key}."), get(d, "descriptors"))?;
            parent.children.insert(final_key, child);
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn rate_limit(
        &self,
        name: &str,
        r: &serde_norway::Mapping,
        full_key: &str,
        shadow_mode: bool,
        quota_mode: bool,
        detailed_metric: bool,
        metadata: Option<serde_json::Map<String, serde_json::Value>>,
    ) -> Result<Limit, ConfigError> {
        let unlimited = bool_field(name, r, "unlimited")?;
        let unit_text = string_field(name, r, "unit")?;
        let unit = Unit::parse(&unit_text);
        if unlimited {
            if unit.is_some() {
                return Err(error(name, "should not specify rate limit unit when unlimited"));
            }
        } else if unit.is_none() {
            return Err(error(name, format!("invalid rate limit unit '{unit_text}'")));
        }
        let rpu = u32_field(name, r, "requests_per_unit")?.unwrap_or(0);
        let limit_name = string_field(name, r, "name")?;
        let mut replaces = Vec::new();
        match get(r, "replaces") {
            None => {}
            Some(Value::Sequence(items)) => {
                for item in items {
                    let Value::Mapping(m) = item else { continue };
                    replaces.push(string_field(name, m, "name")?);
                }
            }
            Some(other) => {
                return Err(error(
                    name,
                    format!(
                        "error loading config file: replaces must be a list, got {}",
                        scalar_text(other).unwrap_or_default()
                    ),
                ));
            }
        }
        for replaced in &replaces {
            if replaced.is_empty() {
                return Err(error(name, "should not have an empty replaces entry"));
            }
            if *replaced == limit_name {
                return Err(error(name, "replaces should not contain name of same descriptor"));
            }
        }
        let algorithm_text = string_field(name, r, "algorithm")?;
        let algorithm = if algorithm_text.is_empty() {
            Algorithm::FixedWindow
        } else {
            Algorithm::parse(&algorithm_text).ok_or_else(|| error(name, format!("invalid algorithm '{algorithm_text}' for '{full_key}': expected fixed_window, sliding_window, gcra, token_bucket or calendar")))?
        };
        let burst = u32_field(name, r, "burst")?;
        let zone = string_field(name, r, "time_zone")?;
        let precision_text = string_field(name, r, "precision")?;
        let precision = if precision_text.is_empty() {
            None
        } else {
            Some(parse_duration(&precision_text).ok_or_else(|| error(name, format!("invalid precision '{precision_text}' for '{full_key}': expected a duration such as 250ms, 1s, 1m or 1h")))?)
        };
        let misplaced = |word: &str, owner: &str| {
            error(
                name,
                format!(
                    "'{word}' applies to algorithm {owner} only, but '{full_key}' counts with {}",
                    algorithm.name()
                ),
            )
        };
        if burst.is_some() && !matches!(algorithm, Algorithm::Gcra | Algorithm::TokenBucket) {
            return Err(misplaced("burst", "gcra or token_bucket"));
        }
        if !zone.is_empty() && algorithm != Algorithm::Calendar {
            return Err(misplaced("time_zone", "calendar"));
        }
        if precision.is_some() && algorithm != Algorithm::SlidingWindow {
            return Err(misplaced("precision", "sliding_window"));
        }
        if unlimited && algorithm != Algorithm::FixedWindow {
            return Err(error(name, format!("'{full_key}' is unlimited: it takes no algorithm")));
        }
        let policy = match unit {
            Some(unit) if !unlimited => {
                policy_for(algorithm, rpu, unit, burst, (!zone.is_empty()).then_some(zone.as_str()), precision)
                    .map_err(|e| error(name, format!("invalid rate limit for '{full_key}': {e}")))?
            }
            _ => None,
        };
        Ok(Limit {
            full_key: full_key.to_string(),
            stats: self.stats.limit(full_key),
            requests_per_unit: rpu,
            unit,
            name: limit_name,
            unlimited,
            shadow_mode,
            quota_mode,
            detailed_metric,
            replaces,
            algorithm,
            policy,
            metadata,
        })
    }
}

/// Builds a configuration from named YAML documents, in order: upstream's
/// `NewRateLimitConfigImpl` (each document parsed, then checked by [`build`]).
pub fn load(documents: &[(String, String)], stats: &Stats, merge: bool) -> Result<RateLimitConfig, ConfigError> {
    build(documents.iter().map(|(name, content)| Ok((name.clone(), parse_document(name, content)?))), stats, merge)
}

/// The one validator, whatever the documents' source (files, or xDS resources turned into the
/// same document shape): every check upstream's loader makes (empty or duplicate domain, empty or
/// duplicate key, unknown unit, `unlimited` with a unit, bad `replaces`) and ours (algorithms).
/// A domain in two documents is an error unless `merge` (`MERGE_DOMAIN_CONFIG`). The first
/// error, in document order, is the one reported.
pub fn build(
    documents: impl IntoIterator<Item = Result<(String, Value), ConfigError>>,
    stats: &Stats,
    merge: bool,
) -> Result<RateLimitConfig, ConfigError> {
    let loader = Loader { stats };
    let mut config = RateLimitConfig::default();
    for document in documents {
        let (name, root) = document?;
        let name = name.as_str();
        let empty = serde_norway::Mapping::new();
        let map = match &root {
            Value::Mapping(m) => m,
            _ => &empty,
        };
        let domain = string_field(name, map, "domain")?;
        if domain.is_empty() {
            return Err(error(name, "config file cannot have empty domain"));
        }
        if let Some(existing) = config.domains.get_mut(&domain) {
            if !merge {
                return Err(error(name, format!("duplicate domain '{domain}' in config file")));
            }
            loader.descriptors(name, existing, &format!("{domain}."), get(map, "descriptors"))?;
            continue;
        }
        let mut root_descriptor = Descriptor::default();
        loader.descriptors(name, &mut root_descriptor, &format!("{domain}."), get(map, "descriptors"))?;
        config.domains.insert(domain, root_descriptor);
    }
    Ok(config)
}

#[cfg(test)]
mod tests;
