//! The Redis the decisions run on: a single server (started degraded: the failure policy
//! answers until Redis first does), a cluster (retried until its nodes answer) or the master
//! the sentinels name; the wait for its first answer at start; the active health probe.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use redis_throttle_client::{Backend, Config, FailurePolicy, Throttle};

use super::Health;
use crate::settings::{FailureMode, RedisSettings, RedisType, Settings};

/// The client's configuration from the settings: the deadline, the failure policy, the
/// connections and the local deny cache.
pub fn client_config(s: &Settings) -> Config {
    let failure = match s.failure_mode {
        // `error` answers with a gRPC error: the client is told to admit (marked degraded)
        // and the service turns a degraded decision into the error.
        FailureMode::Error | FailureMode::Open => FailurePolicy::FailOpen,
        FailureMode::Closed => FailurePolicy::FailClosed,
        FailureMode::Local => FailurePolicy::Local { share: s.failure_local_share },
    };
    let mut config = Config {
        // Unset, a decision waits for Redis up to REDIS_TIMEOUT, as upstream's does.
        deadline: s.decision_deadline.unwrap_or(s.redis.timeout),
        failure,
        connect_timeout: s.redis.timeout,
        // Only Redis's own silence for REDIS_TIMEOUT (or its errors) opens the breaker: a burst
        // past DECISION_DEADLINE is overload, not failure.
        server_timeout: s.redis.timeout,
        connections: s.redis.pool_size,
        ..Config::default()
    };
    // LOCAL_CACHE_SIZE_IN_BYTES is the service's own cache (upstream's meaning), not the client's.
    config.deny_cache_bytes = 0;
    config.breaker.probe_interval = Duration::from_millis(200);
    config
}

/// Connects as the settings say, then waits for Redis's first answer (up to `REDIS_TIMEOUT`),
/// as upstream waits at start; past it, serves anyway: `FAILURE_MODE` answers until Redis does
/// (and `REDIS_STARTUP_MAX_ELAPSED_TIME`, when set, stops the process if it never does).
pub async fn start(s: &RedisSettings, config: Config) -> Result<Throttle, String> {
    let throttle = connect(s, config).await?;
    let waited = Instant::now();
    let first_wait = match s.startup_max_elapsed_time {
        max if max.is_zero() => s.timeout,
        max => s.timeout.min(max),
    };
    while throttle.backend() == Backend::Unknown && waited.elapsed() < first_wait {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    if throttle.backend() == Backend::Unknown {
        tracing::error!(
            "redis: no answer within REDIS_TIMEOUT ({:?}); serving, FAILURE_MODE answers until Redis does",
            s.timeout
        );
        let max = s.startup_max_elapsed_time;
        if !max.is_zero() {
            let throttle = throttle.clone();
            let left = max.saturating_sub(waited.elapsed());
            tokio::spawn(async move {
                tokio::time::sleep(left).await;
                if throttle.backend() == Backend::Unknown {
                    tracing::error!("redis: not reached within REDIS_STARTUP_MAX_ELAPSED_TIME ({max:?}); exiting");
                    eprintln!("redis-throttle-rls: redis not reached within REDIS_STARTUP_MAX_ELAPSED_TIME ({max:?})");
                    std::process::exit(1);
                }
            });
        }
    }
    Ok(throttle)
}

async fn connect(s: &RedisSettings, config: Config) -> Result<Throttle, String> {
    let certs = certificates(s)?;
    match s.kind {
        RedisType::Single => {
            let urls = s.urls();
            let url = urls.first().ok_or("REDIS_URL is empty")?;
            let client = match certs {
                Some(c) => redis::Client::build_with_tls(url.as_str(), c),
                None => redis::Client::open(url.as_str()),
            }
            .map_err(|e| format!("REDIS_URL: {e}"))?;
            Throttle::connect_degraded_client(client, config).map_err(|e| e.to_string())
        }
        RedisType::Cluster => connect_cluster(s, certs, config).await,
        RedisType::Sentinel => connect_sentinel(s, certs, config),
    }
}

/// `REDIS_TLS_CACERT` and the client certificate, when TLS is on and either is given.
fn certificates(s: &RedisSettings) -> Result<Option<redis::TlsCertificates>, String> {
    if !s.tls || (s.tls_cacert.is_empty() && s.tls_client_cert.is_empty()) {
        return Ok(None);
    }
    let read = |p: &str| std::fs::read(p).map_err(|e| format!("cannot read {p}: {e}"));
    let client_tls = if s.tls_client_cert.is_empty() {
        None
    } else {
        Some(redis::ClientTlsConfig { client_cert: read(&s.tls_client_cert)?, client_key: read(&s.tls_client_key)? })
    };
    let root_cert = if s.tls_cacert.is_empty() { None } else { Some(read(&s.tls_cacert)?) };
    Ok(Some(redis::TlsCertificates { client_tls, root_cert }))
}

async fn connect_cluster(
    s: &RedisSettings,
    certs: Option<redis::TlsCertificates>,
    config: Config,
) -> Result<Throttle, String> {
    let mut builder = redis::cluster::ClusterClientBuilder::new(s.urls())
        .connection_timeout(s.timeout)
        .response_timeout(Duration::from_secs(3600));
    if let Some(c) = certs {
        builder = builder.certs(c);
    }
    let client = builder.build().map_err(|e| format!("REDIS_URL: {e}"))?;
    let started = Instant::now();
    loop {
        // REDIS_POOL_SIZE cluster connections, each with its own connection to every node.
        let mut conns = Vec::with_capacity(s.pool_size);
        let mut failed = None;
        while conns.len() < s.pool_size && failed.is_none() {
            match tokio::time::timeout(s.timeout, client.get_async_connection()).await {
                Ok(Ok(conn)) => conns.push(conn),
                Ok(Err(e)) => failed = Some(e.to_string()),
                Err(_) => failed = Some("no answer within REDIS_TIMEOUT".into()),
            }
        }
        let error = match failed {
            None => match Throttle::from_clusters(conns, config).await {
                Ok(t) => return Ok(t),
                Err(e) => e.to_string(),
            },
            Some(e) => e,
        };
        let max = s.startup_max_elapsed_time;
        if !max.is_zero() && started.elapsed() >= max {
            return Err(format!("redis cluster: not reached within REDIS_STARTUP_MAX_ELAPSED_TIME ({max:?}): {error}"));
        }
        tracing::error!("redis cluster: {error}; retrying");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// `REDIS_URL`: `<master name>,<sentinel host:port>,…` (checked by the settings); TLS to the
/// servers and to the sentinels alike, as upstream dials both.
fn connect_sentinel(
    s: &RedisSettings,
    certs: Option<redis::TlsCertificates>,
    config: Config,
) -> Result<Throttle, String> {
    use redis::sentinel::{SentinelClientBuilder, SentinelServerType};
    let mut parts = s.url.split(',').map(str::trim).filter(|p| !p.is_empty());
    let name = parts.next().unwrap_or_default();
    let mut sentinels = Vec::new();
    for part in parts {
        let (host, port) = part
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h.trim_matches(|c| c == '[' || c == ']'), p.parse::<u16>().ok()?)))
            .ok_or_else(|| format!("REDIS_URL: the sentinel '{part}' is not host:port"))?;
        sentinels.push(if s.tls {
            redis::ConnectionAddr::TcpTls {
                host: host.to_string(),
                port,
                insecure: s.tls_skip_hostname_verification,
                tls_params: None,
            }
        } else {
            redis::ConnectionAddr::Tcp(host.to_string(), port)
        });
    }
    let split = |auth: &str| match auth.split_once(':') {
        Some((u, p)) => (Some(u.to_string()), p.to_string()),
        None => (None, auth.to_string()),
    };
    let mut builder = SentinelClientBuilder::new(sentinels, name, SentinelServerType::Master)
        .map_err(|e| format!("REDIS_URL: {e}"))?;
    if !s.auth.is_empty() {
        let (user, pass) = split(&s.auth);
        if let Some(u) = user {
            builder = builder.set_client_to_redis_username(u);
        }
        builder = builder.set_client_to_redis_password(pass);
    }
    if !s.sentinel_auth.is_empty() {
        let (user, pass) = split(&s.sentinel_auth);
        if let Some(u) = user {
            builder = builder.set_client_to_sentinel_username(u);
        }
        builder = builder.set_client_to_sentinel_password(pass);
    }
    if s.tls {
        let mode = if s.tls_skip_hostname_verification { redis::TlsMode::Insecure } else { redis::TlsMode::Secure };
        builder = builder.set_client_to_redis_tls_mode(mode).set_client_to_sentinel_tls_mode(mode);
        if let Some(c) = certs {
            builder = builder.set_client_to_redis_certificates(c.clone()).set_client_to_sentinel_certificates(c);
        }
    }
    let sentinel = builder.build().map_err(|e| format!("REDIS_URL: {e}"))?;
    Throttle::connect_sentinel_degraded(sentinel, config).map_err(|e| e.to_string())
}

/// `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`: upstream's pool pings its connections and turns
/// unhealthy once none is left, traffic or not. Here a peek (quantity 0: nothing written) every
/// `every`, within the decision deadline, says whether Redis answers; an error reply is an
/// answer too.
pub async fn probe(throttle: Throttle, health: Arc<Health>, key: String, every: Duration) {
    let Ok(policy) = redis_throttle_client::Policy::parse("1/s") else { return };
    loop {
        let answered = match throttle.peek(&policy, key.as_bytes()).await {
            Ok(d) => !d.is_degraded(),
            Err(redis_throttle_client::Error::Server(_)) => true,
            Err(_) => false,
        };
        if health.redis_answers.swap(answered, Ordering::Relaxed) != answered {
            tracing::warn!(
                "redis {}",
                if answered {
                    "answers: healthy"
                } else {
                    "does not answer: unhealthy (REDIS_HEALTH_CHECK_ACTIVE_CONNECTION)"
                }
            );
        }
        tokio::time::sleep(every).await;
    }
}
