//! The listeners, as upstream's: gRPC (`GRPC_HOST:GRPC_PORT` or `GRPC_UDS`; `ShouldRateLimit`
//! and the health service `ratelimit`; TLS and mTLS), HTTP (`HOST:PORT`: `/json`,
//! `/healthcheck`), the debug port (`DEBUG_HOST:DEBUG_PORT`: `/rlconfig`, `/stats`), and
//! Prometheus (`PROMETHEUS_ADDR`, `PROMETHEUS_PATH`) when asked for. Each logs the address it
//! bound (`Listening for gRPC on '…'`), so port 0 works.

use std::net::SocketAddr;
use std::sync::Arc;
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
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::App;
use crate::service::{Service, ServiceError};
use crate::settings::{ListenerSettings, StatsSettings};

/// The listeners' tasks: gRPC stops gracefully, the others are dropped.
pub struct Listeners {
    grpc: JoinHandle<Result<(), tonic::transport::Error>>,
    others: Vec<JoinHandle<()>>,
}

impl Listeners {
    /// Waits for the gRPC listener's graceful stop (begun by the stop signal), then drops the rest.
    pub async fn stopped(self) {
        let _ = self.grpc.await;
        for t in self.others {
            t.abort();
        }
    }
}

/// Binds every listener the settings ask for; `stop` turning true stops them.
pub async fn start(
    l: &ListenerSettings,
    stats: &StatsSettings,
    app: Arc<App>,
    stop: watch::Receiver<bool>,
) -> Result<Listeners, String> {
    let grpc = serve_grpc(l, app.clone(), stop.clone()).await?;
    let mut others = Vec::new();
    let http = Router::new().route("/healthcheck", any(healthcheck)).route("/json", any(json)).with_state(app.clone());
    let debug = Router::new()
        .route("/", get(debug_root))
        .route("/rlconfig", get(rlconfig))
        .route("/stats", get(stats_text))
        .with_state(app.clone());
    for (what, addr, router) in
        [("HTTP", address(&l.host, l.port), http), ("debug", address(&l.debug_host, l.debug_port), debug)]
    {
        let listener = bind(what, &addr).await?;
        let mut stop = stop.clone();
        others.push(tokio::spawn(async move {
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(async move {
                    let _ = stop.wait_for(|v| *v).await;
                })
                .await;
        }));
    }
    if stats.use_prometheus && !stats.disable_stats {
        let addr = if stats.prometheus_addr.starts_with(':') {
            format!("0.0.0.0{}", stats.prometheus_addr)
        } else {
            stats.prometheus_addr.clone()
        };
        let listener = bind("Prometheus", &addr).await?;
        let router = Router::new().route(&stats.prometheus_path, get(prometheus)).with_state(app.clone());
        others.push(tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        }));
    }
    Ok(Listeners { grpc, others })
}

/// gRPC: `ShouldRateLimit` and the health service `ratelimit`, kept current.
async fn serve_grpc(
    l: &ListenerSettings,
    app: Arc<App>,
    stop: watch::Receiver<bool>,
) -> Result<JoinHandle<Result<(), tonic::transport::Error>>, String> {
    let (reporter, health_service) = tonic_health::server::health_reporter();
    {
        let (app, mut stop) = (app.clone(), stop.clone());
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
    let mut grpc = tonic::transport::Server::builder().max_connection_age_grace(l.grpc_max_connection_age_grace);
    if let Some(age) = l.grpc_max_connection_age {
        grpc = grpc.max_connection_age(age);
    }
    if l.grpc_server_use_tls {
        let read = |p: &str| std::fs::read(p).map_err(|e| format!("cannot read {p}: {e}"));
        let mut tls = tonic::transport::ServerTlsConfig::new().identity(tonic::transport::Identity::from_pem(
            read(&l.grpc_server_tls_cert)?,
            read(&l.grpc_server_tls_key)?,
        ));
        if !l.grpc_client_tls_cacert.is_empty() {
            tls = tls.client_ca_root(tonic::transport::Certificate::from_pem(read(&l.grpc_client_tls_cacert)?));
        }
        grpc = grpc.tls_config(tls).map_err(|e| format!("GRPC_SERVER_TLS: {e}"))?;
    }
    let router = grpc.add_service(health_service).add_service(RateLimitServiceServer::new(Grpc(app.service.clone())));
    let mut stop = stop;
    let done = async move {
        let _ = stop.wait_for(|v| *v).await;
    };
    if l.grpc_uds.is_empty() {
        let listener = bind("gRPC", &address(&l.grpc_host, l.grpc_port)).await?;
        Ok(tokio::spawn(
            router.serve_with_incoming_shutdown(tokio_stream::wrappers::TcpListenerStream::new(listener), done),
        ))
    } else {
        let _ = std::fs::remove_file(&l.grpc_uds);
        let listener = tokio::net::UnixListener::bind(&l.grpc_uds)
            .map_err(|e| format!("Failed to listen for gRPC on '{}': {e}", l.grpc_uds))?;
        tracing::warn!("Listening for gRPC on '{}'", l.grpc_uds);
        Ok(tokio::spawn(
            router.serve_with_incoming_shutdown(tokio_stream::wrappers::UnixListenerStream::new(listener), done),
        ))
    }
}

struct Grpc(Arc<Service>);

/// gRPC's `grpc-timeout` header: up to 8 digits and a unit (`H`, `M`, `S`, `m`, `u`, `n`).
fn grpc_timeout(v: &str) -> Option<std::time::Duration> {
    use std::time::Duration;
    let (digits, unit) = v.split_at(v.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.checked_mul(3600)?),
        "M" => Duration::from_secs(n.checked_mul(60)?),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[tonic::async_trait]
impl RateLimitService for Grpc {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        tracing::debug!(request = ?request.get_ref(), "ShouldRateLimit");
        let caller_deadline = request
            .metadata()
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .and_then(grpc_timeout)
            // Answer a little before the caller gives up, so that FAILURE_MODE's answer counts.
            .map(|t| (t * 9 / 10).max(std::time::Duration::from_millis(1)));
        match self.0.should_rate_limit_grpc(request.get_ref(), caller_deadline).await {
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

pub fn address(host: &str, port: u16) -> String {
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
