//! The environment, read as envoyproxy/ratelimit reads it (same names, same defaults where they
//! mean something here), plus ours (`FAILURE_MODE`, `DECISION_DEADLINE`, …). A variable we
//! cannot honour, or a value we do not support, stops the start with its name: never ignored.

use std::collections::HashMap;
use std::time::Duration;

/// What the service answers when Redis cannot (down, paused, slower than the deadline).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureMode {
    /// A gRPC `UNAVAILABLE` error at once: Envoy's own `failure_mode_deny` decides, as it does
    /// with upstream (which answers `UNKNOWN`, after up to `REDIS_TIMEOUT`).
    Error,
    /// `OK` for every descriptor.
    Open,
    /// `OVER_LIMIT` for every limited descriptor.
    Closed,
    /// Each instance decides alone, on its share of every limit (`FAILURE_LOCAL_SHARE`).
    Local,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisType {
    Single,
    Cluster,
    /// `REDIS_URL` is `<master name>,<sentinel host:port>,…`: the master the sentinels name,
    /// followed through failovers.
    Sentinel,
}

/// The service's settings: the listeners, the stats sinks, where the configuration comes
/// from, the Redis it decides on, and (flat, as [`crate::service::Options`] reads them) what a
/// decision does.
#[derive(Debug, Clone)]
pub struct Settings {
    /// What some variables mean here (accepted, satisfied or ignored as upstream ignores them),
    /// logged at start.
    pub notices: Vec<String>,
    pub log_level: String,
    pub log_json: bool,
    pub listeners: ListenerSettings,
    pub stats: StatsSettings,
    pub config: ConfigSettings,
    pub redis: RedisSettings,
    pub near_limit_ratio: f32,
    pub cache_key_prefix: String,
    pub stop_cache_key_increment_when_overlimit: bool,
    pub response_headers_enabled: bool,
    pub header_limit: String,
    pub header_remaining: String,
    pub header_reset: String,
    pub global_shadow_mode: bool,
    pub global_quota_mode: bool,
    pub response_dynamic_metadata: bool,
    pub failure_mode: FailureMode,
    pub failure_local_share: u32,
    /// `DECISION_DEADLINE`: unset by default, so a decision waits for Redis as upstream's does
    /// (up to `REDIS_TIMEOUT`, and the caller's gRPC deadline); set, `FAILURE_MODE` answers
    /// when it passes.
    pub decision_deadline: Option<Duration>,
    /// `LOCAL_CACHE_SIZE_IN_BYTES`: the service's cache of keys over their limit, raised (when
    /// set) to upstream's minimum (freecache's 512 KiB).
    pub local_cache_size_in_bytes: usize,
    /// `EXPIRATION_JITTER_MAX_SECONDS`: a fixed window's key lives up to this much longer than
    /// its window (spread by key), so that a window's keys do not all expire at once.
    pub expiration_jitter_max_seconds: u64,
}

/// The gRPC, HTTP and debug listeners, and what the health check asks for.
#[derive(Debug, Clone)]
pub struct ListenerSettings {
    pub host: String,
    pub port: u16,
    pub debug_host: String,
    pub debug_port: u16,
    pub grpc_host: String,
    pub grpc_port: u16,
    pub grpc_uds: String,
    pub grpc_max_connection_age: Option<Duration>,
    pub grpc_max_connection_age_grace: Duration,
    pub grpc_server_use_tls: bool,
    pub grpc_server_tls_cert: String,
    pub grpc_server_tls_key: String,
    pub grpc_client_tls_cacert: String,
    pub healthy_with_at_least_one_config_loaded: bool,
}

/// The stats sinks: statsd or Prometheus (its own listener).
#[derive(Debug, Clone)]
pub struct StatsSettings {
    pub use_statsd: bool,
    pub statsd_host: String,
    pub statsd_port: u16,
    pub stats_flush_interval: Duration,
    pub disable_stats: bool,
    pub use_prometheus: bool,
    pub prometheus_addr: String,
    pub prometheus_path: String,
    /// `PROMETHEUS_MAPPER_YAML`: a statsd_exporter mapping file replacing upstream's default
    /// mapping (empty: the default).
    pub prometheus_mapper_yaml: String,
    pub prometheus_response_time_as_ms: bool,
}

/// Where the rate limit configuration comes from (upstream's `RUNTIME_*` folder) and how its
/// documents combine.
#[derive(Debug, Clone)]
pub struct ConfigSettings {
    /// `CONFIG_TYPE=GRPC_XDS_SOTW`: the xDS client's settings; `None`: files (`FILE`).
    pub xds: Option<XdsSettings>,
    pub force_start_without_initial_config: bool,
    pub runtime_root: String,
    pub runtime_subdirectory: String,
    pub runtime_appdirectory: String,
    pub runtime_ignore_dot_files: bool,
    pub runtime_watch_root: bool,
    pub merge_domain_config: bool,
}

/// Upstream's xDS client: an ADS State-of-the-World stream for `RateLimitConfig` resources,
/// with upstream's names and defaults.
#[derive(Debug, Clone)]
pub struct XdsSettings {
    /// `CONFIG_GRPC_XDS_NODE_ID` (`default`).
    pub node_id: String,
    /// `CONFIG_GRPC_XDS_NODE_METADATA`: `k=v,k2=v2` (an entry without `=` is skipped, as upstream
    /// skips it).
    pub node_metadata: Vec<(String, String)>,
    /// `CONFIG_GRPC_XDS_SERVER_URL` (`localhost:18000`): `host:port`.
    pub server_url: String,
    /// `CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL` (3s): between two attempts to connect.
    pub connect_retry_interval: Duration,
    /// `CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS`: `k:v,k2:v2` (envconfig's map), sent as gRPC
    /// metadata on the stream.
    pub additional_headers: Vec<(String, String)>,
    pub use_tls: bool,
    pub client_tls_cert: String,
    pub client_tls_key: String,
    pub server_tls_cacert: String,
    /// `CONFIG_GRPC_XDS_SERVER_TLS_SAN`: the name the server's certificate must carry (else the
    /// URL's host).
    pub server_tls_san: String,
    /// `XDS_CLIENT_BACKOFF_*`: the wait before reconnecting after the stream broke
    /// (`jpillora/backoff` as upstream configures it: 10s, 60s, factor 0.5, jitter).
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    pub backoff_factor: f64,
    pub backoff_jitter: bool,
    /// `XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES`: the largest response accepted (0: gRPC's 4 MiB).
    pub max_msg_size: usize,
}

/// The Redis (single, cluster or sentinel-followed) the decisions run on.
#[derive(Debug, Clone)]
pub struct RedisSettings {
    pub socket_type: String,
    pub kind: RedisType,
    pub url: String,
    pub auth: String,
    /// `REDIS_SENTINEL_AUTH`: the sentinels' password (`user:password` too).
    pub sentinel_auth: String,
    pub tls: bool,
    pub tls_client_cert: String,
    pub tls_client_key: String,
    pub tls_cacert: String,
    pub tls_skip_hostname_verification: bool,
    pub health_check_active_connection: bool,
    pub timeout: Duration,
    /// `REDIS_POOL_SIZE`: connections to each Redis node (1 when unset: every decision
    /// multiplexed on one, the cheapest for Redis).
    pub pool_size: usize,
    /// `REDIS_STARTUP_MAX_ELAPSED_TIME`: how long Redis may stay unreachable at start before the
    /// process exits (0: for ever).
    pub startup_max_elapsed_time: Duration,
}

/// A start refused: the variable and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingsError(pub String);

impl std::fmt::Display for SettingsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SettingsError {}

/// Upstream's variables that configure what this service does not have, and the value each
/// may keep (its default; `None`: any value is refused once set). Setting one to anything else
/// stops the start.
const REFUSED: &[(&str, Option<&str>, &str)] = &[
    (
        "BACKEND_TYPE",
        Some("redis"),
        "only Redis (with the redis-throttle module or its Functions twin) is a backend here",
    ),
    (
        "REDIS_PERSECOND",
        Some("false"),
        "one Redis (or one cluster) holds every limit here; a second Redis for per-second limits is not supported",
    ),
    ("USE_DOG_STATSD", Some("false"), "DogStatsD is not supported: use USE_STATSD or USE_PROMETHEUS"),
    ("USE_DOG_STATSD_MOGRIFIERS", None, "DogStatsD is not supported"),
    ("EXTRA_TAGS", None, "stat tags are not supported"),
    (
        "GRPC_CLIENT_TLS_SAN",
        None,
        "the client certificate's SAN is not checked here: GRPC_CLIENT_TLS_CACERT alone restricts clients",
    ),
    ("MEMCACHE_HOST_PORT", None, "Memcache is not a backend here"),
    ("MEMCACHE_SRV", None, "Memcache is not a backend here"),
];

/// The variables of upstream's xDS client (`CONFIG_TYPE=GRPC_XDS_SOTW`).
const XDS_VARIABLES: &[&str] = &[
    "CONFIG_GRPC_XDS_NODE_ID",
    "CONFIG_GRPC_XDS_NODE_METADATA",
    "CONFIG_GRPC_XDS_SERVER_URL",
    "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
    "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
    "CONFIG_GRPC_XDS_SERVER_USE_TLS",
    "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
    "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
    "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
    "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
    "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
    "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
    "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
    "XDS_CLIENT_BACKOFF_JITTER",
    "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
];

/// Variables deployments set that upstream does not read (Envoy Gateway sets
/// `GRPC_SERVER_TLS_CA_CERT`): accepted, and logged as doing nothing, as upstream ignores them.
const IGNORED_AS_UPSTREAM: &[(&str, &str)] = &[(
    "GRPC_SERVER_TLS_CA_CERT",
    "upstream reads no such variable, so it does nothing here either: the gRPC listener asks for client certificates only with GRPC_CLIENT_TLS_CACERT",
)];

/// Upstream's tuning of its Go Redis client (radix) whose every value this service already
/// satisfies: each is checked and logged at start with what it means here.
const SATISFIED: &[(&str, &str)] = &[
    (
        "REDIS_PIPELINE_WINDOW",
        "the commands of concurrent requests are always pipelined here: they share the connection's writes as they come, never held back for a window",
    ),
    ("REDIS_PIPELINE_LIMIT", "deprecated and without effect, as in upstream since radix v4"),
    (
        "REDIS_POOL_ON_EMPTY_WAIT_DURATION",
        "no request waits for a free connection here (every connection is shared); REDIS_TIMEOUT (or DECISION_DEADLINE) bounds each decision",
    ),
    (
        "REDIS_CLUSTER_PIPELINE_PARALLELISM",
        "a request's hash slots are always decided in parallel here, one pipeline per slot",
    ),
    (
        "REDIS_STARTUP_INITIAL_INTERVAL",
        "until Redis first answers, a connection is tried every 200 ms here while FAILURE_MODE answers",
    ),
    (
        "REDIS_STARTUP_MAX_INTERVAL",
        "until Redis first answers, a connection is tried every 200 ms here while FAILURE_MODE answers",
    ),
];

struct Env<'a> {
    vars: &'a HashMap<String, String>,
}

impl Env<'_> {
    fn get(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }

    fn string(&self, name: &str, default: &str) -> String {
        self.get(name).unwrap_or(default).to_string()
    }

    fn bool(&self, name: &str, default: bool) -> Result<bool, SettingsError> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => parse_bool(v).ok_or_else(|| SettingsError(format!("{name}={v}: expected true or false"))),
        }
    }

    fn number<T: std::str::FromStr>(&self, name: &str, default: T) -> Result<T, SettingsError> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => v.trim().parse().map_err(|_| SettingsError(format!("{name}={v}: expected a number"))),
        }
    }

    fn duration(&self, name: &str, default: Duration) -> Result<Duration, SettingsError> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => parse_go_duration(v)
                .ok_or_else(|| SettingsError(format!("{name}={v}: expected a duration such as 20ms, 1s or 1m30s"))),
        }
    }
}

/// Go's `strconv.ParseBool`.
fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Go's `time.ParseDuration` for what configurations use: `1h2m3.5s`, `250ms`, `100us`, `0`.
pub fn parse_go_duration(v: &str) -> Option<Duration> {
    let v = v.trim();
    if v == "0" {
        return Some(Duration::ZERO);
    }
    let mut total = 0f64;
    let mut rest = v;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let n = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).filter(|&i| i > 0)?;
        let number: f64 = rest[..n].parse().ok()?;
        rest = &rest[n..];
        let u = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let scale = match &rest[..u] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += number * scale;
        rest = &rest[u..];
    }
    Duration::try_from_secs_f64(total).ok()
}

impl Settings {
    /// From this process's environment.
    pub fn from_env() -> Result<Settings, SettingsError> {
        Settings::from_vars(&std::env::vars().collect())
    }

    pub fn from_vars(vars: &HashMap<String, String>) -> Result<Settings, SettingsError> {
        let env = Env { vars };
        refuse_unsupported(&env)?;
        let notices = satisfied(&env)?;
        let (log_level, log_json) = logging(&env)?;
        let near_limit_ratio: f32 = env.number("NEAR_LIMIT_RATIO", 0.8)?;
        if !(0.0..=1.0).contains(&near_limit_ratio) {
            return Err(SettingsError(format!("NEAR_LIMIT_RATIO={near_limit_ratio}: expected a ratio from 0 to 1")));
        }
        let decision_deadline = match env.get("DECISION_DEADLINE") {
            None => None,
            Some(_) => Some(env.duration("DECISION_DEADLINE", Duration::ZERO)?),
        };
        if decision_deadline.is_some_and(|d| d.is_zero()) {
            return Err(SettingsError("DECISION_DEADLINE=0: a decision needs some time".into()));
        }
        let failure_mode = match env.string("FAILURE_MODE", "error").to_ascii_lowercase().as_str() {
            "error" => FailureMode::Error,
            "open" => FailureMode::Open,
            "closed" => FailureMode::Closed,
            "local" => FailureMode::Local,
            other => return Err(SettingsError(format!("FAILURE_MODE={other}: expected error, open, closed or local"))),
        };
        let failure_local_share = env.number("FAILURE_LOCAL_SHARE", 1)?;
        if failure_local_share == 0 {
            return Err(SettingsError(
                "FAILURE_LOCAL_SHARE=0: the number of instances sharing each limit is at least 1".into(),
            ));
        }
        Ok(Settings {
            notices,
            log_level,
            log_json,
            listeners: ListenerSettings::from_env(&env)?,
            stats: StatsSettings::from_env(&env)?,
            config: ConfigSettings::from_env(&env)?,
            redis: RedisSettings::from_env(&env)?,
            near_limit_ratio,
            cache_key_prefix: env.string("CACHE_KEY_PREFIX", ""),
            stop_cache_key_increment_when_overlimit: env.bool("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", false)?,
            response_headers_enabled: env.bool("LIMIT_RESPONSE_HEADERS_ENABLED", false)?,
            header_limit: env.string("LIMIT_LIMIT_HEADER", "RateLimit-Limit"),
            header_remaining: env.string("LIMIT_REMAINING_HEADER", "RateLimit-Remaining"),
            header_reset: env.string("LIMIT_RESET_HEADER", "RateLimit-Reset"),
            global_shadow_mode: env.bool("SHADOW_MODE", false)?,
            global_quota_mode: env.bool("QUOTA_MODE", false)?,
            response_dynamic_metadata: env.bool("RESPONSE_DYNAMIC_METADATA", false)?,
            failure_mode,
            failure_local_share,
            decision_deadline,
            local_cache_size_in_bytes: match env.number("LOCAL_CACHE_SIZE_IN_BYTES", 0usize)? {
                0 => 0,
                n => n.max(512 * 1024),
            },
            expiration_jitter_max_seconds: env.number("EXPIRATION_JITTER_MAX_SECONDS", 0)?,
        })
    }
}

/// Upstream's variables for what this service does not have: refused by name (see [`REFUSED`]).
fn refuse_unsupported(env: &Env<'_>) -> Result<(), SettingsError> {
    for (name, allowed, why) in REFUSED {
        if let Some(v) = env.get(name) {
            let fine = match allowed {
                Some(a) if *a == "false" || *a == "true" => parse_bool(v) == parse_bool(a),
                Some(a) => v.eq_ignore_ascii_case(a),
                None => v.is_empty(),
            };
            if !fine {
                return Err(SettingsError(format!("{name}={v} is not supported: {why}")));
            }
        }
    }
    for (name, value) in env.vars {
        let refused_family = ["MEMCACHE_", "DOG_STATSD_"].iter().any(|p| name.starts_with(p));
        // The xDS client's family: every name upstream reads is known; another is a typo.
        let xds_family = ["CONFIG_GRPC_XDS_", "XDS_CLIENT_"].iter().any(|p| name.starts_with(p));
        if xds_family && !XDS_VARIABLES.contains(&name.as_str()) {
            return Err(SettingsError(format!(
                "{name}={value} is not supported: upstream's xDS client reads no such variable (it reads {})",
                XDS_VARIABLES.join(", ")
            )));
        }
        if refused_family && !REFUSED.iter().any(|(n, ..)| n == name) && !value.is_empty() {
            return Err(SettingsError(format!(
                "{name}={value} is not supported: it configures a feature this service does not have (memcache or DogStatsD)"
            )));
        }
    }
    Ok(())
}

/// Upstream's Redis client tuning this service already satisfies (see [`SATISFIED`]) and the
/// variables upstream ignores ([`IGNORED_AS_UPSTREAM`]): checked, and each said with what it
/// means here (logged at start, once logging is set up).
fn satisfied(env: &Env<'_>) -> Result<Vec<String>, SettingsError> {
    let mut notices = Vec::new();
    for (name, meaning) in IGNORED_AS_UPSTREAM {
        if let Some(v) = env.get(name) {
            notices.push(format!("{name}={v}: {meaning}"));
        }
    }
    // Tracing is observability, not a decision: a deployment that turns it on (Envoy Gateway
    // does when its telemetry asks for traces) starts and limits as configured, and is told
    // once that no span is exported, rather than crash-looping for want of traces.
    for (name, value) in env.vars {
        if ["TRACING_", "OTEL_"].iter().any(|p| name.starts_with(p)) && !value.is_empty() {
            notices
                .push(format!("{name}={value}: tracing is not exported by this service; rate limiting is unaffected"));
        }
    }
    for (name, meaning) in SATISFIED {
        if let Some(v) = env.get(name) {
            match *name {
                "REDIS_PIPELINE_WINDOW"
                | "REDIS_POOL_ON_EMPTY_WAIT_DURATION"
                | "REDIS_STARTUP_INITIAL_INTERVAL"
                | "REDIS_STARTUP_MAX_INTERVAL" => {
                    env.duration(name, Duration::ZERO)?;
                }
                _ => {
                    env.number::<u32>(name, 0)?;
                }
            }
            notices.push(format!("{name}={v}: {meaning}"));
        }
    }
    Ok(notices)
}

/// `LOG_LEVEL` and whether `LOG_FORMAT` is json.
fn logging(env: &Env<'_>) -> Result<(String, bool), SettingsError> {
    let log_format = env.string("LOG_FORMAT", "text");
    if !matches!(log_format.to_ascii_lowercase().as_str(), "text" | "json") {
        return Err(SettingsError(format!("LOG_FORMAT={log_format}: expected text or json")));
    }
    let log_level = env.string("LOG_LEVEL", "WARN");
    if !matches!(
        log_level.to_ascii_lowercase().as_str(),
        "trace" | "debug" | "info" | "warn" | "warning" | "error" | "fatal" | "panic"
    ) {
        return Err(SettingsError(format!(
            "LOG_LEVEL={log_level}: expected trace, debug, info, warn, error, fatal or panic"
        )));
    }
    Ok((log_level, log_format.eq_ignore_ascii_case("json")))
}

impl ListenerSettings {
    fn from_env(env: &Env<'_>) -> Result<ListenerSettings, SettingsError> {
        let max_age = env.duration("GRPC_MAX_CONNECTION_AGE", Duration::from_secs(24 * 3600))?;
        let l = ListenerSettings {
            host: env.string("HOST", "0.0.0.0"),
            port: env.number("PORT", 8080)?,
            debug_host: env.string("DEBUG_HOST", "0.0.0.0"),
            debug_port: env.number("DEBUG_PORT", 6070)?,
            grpc_host: env.string("GRPC_HOST", "0.0.0.0"),
            grpc_port: env.number("GRPC_PORT", 8081)?,
            grpc_uds: env.string("GRPC_UDS", ""),
            grpc_max_connection_age: (!max_age.is_zero()).then_some(max_age),
            grpc_max_connection_age_grace: env.duration("GRPC_MAX_CONNECTION_AGE_GRACE", Duration::from_secs(3600))?,
            grpc_server_use_tls: env.bool("GRPC_SERVER_USE_TLS", false)?,
            grpc_server_tls_cert: env.string("GRPC_SERVER_TLS_CERT", ""),
            grpc_server_tls_key: env.string("GRPC_SERVER_TLS_KEY", ""),
            grpc_client_tls_cacert: env.string("GRPC_CLIENT_TLS_CACERT", ""),
            healthy_with_at_least_one_config_loaded: env.bool("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false)?,
        };
        if l.grpc_server_use_tls && (l.grpc_server_tls_cert.is_empty() || l.grpc_server_tls_key.is_empty()) {
            return Err(SettingsError(
                "GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY".into(),
            ));
        }
        if !l.grpc_client_tls_cacert.is_empty() && !l.grpc_server_use_tls {
            return Err(SettingsError("GRPC_CLIENT_TLS_CACERT is set but GRPC_SERVER_USE_TLS is not true: mTLS needs TLS on the gRPC listener".into()));
        }
        Ok(l)
    }
}

impl StatsSettings {
    fn from_env(env: &Env<'_>) -> Result<StatsSettings, SettingsError> {
        let s = StatsSettings {
            use_statsd: env.bool("USE_STATSD", true)?,
            statsd_host: env.string("STATSD_HOST", "localhost"),
            statsd_port: env.number("STATSD_PORT", 8125)?,
            stats_flush_interval: env.duration("STATS_FLUSH_INTERVAL", Duration::from_secs(10))?,
            disable_stats: env.bool("DISABLE_STATS", false)?,
            use_prometheus: env.bool("USE_PROMETHEUS", false)?,
            prometheus_addr: env.string("PROMETHEUS_ADDR", ":9090"),
            prometheus_path: env.string("PROMETHEUS_PATH", "/metrics"),
            prometheus_mapper_yaml: env.string("PROMETHEUS_MAPPER_YAML", ""),
            prometheus_response_time_as_ms: env.bool("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", false)?,
        };
        if s.use_statsd && s.use_prometheus && !s.disable_stats {
            return Err(SettingsError("USE_STATSD=true and USE_PROMETHEUS=true: unable to use more than one stats sink at the same time; set USE_STATSD=false to use Prometheus".into()));
        }
        Ok(s)
    }
}

impl ConfigSettings {
    fn from_env(env: &Env<'_>) -> Result<ConfigSettings, SettingsError> {
        // Upstream reads the xDS variables whatever CONFIG_TYPE says: so are they checked here.
        let xds = XdsSettings::from_env(env)?;
        let xds = match env.string("CONFIG_TYPE", "FILE").to_ascii_uppercase().as_str() {
            "FILE" => None,
            "GRPC_XDS_SOTW" => Some(xds),
            other => {
                return Err(SettingsError(format!(
                    "CONFIG_TYPE={other} is not supported: FILE (RUNTIME_ROOT…) or GRPC_XDS_SOTW (CONFIG_GRPC_XDS_…)"
                )));
            }
        };
        Ok(ConfigSettings {
            xds,
            force_start_without_initial_config: env.bool("FORCE_START_WITHOUT_INITIAL_CONFIG", false)?,
            runtime_root: env.string("RUNTIME_ROOT", "/srv/runtime_data/current"),
            runtime_subdirectory: env.string("RUNTIME_SUBDIRECTORY", ""),
            runtime_appdirectory: env.string("RUNTIME_APPDIRECTORY", "config"),
            runtime_ignore_dot_files: env.bool("RUNTIME_IGNOREDOTFILES", false)?,
            runtime_watch_root: env.bool("RUNTIME_WATCH_ROOT", true)?,
            merge_domain_config: env.bool("MERGE_DOMAIN_CONFIG", false)?,
        })
    }
}

impl XdsSettings {
    fn from_env(env: &Env<'_>) -> Result<XdsSettings, SettingsError> {
        let pairs = |name: &str, separator: char| -> Vec<(String, String)> {
            env.string(name, "")
                .split(',')
                .filter_map(|entry| {
                    let (k, v) = entry.split_once(separator)?;
                    Some((k.trim().to_string(), v.trim().to_string()))
                })
                .collect()
        };
        let headers = pairs("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", ':');
        for (k, v) in &headers {
            let valid_key = !k.is_empty()
                && k.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
                && !k.ends_with("-bin");
            if !valid_key || !v.bytes().all(|b| (0x20..0x7f).contains(&b)) {
                return Err(SettingsError(format!(
                    "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: '{k}:{v}' is not a gRPC metadata header (name:value, printable ASCII)"
                )));
            }
        }
        let factor: f64 = env.number("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", 0.5)?;
        if !factor.is_finite() || factor < 0.0 {
            return Err(SettingsError(format!(
                "XDS_CLIENT_BACKOFF_RANDOM_FACTOR={factor}: expected a number of 0 or more"
            )));
        }
        let x = XdsSettings {
            node_id: env.string("CONFIG_GRPC_XDS_NODE_ID", "default"),
            node_metadata: pairs("CONFIG_GRPC_XDS_NODE_METADATA", '='),
            server_url: env.string("CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000"),
            connect_retry_interval: env
                .duration("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", Duration::from_secs(3))?,
            additional_headers: headers,
            use_tls: env.bool("CONFIG_GRPC_XDS_SERVER_USE_TLS", false)?,
            client_tls_cert: env.string("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", ""),
            client_tls_key: env.string("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", ""),
            server_tls_cacert: env.string("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", ""),
            server_tls_san: env.string("CONFIG_GRPC_XDS_SERVER_TLS_SAN", ""),
            backoff_initial: env.duration("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", Duration::from_secs(10))?,
            backoff_max: env.duration("XDS_CLIENT_BACKOFF_MAX_INTERVAL", Duration::from_secs(60))?,
            backoff_factor: factor,
            backoff_jitter: env.bool("XDS_CLIENT_BACKOFF_JITTER", true)?,
            max_msg_size: env.number("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", 0)?,
        };
        if x.client_tls_cert.is_empty() != x.client_tls_key.is_empty() {
            return Err(SettingsError(
                "CONFIG_GRPC_XDS_CLIENT_TLS_CERT and CONFIG_GRPC_XDS_CLIENT_TLS_KEY go together: set both or neither"
                    .into(),
            ));
        }
        if x.server_url.trim().is_empty() {
            return Err(SettingsError("CONFIG_GRPC_XDS_SERVER_URL is empty: expected host:port".into()));
        }
        Ok(x)
    }
}

impl RedisSettings {
    fn from_env(env: &Env<'_>) -> Result<RedisSettings, SettingsError> {
        // radix v4 (upstream since 2026) refuses what it cannot do: so does this service.
        let on_empty = env.string("REDIS_POOL_ON_EMPTY_BEHAVIOR", "WAIT").to_ascii_uppercase();
        if on_empty != "WAIT" {
            return Err(SettingsError(format!(
                "REDIS_POOL_ON_EMPTY_BEHAVIOR={on_empty} is not supported: requests share the connections here, none waits for a free one (WAIT, the default, is the only value; REDIS_POOL_SIZE sets the connections)"
            )));
        }
        let pool_size: usize = env.number("REDIS_POOL_SIZE", 1)?;
        if pool_size == 0 {
            return Err(SettingsError("REDIS_POOL_SIZE=0: at least one connection to each Redis node".into()));
        }
        let kind = match env.string("REDIS_TYPE", "SINGLE").to_ascii_uppercase().as_str() {
            "SINGLE" => RedisType::Single,
            "CLUSTER" => RedisType::Cluster,
            "SENTINEL" => RedisType::Sentinel,
            other => {
                return Err(SettingsError(format!("REDIS_TYPE={other} is not supported: SINGLE, CLUSTER or SENTINEL")));
            }
        };
        let socket_type = env.string("REDIS_SOCKET_TYPE", if kind == RedisType::Single { "unix" } else { "tcp" });
        if !matches!(socket_type.as_str(), "unix" | "tcp") {
            return Err(SettingsError(format!("REDIS_SOCKET_TYPE={socket_type}: expected unix or tcp")));
        }
        // A cluster's nodes and the sentinels are reached over TCP (upstream's radix dials tcp
        // for them whatever REDIS_SOCKET_TYPE says): its default, unix, stands aside; set to
        // unix, it is refused.
        if kind != RedisType::Single && socket_type == "unix" {
            let name = if kind == RedisType::Cluster { "CLUSTER" } else { "SENTINEL" };
            return Err(SettingsError(format!("REDIS_SOCKET_TYPE=unix: REDIS_TYPE={name} reaches its nodes over tcp")));
        }
        if kind == RedisType::Sentinel
            && env.string("REDIS_URL", "").split(',').filter(|p| !p.trim().is_empty()).count() < 2
        {
            return Err(SettingsError(
                "REDIS_URL: expected the master name and a list of urls for the sentinels, in the format: <redis master name>,<sentinel1>,...,<sentineln>".into(),
            ));
        }
        Ok(RedisSettings {
            socket_type,
            kind,
            url: env.string("REDIS_URL", "/var/run/nutcracker/ratelimit.sock"),
            auth: env.string("REDIS_AUTH", ""),
            sentinel_auth: env.string("REDIS_SENTINEL_AUTH", ""),
            tls: env.bool("REDIS_TLS", false)?,
            tls_client_cert: env.string("REDIS_TLS_CLIENT_CERT", ""),
            tls_client_key: env.string("REDIS_TLS_CLIENT_KEY", ""),
            tls_cacert: env.string("REDIS_TLS_CACERT", ""),
            tls_skip_hostname_verification: env.bool("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false)?,
            health_check_active_connection: env.bool("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", false)?,
            timeout: env.duration("REDIS_TIMEOUT", Duration::from_secs(10))?,
            pool_size,
            startup_max_elapsed_time: env.duration("REDIS_STARTUP_MAX_ELAPSED_TIME", Duration::ZERO)?,
        })
    }

    /// The Redis URLs to connect to (one, or a cluster's seed nodes).
    pub fn urls(&self) -> Vec<String> {
        let (user, pass) = match self.auth.split_once(':') {
            Some((u, p)) => (u.to_string(), p.to_string()),
            None => (String::new(), self.auth.clone()),
        };
        let scheme = if self.tls { "rediss" } else { "redis" };
        self.url
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(|u| {
                if u.starts_with("redis://")
                    || u.starts_with("rediss://")
                    || u.starts_with("unix://")
                    || u.starts_with("redis+unix://")
                {
                    return u.to_string();
                }
                if self.socket_type == "unix" {
                    let mut url = format!("unix://{u}");
                    if !self.auth.is_empty() {
                        url.push_str(&format!("?pass={}", encode(&pass)));
                        if !user.is_empty() {
                            url.push_str(&format!("&user={}", encode(&user)));
                        }
                    }
                    return url;
                }
                let auth = match (user.is_empty(), pass.is_empty()) {
                    (_, true) => String::new(),
                    (true, false) => format!(":{}@", encode(&pass)),
                    (false, false) => format!("{}:{}@", encode(&user), encode(&pass)),
                };
                let fragment = if self.tls && self.tls_skip_hostname_verification { "#insecure" } else { "" };
                format!("{scheme}://{auth}{u}{fragment}")
            })
            .collect()
    }
}

/// Percent-encodes a URL's user or password.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn defaults_are_upstream_s() {
        let s = Settings::from_vars(&vars(&[])).unwrap();
        assert_eq!((s.listeners.port, s.listeners.grpc_port, s.listeners.debug_port), (8080, 8081, 6070));
        assert_eq!(s.config.runtime_root, "/srv/runtime_data/current");
        assert_eq!(s.config.runtime_appdirectory, "config");
        assert!(s.config.runtime_watch_root && s.stats.use_statsd && !s.stats.use_prometheus);
        assert_eq!(s.redis.socket_type, "unix");
        assert_eq!(s.redis.url, "/var/run/nutcracker/ratelimit.sock");
        assert_eq!(s.header_limit, "RateLimit-Limit");
        assert_eq!(s.near_limit_ratio, 0.8);
        assert_eq!(s.failure_mode, FailureMode::Error);
        assert_eq!(s.redis.urls(), vec!["unix:///var/run/nutcracker/ratelimit.sock".to_string()]);
    }

    /// Envoy Gateway turns tracing on when its telemetry asks for traces: the service starts
    /// and says once that it exports none.
    #[test]
    fn tracing_is_accepted_and_said_to_export_nothing() {
        let s = Settings::from_vars(&vars(&[
            ("TRACING_ENABLED", "true"),
            ("TRACING_SERVICE_NAME", "envoy-ratelimit"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
        ]))
        .unwrap();
        for name in ["TRACING_ENABLED", "TRACING_SERVICE_NAME", "OTEL_EXPORTER_OTLP_ENDPOINT"] {
            assert!(
                s.notices.iter().any(|n| n.starts_with(name) && n.contains("tracing is not exported")),
                "{name}: {:?}",
                s.notices
            );
        }
    }

    #[test]
    fn what_cannot_mean_anything_here_is_refused_by_name() {
        for (name, value) in [
            ("CONFIG_TYPE", "GRPC_XDS_DELTA"),
            ("CONFIG_GRPC_XDS_SERVER_TLS_CA_CERT", "/certs/ca.crt"),
            ("BACKEND_TYPE", "memcache"),
            ("REDIS_PERSECOND", "true"),
            ("MEMCACHE_HOST_PORT", "localhost:11211"),
            ("REDIS_TYPE", "RING"),
            ("XDS_CLIENT_BACKOFF_JITTER", "sometimes"),
            ("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "-1"),
            ("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "soon"),
            ("FAILURE_MODE", "maybe"),
        ] {
            let e = Settings::from_vars(&vars(&[(name, value)])).unwrap_err();
            assert!(e.0.starts_with(name), "{name}: {e}");
        }
        for (name, value) in [
            ("CONFIG_TYPE", "FILE"),
            ("BACKEND_TYPE", "redis"),
            ("REDIS_PERSECOND", "false"),
            ("REDIS_POOL_SIZE", "20"),
            ("EXPIRATION_JITTER_MAX_SECONDS", "300"),
        ] {
            Settings::from_vars(&vars(&[(name, value)])).unwrap();
        }
        let both = Settings::from_vars(&vars(&[("USE_PROMETHEUS", "true")])).unwrap_err();
        assert!(both.0.contains("more than one stats sink"), "{both}");
    }

    /// Envoy Gateway's deployment (internal/infrastructure/kubernetes/ratelimit/resource.go),
    /// every variable it sets by default.
    pub(crate) const ENVOY_GATEWAY_ENV: &[(&str, &str)] = &[
        ("RUNTIME_ROOT", "/data"),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("RUNTIME_IGNOREDOTFILES", "true"),
        ("RUNTIME_WATCH_ROOT", "false"),
        ("LOG_LEVEL", "info"),
        ("USE_STATSD", "false"),
        ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
        ("CONFIG_GRPC_XDS_SERVER_URL", "envoy-gateway:18001"),
        ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit"),
        ("GRPC_SERVER_USE_TLS", "true"),
        ("GRPC_SERVER_TLS_CERT", "/certs/tls.crt"),
        ("GRPC_SERVER_TLS_KEY", "/certs/tls.key"),
        ("GRPC_SERVER_TLS_CA_CERT", "/certs/ca.crt"),
        ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/certs/tls.crt"),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "/certs/tls.key"),
        ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/certs/ca.crt"),
        ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "redis.redis.svc:6379"),
        ("USE_PROMETHEUS", "true"),
        ("PROMETHEUS_ADDR", ":19001"),
        ("PROMETHEUS_MAPPER_YAML", "/etc/statsd-exporter/conf.yaml"),
    ];

    #[test]
    fn envoy_gateway_s_environment_means_what_it_means_upstream() {
        let s = Settings::from_vars(&vars(ENVOY_GATEWAY_ENV)).unwrap();
        let x = s.config.xds.as_ref().expect("CONFIG_TYPE=GRPC_XDS_SOTW");
        assert_eq!((x.node_id.as_str(), x.server_url.as_str()), ("envoy-ratelimit", "envoy-gateway:18001"));
        assert!(x.use_tls && s.config.force_start_without_initial_config);
        assert_eq!((x.client_tls_cert.as_str(), x.server_tls_cacert.as_str()), ("/certs/tls.crt", "/certs/ca.crt"));
        // Upstream's defaults for what Envoy Gateway leaves unset.
        assert_eq!(
            (x.connect_retry_interval, x.backoff_initial, x.backoff_max),
            (Duration::from_secs(3), Duration::from_secs(10), Duration::from_secs(60))
        );
        assert_eq!((x.backoff_factor, x.backoff_jitter, x.max_msg_size), (0.5, true, 0));
        // GRPC_SERVER_TLS_CA_CERT is not upstream's: TLS without client certificates.
        assert!(s.listeners.grpc_server_use_tls && s.listeners.grpc_client_tls_cacert.is_empty());
        assert!(s.stats.use_prometheus && !s.stats.use_statsd);
        assert_eq!(s.stats.prometheus_mapper_yaml, "/etc/statsd-exporter/conf.yaml");
        assert_eq!(s.redis.urls(), vec!["redis://redis.redis.svc:6379".to_string()]);
        // The other xDS variables, as upstream parses them.
        let s = Settings::from_vars(&vars(&[
            ("CONFIG_TYPE", "grpc_xds_sotw"),
            ("CONFIG_GRPC_XDS_NODE_METADATA", "zone=a,skipped,team=x=y"),
            ("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "x-token:abc,x-env:prod"),
            ("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "1048576"),
            ("XDS_CLIENT_BACKOFF_JITTER", "false"),
        ]))
        .unwrap();
        let x = s.config.xds.unwrap();
        let owned = |p: &[(&str, &str)]| p.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<Vec<_>>();
        assert_eq!(x.node_metadata, owned(&[("zone", "a"), ("team", "x=y")]));
        assert_eq!(x.additional_headers, owned(&[("x-token", "abc"), ("x-env", "prod")]));
        assert_eq!((x.max_msg_size, x.backoff_jitter, x.node_id.as_str()), (1_048_576, false, "default"));
        assert!(Settings::from_vars(&vars(&[("CONFIG_GRPC_XDS_NODE_ID", "n")])).unwrap().config.xds.is_none());
    }

    #[test]
    fn redis_client_tuning_means_what_it_can_here_and_refuses_the_rest() {
        // REDIS_POOL_SIZE: the connections to each node (one when unset).
        assert_eq!(Settings::from_vars(&vars(&[])).unwrap().redis.pool_size, 1);
        assert_eq!(Settings::from_vars(&vars(&[("REDIS_POOL_SIZE", "4")])).unwrap().redis.pool_size, 4);
        // What radix v4 refuses, and malformed values, stop the start by name.
        for (name, value) in [
            ("REDIS_POOL_SIZE", "0"),
            ("REDIS_POOL_SIZE", "ten"),
            ("REDIS_POOL_ON_EMPTY_BEHAVIOR", "CREATE"),
            ("REDIS_POOL_ON_EMPTY_BEHAVIOR", "error"),
            ("REDIS_PIPELINE_WINDOW", "soon"),
            ("REDIS_PIPELINE_LIMIT", "-1"),
            ("REDIS_CLUSTER_PIPELINE_PARALLELISM", "-1"),
            ("REDIS_STARTUP_MAX_ELAPSED_TIME", "forever"),
            ("GRPC_MAX_CONNECTION_AGE_GRACE", "x"),
        ] {
            let e = Settings::from_vars(&vars(&[(name, value)])).unwrap_err();
            assert!(e.0.starts_with(&format!("{name}=")), "{name}={value}: {e}");
        }
        // Values this service's behaviour already satisfies.
        for (name, value) in [
            ("REDIS_POOL_ON_EMPTY_BEHAVIOR", "WAIT"),
            ("REDIS_PIPELINE_WINDOW", "150us"),
            ("REDIS_PIPELINE_LIMIT", "8"),
            ("REDIS_POOL_ON_EMPTY_WAIT_DURATION", "1s"),
            ("REDIS_CLUSTER_PIPELINE_PARALLELISM", "0"),
            ("REDIS_STARTUP_INITIAL_INTERVAL", "1s"),
            ("REDIS_STARTUP_MAX_INTERVAL", "30s"),
        ] {
            Settings::from_vars(&vars(&[(name, value)])).unwrap();
        }
        let s = Settings::from_vars(&vars(&[
            ("GRPC_MAX_CONNECTION_AGE_GRACE", "5m"),
            ("REDIS_STARTUP_MAX_ELAPSED_TIME", "3s"),
        ]))
        .unwrap();
        assert_eq!(
            (s.listeners.grpc_max_connection_age_grace, s.redis.startup_max_elapsed_time),
            (Duration::from_secs(300), Duration::from_secs(3))
        );
        let s = Settings::from_vars(&vars(&[])).unwrap();
        assert_eq!(
            (s.listeners.grpc_max_connection_age_grace, s.redis.startup_max_elapsed_time),
            (Duration::from_secs(3600), Duration::ZERO)
        );
    }

    #[test]
    fn redis_urls_follow_socket_type_auth_and_tls() {
        let s = Settings::from_vars(&vars(&[
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "localhost:6379"),
            ("REDIS_AUTH", "user:p@ss"),
            ("REDIS_TLS", "true"),
        ]))
        .unwrap();
        assert_eq!(s.redis.urls(), vec!["rediss://user:p%40ss@localhost:6379".to_string()]);
        let c = Settings::from_vars(&vars(&[
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_TYPE", "cluster"),
            ("REDIS_URL", "a:1,b:2"),
            ("REDIS_AUTH", "pw"),
        ]))
        .unwrap();
        assert_eq!(c.redis.urls(), vec!["redis://:pw@a:1".to_string(), "redis://:pw@b:2".to_string()]);
    }

    #[test]
    fn sentinel_and_cluster_are_reached_over_tcp_sentinel_urls_name_the_master_first() {
        let s = Settings::from_vars(&vars(&[
            ("REDIS_TYPE", "SENTINEL"),
            ("REDIS_URL", "mymaster,10.0.0.1:26379,10.0.0.2:26379"),
            ("REDIS_SENTINEL_AUTH", "s3cret"),
        ]))
        .unwrap();
        assert_eq!(
            (s.redis.kind, s.redis.socket_type.as_str(), s.redis.sentinel_auth.as_str()),
            (RedisType::Sentinel, "tcp", "s3cret")
        );
        assert_eq!(
            Settings::from_vars(&vars(&[("REDIS_TYPE", "cluster"), ("REDIS_URL", "a:1,b:2")]))
                .unwrap()
                .redis
                .socket_type,
            "tcp"
        );
        for (pairs, name) in [
            (&[("REDIS_TYPE", "SENTINEL"), ("REDIS_URL", "mymaster")][..], "REDIS_URL:"),
            (&[("REDIS_TYPE", "SENTINEL")][..], "REDIS_URL:"),
            (
                &[("REDIS_TYPE", "SENTINEL"), ("REDIS_URL", "m,h:1"), ("REDIS_SOCKET_TYPE", "unix")][..],
                "REDIS_SOCKET_TYPE=unix",
            ),
            (
                &[("REDIS_TYPE", "CLUSTER"), ("REDIS_URL", "a:1"), ("REDIS_SOCKET_TYPE", "unix")][..],
                "REDIS_SOCKET_TYPE=unix",
            ),
        ] {
            let e = Settings::from_vars(&vars(pairs)).unwrap_err();
            assert!(e.0.starts_with(name), "{pairs:?}: {e}");
        }
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("10s"), Some(Duration::from_secs(10)));
        assert_eq!(parse_go_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_go_duration("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("x"), None);
    }
}
