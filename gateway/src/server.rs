//! The listeners, as upstream's: gRPC (`GRPC_HOST:GRPC_PORT` or `GRPC_UDS`; `ShouldRateLimit`
//! and the health service `ratelimit`; TLS and mTLS), HTTP (`HOST:PORT`: `/json`,
//! `/healthcheck`), the debug port (`DEBUG_HOST:DEBUG_PORT`: `/rlconfig`, `/stats`), and
//! Prometheus (`PROMETHEUS_ADDR`, `PROMETHEUS_PATH`) when asked for. Each logs the address it
//! bound (`Listening for gRPC on '…'`), so port 0 works.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use redis_throttle_client::{Backend, Config, FailurePolicy, SystemClock, Throttle};
use tokio::sync::watch;

use crate::config;
use crate::service::{Options, Service, ServiceError};
use crate::settings::{FailureMode, RedisType, Settings};
use crate::source::FileSource;
use crate::stats::Stats;

/// Upstream's health: every component healthy (Redis reached, a configuration loaded when
/// `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`, no SIGTERM received).
pub struct Health {
    pub sigterm: AtomicBool,
    pub config_loaded: AtomicBool,
    need_config: bool,
    /// `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`: Redis's health follows `redis_answers` (kept by
    /// [`probe_redis`]) instead of staying healthy once Redis has answered.
    active_connection: bool,
    redis_answers: AtomicBool,
}

impl Health {
    pub fn healthy(&self, throttle: &Throttle) -> bool {
        let redis = throttle.backend() != Backend::Unknown
            && (!self.active_connection || self.redis_answers.load(Ordering::Relaxed));
        redis
            && !self.sigterm.load(Ordering::Relaxed)
            && (!self.need_config || self.config_loaded.load(Ordering::Relaxed))
    }
}

/// `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`: upstream's pool pings its connections and turns
/// unhealthy once none is left, traffic or not. Here a peek (quantity 0: nothing written) every
/// `every`, within the decision deadline, says whether Redis answers; an error reply is an
/// answer too.
async fn probe_redis(throttle: Throttle, health: Arc<Health>, key: String, every: Duration) {
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

struct App {
    service: Arc<Service>,
    health: Arc<Health>,
}

struct Grpc(Arc<Service>);

#[tonic::async_trait]
impl RateLimitService for Grpc {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        tracing::debug!(request = ?request.get_ref(), "ShouldRateLimit");
        match self.0.should_rate_limit_grpc(request.get_ref()).await {
            Ok(r) => Ok(tonic::Response::new(r)),
            Err(ServiceError::Unavailable(t)) => Err(tonic::Status::unavailable(t)),
            Err(ServiceError::Deadline(t)) => Err(tonic::Status::deadline_exceeded(t)),
            Err(e) => Err(tonic::Status::unknown(e.to_string())),
        }
    }
}

async fn healthcheck(State(app): State<Arc<App>>) -> Response {
    if app.health.healthy(&app.service.throttle) {
        (StatusCode::OK, "OK").into_response()
    } else {
        StatusCode::INTERNAL_SERVER_ERROR.into_response()
    }
}

fn text_status(code: StatusCode) -> Response {
    (code, format!("{}\n", code.canonical_reason().unwrap_or(""))).into_response()
}

async fn json(State(app): State<Arc<App>>, body: Bytes) -> Response {
    let request = match crate::json::request(&body) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!("error: {e}");
            return text_status(StatusCode::BAD_REQUEST);
        }
    };
    let response = match app.service.should_rate_limit(&request).await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!("error: {e}");
            return text_status(StatusCode::BAD_REQUEST);
        }
    };
    let status = match Code::try_from(response.overall_code) {
        Ok(Code::OverLimit) => StatusCode::TOO_MANY_REQUESTS,
        Ok(Code::Ok) => StatusCode::OK,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    (status, [(header::CONTENT_TYPE, "application/json")], crate::json::response(&response).to_string()).into_response()
}

async fn debug_root() -> Response {
    "/rlconfig: print out the currently loaded configuration for debugging\n/stats: print out stats\n".into_response()
}

async fn rlconfig(State(app): State<Arc<App>>) -> Response {
    app.service.config().map(|c| c.dump()).unwrap_or_default().into_response()
}

async fn stats_text(State(app): State<Arc<App>>) -> Response {
    app.service.stats.text().into_response()
}

async fn prometheus(State(app): State<Arc<App>>) -> Response {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], app.service.stats.prometheus()).into_response()
}

fn address(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') { format!("[{host}]:{port}") } else { format!("{host}:{port}") }
}

async fn bind(what: &str, addr: &str) -> Result<tokio::net::TcpListener, String> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("Failed to open {what} listener on '{addr}': {e}"))?;
    let local: SocketAddr = listener.local_addr().map_err(|e| e.to_string())?;
    tracing::warn!("Listening for {what} on '{local}'");
    Ok(listener)
}

/// Connects to Redis as the settings say: a single server (started degraded: the failure
/// policy answers until Redis first does) or a cluster (retried until its nodes answer).
async fn connect(s: &Settings, config: Config) -> Result<Throttle, String> {
    let urls = s.redis_urls();
    let certs = if s.redis_tls && (!s.redis_tls_cacert.is_empty() || !s.redis_tls_client_cert.is_empty()) {
        let read = |p: &str| std::fs::read(p).map_err(|e| format!("cannot read {p}: {e}"));
        let client_tls = if s.redis_tls_client_cert.is_empty() {
            None
        } else {
            Some(redis::ClientTlsConfig {
                client_cert: read(&s.redis_tls_client_cert)?,
                client_key: read(&s.redis_tls_client_key)?,
            })
        };
        let root_cert = if s.redis_tls_cacert.is_empty() { None } else { Some(read(&s.redis_tls_cacert)?) };
        Some(redis::TlsCertificates { client_tls, root_cert })
    } else {
        None
    };
    match s.redis_type {
        RedisType::Single => {
            let url = urls.first().ok_or("REDIS_URL is empty")?;
            let client = match certs {
                Some(c) => redis::Client::build_with_tls(url.as_str(), c),
                None => redis::Client::open(url.as_str()),
            }
            .map_err(|e| format!("REDIS_URL: {e}"))?;
            Throttle::connect_degraded_client(client, config).map_err(|e| e.to_string())
        }
        RedisType::Cluster => {
            let mut builder = redis::cluster::ClusterClientBuilder::new(urls)
                .connection_timeout(s.redis_timeout)
                .response_timeout(Duration::from_secs(3600));
            if let Some(c) = certs {
                builder = builder.certs(c);
            }
            let client = builder.build().map_err(|e| format!("REDIS_URL: {e}"))?;
            let started = std::time::Instant::now();
            loop {
                // REDIS_POOL_SIZE cluster connections, each with its own connection to every node.
                let mut conns = Vec::with_capacity(s.redis_pool_size);
                let mut failed = None;
                while conns.len() < s.redis_pool_size && failed.is_none() {
                    match tokio::time::timeout(s.redis_timeout, client.get_async_connection()).await {
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
                let max = s.redis_startup_max_elapsed_time;
                if !max.is_zero() && started.elapsed() >= max {
                    return Err(format!(
                        "redis cluster: not reached within REDIS_STARTUP_MAX_ELAPSED_TIME ({max:?}): {error}"
                    ));
                }
                tracing::error!("redis cluster: {error}; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        RedisType::Sentinel => {
            use redis::sentinel::{SentinelClientBuilder, SentinelServerType};
            // REDIS_URL: <master name>,<sentinel host:port>,… (checked by the settings).
            let mut parts = s.redis_url.split(',').map(str::trim).filter(|p| !p.is_empty());
            let name = parts.next().unwrap_or_default();
            let mut sentinels = Vec::new();
            for part in parts {
                let (host, port) = part
                    .rsplit_once(':')
                    .and_then(|(h, p)| Some((h.trim_matches(|c| c == '[' || c == ']'), p.parse::<u16>().ok()?)))
                    .ok_or_else(|| format!("REDIS_URL: the sentinel '{part}' is not host:port"))?;
                sentinels.push(if s.redis_tls {
                    redis::ConnectionAddr::TcpTls {
                        host: host.to_string(),
                        port,
                        insecure: s.redis_tls_skip_hostname_verification,
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
            if !s.redis_auth.is_empty() {
                let (user, pass) = split(&s.redis_auth);
                if let Some(u) = user {
                    builder = builder.set_client_to_redis_username(u);
                }
                builder = builder.set_client_to_redis_password(pass);
            }
            if !s.redis_sentinel_auth.is_empty() {
                let (user, pass) = split(&s.redis_sentinel_auth);
                if let Some(u) = user {
                    builder = builder.set_client_to_sentinel_username(u);
                }
                builder = builder.set_client_to_sentinel_password(pass);
            }
            // TLS to the servers and to the sentinels alike, as upstream dials both.
            if s.redis_tls {
                let mode = if s.redis_tls_skip_hostname_verification {
                    redis::TlsMode::Insecure
                } else {
                    redis::TlsMode::Secure
                };
                builder = builder.set_client_to_redis_tls_mode(mode).set_client_to_sentinel_tls_mode(mode);
                if let Some(c) = certs {
                    builder =
                        builder.set_client_to_redis_certificates(c.clone()).set_client_to_sentinel_certificates(c);
                }
            }
            let sentinel = builder.build().map_err(|e| format!("REDIS_URL: {e}"))?;
            Throttle::connect_sentinel_degraded(sentinel, config).map_err(|e| e.to_string())
        }
    }
}

/// Loads the documents into the service: a bad configuration keeps the one in force.
fn apply(service: &Service, health: &Health, merge: bool, docs: std::io::Result<crate::source::Documents>) {
    let loaded = docs
        .map_err(|e| config::ConfigError(format!("cannot read the configuration: {e}")))
        .and_then(|docs| config::load(&docs, &service.stats, merge));
    match loaded {
        Ok(c) => {
            health.config_loaded.store(!c.is_empty(), Ordering::Relaxed);
            service.set_config(c);
            service.stats.counter("ratelimit.service.config_load_success").inc(1);
            tracing::info!("Successfully loaded new configuration");
        }
        Err(e) => {
            service.stats.counter("ratelimit.service.config_load_error").inc(1);
            tracing::error!("Error loading new configuration: {e}");
        }
    }
}

/// Runs the service until `shutdown` resolves (or SIGTERM/SIGINT).
pub async fn run(s: Settings, shutdown: impl std::future::Future<Output = ()> + Send + 'static) -> Result<(), String> {
    let failure = match s.failure_mode {
        // `error` answers with a gRPC error: the client is told to admit (marked degraded)
        // and the service turns a degraded decision into the error.
        FailureMode::Error | FailureMode::Open => FailurePolicy::FailOpen,
        FailureMode::Closed => FailurePolicy::FailClosed,
        FailureMode::Local => FailurePolicy::Local { share: s.failure_local_share },
    };
    let mut client_config = Config {
        deadline: s.decision_deadline.unwrap_or(s.redis_timeout),
        failure,
        connect_timeout: s.redis_timeout,
        connections: s.redis_pool_size,
        ..Config::default()
    };
    // LOCAL_CACHE_SIZE_IN_BYTES is the service's own cache (upstream's meaning), not the client's.
    client_config.deny_cache_bytes = 0;
    client_config.breaker.probe_interval = Duration::from_millis(200);
    let throttle = connect(&s, client_config).await?;
    // Wait for Redis's first answer (up to REDIS_TIMEOUT), as upstream waits at start; past it,
    // serve anyway: FAILURE_MODE answers until Redis does.
    let waited = std::time::Instant::now();
    let first_wait = match s.redis_startup_max_elapsed_time {
        max if max.is_zero() => s.redis_timeout,
        max => s.redis_timeout.min(max),
    };
    while throttle.backend() == Backend::Unknown && waited.elapsed() < first_wait {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    if throttle.backend() == Backend::Unknown {
        tracing::error!(
            "redis: no answer within REDIS_TIMEOUT ({:?}); serving, FAILURE_MODE answers until Redis does",
            s.redis_timeout
        );
        let max = s.redis_startup_max_elapsed_time;
        if !max.is_zero() {
            // Upstream's REDIS_STARTUP_MAX_ELAPSED_TIME: Redis unreachable that long since the
            // start stops the process.
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
    let stats = Arc::new(Stats::new());
    stats.configure(s.use_statsd && !s.disable_stats, s.prometheus_response_time_as_ms);
    let service =
        Arc::new(Service::new(Options::from_settings(&s), stats.clone(), throttle.clone(), Arc::new(SystemClock)));
    let health = Arc::new(Health {
        sigterm: AtomicBool::new(false),
        config_loaded: AtomicBool::new(false),
        need_config: s.healthy_with_at_least_one_config_loaded,
        active_connection: s.redis_health_check_active_connection,
        redis_answers: AtomicBool::new(throttle.backend() != Backend::Unknown),
    });
    if s.redis_health_check_active_connection {
        let key = format!("{}ratelimit_healthcheck", s.cache_key_prefix);
        tokio::spawn(probe_redis(throttle.clone(), health.clone(), key, Duration::from_millis(500)));
    }

    let source = FileSource {
        root: s.runtime_root.clone().into(),
        subdirectory: s.runtime_subdirectory.clone(),
        app_directory: s.runtime_appdirectory.clone(),
        ignore_dot_files: s.runtime_ignore_dot_files,
        watch_root: s.runtime_watch_root,
    };
    apply(&service, &health, s.merge_domain_config, source.read());
    {
        let (service, health, merge) = (service.clone(), health.clone(), s.merge_domain_config);
        let mut first = true;
        tokio::spawn(source.watch(Duration::from_millis(250), move |docs| {
            if std::mem::take(&mut first) {
                return; // loaded above
            }
            apply(&service, &health, merge, docs);
        }));
    }

    let (stop_tx, stop_rx) = watch::channel(false);
    let app = Arc::new(App { service: service.clone(), health: health.clone() });

    // gRPC, with the health service `ratelimit` kept current.
    let (reporter, health_service) = tonic_health::server::health_reporter();
    {
        let (app, mut stop) = (app.clone(), stop_rx.clone());
        tokio::spawn(async move {
            let mut last = None;
            loop {
                let now = app.health.healthy(&app.service.throttle);
                if last != Some(now) {
                    let status = if now {
                        tonic_health::ServingStatus::Serving
                    } else {
                        tonic_health::ServingStatus::NotServing
                    };
                    reporter.set_service_status("ratelimit", status).await;
                    last = Some(now);
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                    _ = stop.changed() => {}
                }
            }
        });
    }
    let mut grpc = tonic::transport::Server::builder().max_connection_age_grace(s.grpc_max_connection_age_grace);
    if let Some(age) = s.grpc_max_connection_age {
        grpc = grpc.max_connection_age(age);
    }
    if s.grpc_server_use_tls {
        let read = |p: &str| std::fs::read(p).map_err(|e| format!("cannot read {p}: {e}"));
        let mut tls = tonic::transport::ServerTlsConfig::new().identity(tonic::transport::Identity::from_pem(
            read(&s.grpc_server_tls_cert)?,
            read(&s.grpc_server_tls_key)?,
        ));
        if !s.grpc_client_tls_cacert.is_empty() {
            tls = tls.client_ca_root(tonic::transport::Certificate::from_pem(read(&s.grpc_client_tls_cacert)?));
        }
        grpc = grpc.tls_config(tls).map_err(|e| format!("GRPC_SERVER_TLS: {e}"))?;
    }
    let router = grpc.add_service(health_service).add_service(RateLimitServiceServer::new(Grpc(service.clone())));
    let grpc_task = {
        let mut stop = stop_rx.clone();
        let done = async move {
            let _ = stop.wait_for(|v| *v).await;
        };
        if s.grpc_uds.is_empty() {
            let listener = bind("gRPC", &address(&s.grpc_host, s.grpc_port)).await?;
            tokio::spawn(
                router.serve_with_incoming_shutdown(tokio_stream::wrappers::TcpListenerStream::new(listener), done),
            )
        } else {
            let _ = std::fs::remove_file(&s.grpc_uds);
            let listener = tokio::net::UnixListener::bind(&s.grpc_uds)
                .map_err(|e| format!("Failed to listen for gRPC on '{}': {e}", s.grpc_uds))?;
            tracing::warn!("Listening for gRPC on '{}'", s.grpc_uds);
            tokio::spawn(
                router.serve_with_incoming_shutdown(tokio_stream::wrappers::UnixListenerStream::new(listener), done),
            )
        }
    };

    let http = Router::new().route("/healthcheck", any(healthcheck)).route("/json", any(json)).with_state(app.clone());
    let debug = Router::new()
        .route("/", get(debug_root))
        .route("/rlconfig", get(rlconfig))
        .route("/stats", get(stats_text))
        .with_state(app.clone());
    let mut tasks = Vec::new();
    for (what, addr, router) in
        [("HTTP", address(&s.host, s.port), http), ("debug", address(&s.debug_host, s.debug_port), debug)]
    {
        let listener = bind(what, &addr).await?;
        let mut stop = stop_rx.clone();
        tasks.push(tokio::spawn(async move {
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(async move {
                    let _ = stop.wait_for(|v| *v).await;
                })
                .await;
        }));
    }
    if s.use_prometheus && !s.disable_stats {
        let addr = if s.prometheus_addr.starts_with(':') {
            format!("0.0.0.0{}", s.prometheus_addr)
        } else {
            s.prometheus_addr.clone()
        };
        let listener = bind("Prometheus", &addr).await?;
        let router = Router::new().route(&s.prometheus_path, get(prometheus)).with_state(app.clone());
        tasks.push(tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        }));
    }
    if s.use_statsd && !s.disable_stats {
        tokio::spawn(crate::stats::statsd_loop(
            stats.clone(),
            address(&s.statsd_host, s.statsd_port),
            s.stats_flush_interval,
        ));
    }

    // SIGTERM: unhealthy at once (upstream's sigterm component), then a graceful stop.
    let mut term =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).map_err(|e| e.to_string())?;
    tokio::select! {
        _ = term.recv() => tracing::warn!("Received SIGTERM, initiating shutdown"),
        _ = tokio::signal::ctrl_c() => tracing::warn!("Received SIGINT, initiating shutdown"),
        _ = shutdown => {}
    }
    health.sigterm.store(true, Ordering::Relaxed);
    let _ = stop_tx.send(true);
    let _ = grpc_task.await;
    for t in tasks {
        t.abort();
    }
    Ok(())
}
