//! Start-up and shutdown: the backend (Redis), the configuration (its source and reloads) and
//! the listeners, each in its own module; [`run`] wires them and waits for SIGTERM or SIGINT.

mod backend;
mod configuration;
mod listeners;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis_throttle_client::{Backend, SystemClock, Throttle};
use tokio::sync::watch;

use crate::mapper::Mapper;
use crate::service::{Options, Service};
use crate::settings::{Settings, StatsSettings};
use crate::stats::Stats;

/// Upstream's health: every component healthy (Redis reached, a configuration loaded when
/// `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`, no SIGTERM received).
pub struct Health {
    pub sigterm: AtomicBool,
    pub config_loaded: AtomicBool,
    need_config: bool,
    /// `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`: Redis's health follows `redis_answers` (kept by
    /// [`backend::probe`]) instead of staying healthy once Redis has answered.
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

/// What the listeners serve from.
struct App {
    service: Arc<Service>,
    health: Arc<Health>,
}

/// The Prometheus names' mapping: upstream's default, or `PROMETHEUS_MAPPER_YAML`'s. A file
/// that cannot be read or parsed leaves every name unmapped, as upstream (which ignores the
/// error) leaves them; here the error is logged.
fn mapper(s: &StatsSettings) -> Mapper {
    if s.prometheus_mapper_yaml.is_empty() {
        return Mapper::upstream_default(s.prometheus_response_time_as_ms);
    }
    let path = &s.prometheus_mapper_yaml;
    match std::fs::read_to_string(path).map_err(|e| e.to_string()).and_then(|y| Mapper::parse(&y)) {
        Ok(m) => {
            tracing::info!("PROMETHEUS_MAPPER_YAML={path}: Prometheus names mapped by this file");
            m
        }
        Err(e) => {
            tracing::error!(
                "PROMETHEUS_MAPPER_YAML={path}: {e}; metrics are exported unmapped (statsd names, `.` as `_`), as upstream exports them then"
            );
            Mapper::default()
        }
    }
}

/// Runs the service until `shutdown` resolves (or SIGTERM/SIGINT).
pub async fn run(s: Settings, shutdown: impl std::future::Future<Output = ()> + Send + 'static) -> Result<(), String> {
    let throttle = backend::start(&s.redis, backend::client_config(&s)).await?;
    let stats = Arc::new(Stats::new());
    stats.configure(s.stats.use_statsd && !s.stats.disable_stats, mapper(&s.stats));
    let service =
        Arc::new(Service::new(Options::from_settings(&s), stats.clone(), throttle.clone(), Arc::new(SystemClock)));
    let health = Arc::new(Health {
        sigterm: AtomicBool::new(false),
        config_loaded: AtomicBool::new(false),
        need_config: s.listeners.healthy_with_at_least_one_config_loaded,
        active_connection: s.redis.health_check_active_connection,
        redis_answers: AtomicBool::new(throttle.backend() != Backend::Unknown),
    });
    if s.redis.health_check_active_connection {
        let key = format!("{}ratelimit_healthcheck", s.cache_key_prefix);
        tokio::spawn(backend::probe(throttle.clone(), health.clone(), key, Duration::from_millis(500)));
    }
    configuration::start(&s.config, &service, &health).await;

    let (stop_tx, stop_rx) = watch::channel(false);
    let app = Arc::new(App { service, health: health.clone() });
    let listeners = listeners::start(&s.listeners, &s.stats, app, stop_rx).await?;
    if s.stats.use_statsd && !s.stats.disable_stats {
        let address = listeners::address(&s.stats.statsd_host, s.stats.statsd_port);
        tokio::spawn(crate::stats::statsd_loop(stats, address, s.stats.stats_flush_interval));
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
    listeners.stopped().await;
    Ok(())
}
